"""Audio classification: an AudioFolder's clips + targets -> batches of features in slots.

For an AudioFolder and a transform (the loader's, or the dataset's own), a producer reads
each clip's bytes (datasets/audio.py), decodes them with libsndfile, resamples and
down-mixes them as the dataset says, and runs the transform on the waveform: the same
steps, in the same order and with the same random draws, as indexing the dataset does, so
a seed gives the batches of torch's DataLoader over the dataset. Samples whose transform
ends in fixed-shape features (the clips cropped or padded to one length) are written
straight into the loader's shared batch slots; a file that cannot be decoded raises a
DecodeError naming it, or is skipped and counted with on_error="skip".

Where the fused audio feature kernel is built (backends/audio_features.py), the spectral
steps (Spectrogram / MelSpectrogram / MFCC, AmplitudeToDB, the masks; pimloader's or
torchaudio's objects) lower to feature runs (audio_features.py here) on the loader's backend
(the DPU log-mel kernel with backend="emulator") or the CPU backend, as the router says, the
masks drawn per clip with torchaudio's calls; otherwise, and for steps that do not lower, the
transform runs in torch, per clip.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from pimloader import decode
from pimloader.backends.select import CPU, Backends, resolve
from pimloader.datasets.source import AUDIO_LABEL, prefetch
from pimloader.loader.fetch import Fetcher
from pimloader.loader.produce import BatchProducer

from pimloader.transforms.decode import AudioDecoding

from .audio_features import FusedFeatures, Pending
from .sourced import SourcedPipeline, reader_for, sourced


@dataclass
class AudioClips(SourcedPipeline):
    """The loader's pipeline for encoded clips (picklable: it goes to workers)."""

    reader: Any          # index -> EncodedSample: a FolderReader, or a CachedReader over one
    decoding: Any        # transforms.decode.AudioDecoding: bytes -> waveform
    transform: Any       # waveform -> features (any callable)
    skip_errors: bool
    fused: Optional[FusedFeatures] = None   # the transform lowered to the feature kernel
    backend: Any = CPU                      # backends.select.BackendSpec of the feature runs

    def make_producer(self, context):
        """A producer of this loader's batches; over an IterableDataset of (bytes, label)
        items, one over each batch of them (IteratedBatches)."""
        if context.is_iterable:
            return self.iterated_batches(context, lambda items: self.producer_over(
                context, dataclasses.replace(self, reader=items)))
        return self.counted(self.producer_over(context, self))

    def producer_over(self, context, pipeline: "AudioClips"):
        """The producer of batches of `pipeline`'s reader's samples."""
        router = context.resources.get(Backends).router(pipeline.backend)
        fetcher = AudioFetcher(pipeline, context.auto_collation, router)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)

    def kernel_backend(self) -> tuple[str, bool]:
        return (self.backend.kind, self.backend.decode) if self.fused is not None else ("", False)

    def source_reader(self):
        return self.reader

    def prepared(self, index: int) -> tuple:
        """(features, or Pending for the kernel; target) of sample `index`."""
        encoded = self.reader(index)
        waveform = self.decoding(encoded.data, encoded.name)
        if self.fused is None:
            return self.transform(waveform), encoded.target
        item = self.fused.prepare(waveform)
        if isinstance(item, Pending):
            item.name = f"sample {index!r} ({encoded.name})"
        return item, encoded.target

    def finished(self, prepared: list, router) -> list:
        """The (features, target) items of prepared samples, in order; the kernel's runs go
        to the backends `router` chooses."""
        if self.fused is None:
            return prepared
        features = self.fused.finish([item for item, _ in prepared], router)
        return [(row, target) for row, (_, target) in zip(features, prepared)]


class AudioFetcher(Fetcher):
    """Samples of an AudioClips pipeline, one by one, in index order."""

    def __init__(self, pipeline: AudioClips, auto_collation: bool, router) -> None:
        super().__init__(auto_collation)
        self.pipeline = pipeline
        self.router = router

    def prefetch(self, index) -> bool:
        return self.auto_collation and prefetch(self.pipeline.reader, index)

    def fetch(self, index, each=None):
        if not self.auto_collation:
            self.current = f"sample {index!r}"
            return self._finished([self.pipeline.prepared(index)])[0]
        samples = []
        prefetch(self.pipeline.reader, index)
        for sample_index in index:
            self.current = f"sample {sample_index!r}"
            try:
                samples.append(self.pipeline.prepared(sample_index))
            except decode.DecodeError as error:
                if not self.pipeline.skip_errors:
                    raise
                self.drop(error)
        if not samples:
            raise self.none_left(index)
        self.current = f"the feature kernel's run over samples {list(index)!r}"
        return self._finished(samples)

    def _finished(self, samples: list) -> list:
        self.kernel_samples += sum(isinstance(item, Pending) for item, _ in samples)
        return self.pipeline.finished(samples, self.router)


DPU_DECODE_REFUSAL = ("audio clips are decoded on the host (libsndfile): DPUs "
                      "decode JPEGs, for the classification pipeline only")


def takes(dataset, transform) -> bool:
    """Datasets whose samples are encoded clips with targets: AudioFolders (not a subclass
    that makes its items its own way), and datasets of encoded bytes under a Decode step."""
    view = sourced(dataset, transform)
    return view is not None and AUDIO_LABEL <= view.source.fields


def build(dataset, transform, options) -> AudioClips | None:
    """The audio path for such a dataset, or None (also when there is no transform: the
    clips then keep their own lengths, which only a collate_fn of the user's batches)."""
    view = sourced(dataset, transform)
    if view is None or not AUDIO_LABEL <= view.source.fields or view.transform is None:
        return None
    reader = reader_for(view.source, options)
    fused = FusedFeatures.lower(view.transform)
    return AudioClips(reader, _native_decoding(_decoding(view), fused), view.transform,
                      options.on_error == "skip", fused,
                      resolve(options, DPU_DECODE_REFUSAL))


def _decoding(view):
    """How the view's clips become waveforms: the Decode step's sample rate and downmix,
    else the source's own (an AudioFolder's), else libsndfile's samples as they are."""
    if view.decode is not None:
        return view.decode.audio_decoding
    return getattr(view.source, "decoding", None) or AudioDecoding()


def _native_decoding(decoding, fused: FusedFeatures | None):
    """The dataset's decoding with the native resampler where the clips go through the
    native steps (its sums differ from conv1d's by float32 rounding; the features stay
    within their tolerance), else as it is."""
    if fused is None or fused.native_steps is None:
        return decoding
    from pimloader.backends.audio_waveform import resample
    return dataclasses.replace(decoding, resample=resample)
