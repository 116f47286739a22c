"""Folders of audio clips, one folder per class, in the Speech Commands layout.

    root/<class>/<clip>.wav|.flac       the samples (class = folder name, sorted, as in
                                        torchvision's ImageFolder)
    root/_background_noise_/*.wav       noise recordings: not a class; `background_noise()`
    root/validation_list.txt            optional split lists (paths relative to root, one a
    root/testing_list.txt               line); split="training" is every other clip

A sample is read as encoded bytes and decoded by libsndfile (pimloader.decode.audio), so
that PIMDataLoader's workers read files the same way whatever the pipeline. Indexing the
dataset gives (waveform, target), the waveform float32 [channels, frames] as torchaudio.load
returns it, resampled to `sample_rate` (when given) with torchaudio's default
sinc_interp_hann filter, averaged over channels when `downmix=True`, then `transform`. A
clip whose rate would need resampling filters over `decode.MAX_AUDIO_SAMPLES` taps is
refused (or warned about) from its header, like one of too many samples.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import torch

from pimloader.transforms.decode import AudioDecoding

from .folders import FileSource
from .index import PathIndex
from .source import AUDIO_LABEL, read_file, register_source

AUDIO_EXTENSIONS = (".wav", ".flac")
NOISE_FOLDER = "_background_noise_"
SPLITS = ("training", "validation", "testing")


class AudioFolder(torch.utils.data.Dataset):
    """Audio clips in class folders (Speech Commands' layout), items (waveform, target).

    root: the folder of class folders. transform: applied to each waveform (a pimloader or
    torchaudio transform, a Compose of them, any callable); target_transform: to each
    target. sample_rate: resample every clip to this rate in Hz (None: keep each file's
    rate; then clips of several rates do not batch into fixed shapes). downmix: average the
    channels (stereo -> mono). split: None (every clip), "training", "validation" or
    "testing", from root's validation_list.txt and testing_list.txt. extensions: the file
    endings that are clips (case-insensitive). noise_folder: the folder of noise recordings
    (not a class). allow_empty: a class folder without clips is an error unless True.
    """

    def __init__(self, root, transform: Optional[Callable] = None,
                 target_transform: Optional[Callable] = None, *,
                 sample_rate: Optional[int] = None, downmix: bool = False,
                 split: Optional[str] = None, extensions: tuple = AUDIO_EXTENSIONS,
                 noise_folder: str = NOISE_FOLDER, allow_empty: bool = False) -> None:
        if sample_rate is not None and (isinstance(sample_rate, bool)
                                        or not isinstance(sample_rate, int) or sample_rate < 1):
            raise ValueError(f"sample_rate must be a positive int (Hz) or None, "
                             f"got {sample_rate!r}")
        if split not in (None,) + SPLITS:
            raise ValueError(f"split must be None or one of {SPLITS}, got {split!r}")
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"AudioFolder: {self.root} is not a folder")
        self.transform = transform
        self.target_transform = target_transform
        self.decoding = AudioDecoding(sample_rate, bool(downmix))
        self.extensions = tuple(e.lower() for e in extensions)
        self.noise_folder = noise_folder
        self.classes = sorted(entry.name for entry in os.scandir(self.root)
                              if entry.is_dir() and entry.name != noise_folder)
        if not self.classes:
            raise FileNotFoundError(f"AudioFolder: no class folders in {self.root}")
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        # the clips' paths and targets in compact arrays, not a list of tuples (index.py)
        self.index = PathIndex.from_pairs(
            self._find_samples(allow_empty, self._split_filter(split)))

    @property
    def samples(self) -> list:
        """[(path, target)] of the clips (targets before target_transform), made anew."""
        return [(self.index.name(i), target)
                for i, target in enumerate(self.index.targets.tolist())]

    @property
    def targets(self) -> list:
        return self.index.targets.tolist()

    @property
    def reader(self) -> "AudioSource":
        """The clips as a source (bytes and target of a sample, as for image folders)."""
        return AudioSource(self.index, AUDIO_LABEL, self.transform, self.target_transform,
                           decoding=self.decoding)

    @property
    def sample_rate(self) -> Optional[int]:
        return self.decoding.sample_rate

    def _is_clip(self, name: str) -> bool:
        return name.lower().endswith(self.extensions)

    def _find_samples(self, allow_empty: bool, keep: Callable[[str], bool]) -> list:
        samples = []
        for name in self.classes:
            folder = self.root / name
            clips = sorted(path for path in folder.rglob("*")
                           if path.is_file() and self._is_clip(path.name))
            if not clips and not allow_empty:
                raise FileNotFoundError(f"AudioFolder: class folder {folder} holds no file "
                                        f"ending in {self.extensions} (allow_empty=True "
                                        f"accepts it)")
            samples += [(str(path), self.class_to_idx[name]) for path in clips
                        if keep(path.relative_to(self.root).as_posix())]
        return samples

    def _split_filter(self, split: Optional[str]) -> Callable[[str], bool]:
        if split is None:
            return lambda relative: True
        listed = {name: self._read_list(name) for name in ("validation", "testing")}
        if split == "training":
            others = listed["validation"] | listed["testing"]
            return lambda relative: relative not in others
        return listed[split].__contains__

    def _read_list(self, split: str) -> set:
        path = self.root / f"{split}_list.txt"
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(f"AudioFolder: split lists need {path} (paths of clips "
                                    f"relative to {self.root}, one a line)") from None
        return {line.strip() for line in lines if line.strip()}

    def __len__(self) -> int:
        return len(self.index)

    def load(self, index: int) -> tuple:
        """(waveform before `transform`, target) of sample `index`."""
        sample = self.reader(index)
        return self.decoding(sample.data, sample.name), sample.target

    def __getitem__(self, index: int) -> tuple:
        waveform, target = self.load(index)
        if self.transform is not None:
            waveform = self.transform(waveform)
        return waveform, target

    def noise_files(self) -> list:
        """The paths of the noise folder's clips, sorted (empty without a noise folder)."""
        folder = self.root / self.noise_folder
        if not folder.is_dir():
            return []
        return sorted(str(path) for path in folder.iterdir()
                      if path.is_file() and self._is_clip(path.name))

    def background_noise(self) -> list:
        """The noise folder's clips as waveforms, decoded like the samples (same
        sample_rate and downmix), e.g. for `transforms.AddBackgroundNoise`."""
        files = self.noise_files()
        if not files:
            raise FileNotFoundError(f"AudioFolder: no noise clips in "
                                    f"{self.root / self.noise_folder}")
        return [self.decoding(read_file(path), path) for path in files]



class AudioSource(FileSource):
    """An AudioFolder's clips as a source: its files, targets and transform, and how its
    clips' bytes become waveforms (`decoding`: sample rate, downmix)."""

    def __init__(self, index: PathIndex, fields=AUDIO_LABEL, transform=None,
                 target_transform: Optional[Callable] = None, *,
                 decoding: AudioDecoding = AudioDecoding()) -> None:
        super().__init__(index, fields, transform, target_transform)
        self.decoding = decoding


@register_source(AudioFolder)
def audio_folder_source(dataset: AudioFolder) -> AudioSource | None:
    """An AudioFolder's source, unless a subclass makes its items its own way (its
    __getitem__ or load overridden: the loader then calls its __getitem__)."""
    kind = type(dataset)
    if kind.__getitem__ is not AudioFolder.__getitem__ or kind.load is not AudioFolder.load:
        return None
    return dataset.reader
