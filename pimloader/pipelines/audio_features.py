"""The fused feature kernel's part of the audio pipeline: a transform split at its first
spectral step, the waveform steps run per clip as Python, the spectral steps (Spectrogram /
MelSpectrogram / MFCC, AmplitudeToDB, FrequencyMasking, TimeMasking) lowered to one call of
`backends.audio_features.cpu_features` per run of equal-length clips.

Random numbers stay where the transform draws them: per clip, the waveform steps draw
theirs, then the clip's masks are drawn with torchaudio's calls (`draw_masks`) before the
next clip is read, so a seed gives the masks of the transform applied clip by clip. A clip
the kernel would not compute as torch does (a 1-D waveform; several channels where
AmplitudeToDB's top_db floors them together or masks are iid per channel) runs the
spectral steps in torch instead, in its turn.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

_SPECTRAL_FIRST = ("Spectrogram", "MelSpectrogram", "MFCC")


def kernel_module():
    """backends.audio_features, or None where this build has no fused audio kernel."""
    try:
        from pimloader.backends import audio_features
    except ImportError:
        return None
    return audio_features


def flattened(transform) -> list:
    """The steps of a Compose (torchvision's, nested ones too) or nn.Sequential."""
    if isinstance(transform, torch.nn.Sequential):
        steps = list(transform)
    elif hasattr(transform, "transforms") and isinstance(transform.transforms, (list, tuple)):
        steps = list(transform.transforms)
    else:
        return [transform]
    return [inner for step in steps for inner in flattened(step)]


@dataclass
class Pending:
    """A clip whose features the kernel will compute: its waveform [C, L] and masks."""

    waveform: torch.Tensor
    freq_masks: np.ndarray   # int32 [K, 2]
    time_masks: np.ndarray


@dataclass
class FusedFeatures:
    """A transform lowered to waveform steps + one feature kernel (picklable)."""

    waveform_steps: list
    feature_steps: list      # the same spectral steps, run in torch where the kernel is not
    spec: Any                # backends.audio_features.FeatureSpec
    channel_safe: bool       # several channels give torch's features row by row

    @classmethod
    def lower(cls, transform) -> Optional["FusedFeatures"]:
        """The transform split at its first spectral step, or None when the kernel is not
        built or the steps from there on do not lower (they then run in torch)."""
        kernel = kernel_module()
        steps = flattened(transform)
        first = next((i for i, step in enumerate(steps)
                      if type(step).__name__ in _SPECTRAL_FIRST), None)
        if kernel is None or first is None:
            return None
        try:
            spec = kernel.FeatureSpec.from_transforms(steps[first:])
        except (ValueError, TypeError):
            return None
        channel_safe = spec.top_db is None and not any(m.iid_masks for m in spec.masks)
        return cls(steps[:first], steps[first:], spec, channel_safe)

    def prepare(self, waveform: torch.Tensor):
        """The clip through the waveform steps, then Pending (its masks drawn) for the
        kernel, or its features computed in torch."""
        for step in self.waveform_steps:
            waveform = step(waveform)
        if self._kernel_takes(waveform):
            self.spec.check_length(waveform.shape[-1])
            freq, time = kernel_module().draw_masks(self.spec, waveform.shape[-1])
            return Pending(waveform, freq, time)
        for step in self.feature_steps:
            waveform = step(waveform)
        return waveform

    def _kernel_takes(self, waveform) -> bool:
        return (isinstance(waveform, torch.Tensor) and waveform.dim() == 2
                and waveform.dtype == torch.float32 and not waveform.requires_grad
                and (waveform.shape[0] == 1 or self.channel_safe))

    def finish(self, prepared: list) -> list:
        """Each clip's features: Pending ones computed by the kernel, one call per run of
        consecutive clips of one shape; the others as they are."""
        out = list(prepared)
        start = 0
        while start < len(out):
            if not isinstance(out[start], Pending):
                start += 1
                continue
            shape, stop = out[start].waveform.shape, start + 1
            while (stop < len(out) and isinstance(out[stop], Pending)
                   and out[stop].waveform.shape == shape):
                stop += 1
            out[start:stop] = self._run(out[start:stop])
            start = stop
        return out

    def _run(self, run: list) -> list:
        """Features of clips of one shape [C, L]: C rows per clip, masks shared by its rows."""
        kernel = kernel_module()
        channels = run[0].waveform.shape[0]
        waves = torch.cat([clip.waveform for clip in run]).numpy()
        freq = np.repeat(_stacked([clip.freq_masks for clip in run]), channels, axis=0)
        time = np.repeat(_stacked([clip.time_masks for clip in run]), channels, axis=0)
        features = kernel.cpu_features(waves, self.spec, freq, time)
        batch = torch.from_numpy(features).reshape((len(run), channels) + features.shape[1:])
        return list(batch)


def _stacked(masks: list) -> np.ndarray:
    return np.ascontiguousarray(np.stack(masks).astype(np.int32, copy=False))
