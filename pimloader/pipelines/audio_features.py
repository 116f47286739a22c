"""The fused feature kernel's part of the audio pipeline: a transform split at its first
spectral step, the waveform steps run per clip as Python, the spectral steps (Spectrogram /
MelSpectrogram / MFCC, AmplitudeToDB, FrequencyMasking, TimeMasking) lowered to one
`FeatureRun` per run of consecutive clips of one shape and one backend: the router
(backends/select.py) gives each clip the loader's backend where it computes the clip's
features (the DPU log-mel kernel takes mono clips of the specs it computes), else the CPU
backend's kernel (`backends.audio_features.cpu_features`).

The waveform steps, when they are all pimloader's augmentations, run natively too
(backends/audio_waveform.py): per clip their random numbers are drawn with their torch calls,
and one call per run applies them, each clip straight into the array the feature kernel
reads.

Random numbers stay where the transform draws them: per clip, the waveform steps draw
theirs, then the clip's masks are drawn with torchaudio's calls (`draw_masks`, per channel
where the masks are iid) before the next clip is read, so a seed gives the masks of the
transform applied clip by clip. The kernel takes [channels, L] float32 clips (the channels
of a clip share its top_db floor, as in torchaudio); anything else the waveform steps return
(a 1-D waveform, another dtype) runs the spectral steps in torch instead, in its turn.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from pimloader.backends.base import FEATURES, FeatureRun
from pimloader.transforms.registry import ELEMENTWISE, SPECTROGRAM, flatten, op_of


def kernel_module():
    """backends.audio_features, or None where this build has no fused audio kernel."""
    try:
        from pimloader.backends import audio_features
    except ImportError:
        return None
    return audio_features


def native_waveform_steps(steps: list):
    """backends.audio_waveform.WaveformSteps for `steps`, or None (not built, or a step it
    does not lower: the steps then run in torch)."""
    try:
        from pimloader.backends.audio_waveform import WaveformSteps
    except ImportError:
        return None
    return WaveformSteps.lower(steps)


@dataclass
class Pending:
    """A clip whose features the kernel will compute: its waveform [C, L] and masks."""

    waveform: torch.Tensor
    freq_masks: np.ndarray   # int32 [C, K, 2]
    time_masks: np.ndarray
    name: str = "a clip"     # what errors call it
    operations: list = None  # the native waveform steps drawn for it (None: none to run)
    shape: tuple = None      # [C, L] after them

    def __post_init__(self):
        if self.shape is None:
            self.shape = tuple(self.waveform.shape)


@dataclass
class FusedFeatures:
    """A transform lowered to waveform steps + one feature kernel (picklable)."""

    waveform_steps: list
    feature_steps: list      # the same spectral steps, run in torch where the kernel is not
    spec: Any                # backends.audio_features.FeatureSpec
    native_steps: Any = None  # backends.audio_waveform.WaveformSteps for waveform_steps

    @classmethod
    def lower(cls, transform) -> Optional["FusedFeatures"]:
        """The transform split at its first spectral step, or None when the kernel is not
        built or the steps from there on do not lower (they then run in torch)."""
        kernel = kernel_module()
        steps = flatten(transform)
        first = next((i for i, step in enumerate(steps)
                      if _role(step) == SPECTROGRAM), None)
        if kernel is None or first is None:
            return None
        normalize, spectral = _fixed_normalization(steps[first:])
        try:
            spec = kernel.FeatureSpec.from_transforms(spectral, normalize=normalize)
        except (ValueError, TypeError):
            return None
        return cls(steps[:first], steps[first:], spec, native_waveform_steps(steps[:first]))

    def prepare(self, waveform: torch.Tensor):
        """The clip through the waveform steps, then Pending (its masks drawn) for the
        kernel, or its features computed in torch."""
        if self.native_steps is not None and self.native_steps.takes(waveform):
            operations, shape = self.native_steps.draw(tuple(waveform.shape))
            return self._pending(waveform, shape, operations)
        for step in self.waveform_steps:
            waveform = step(waveform)
        if self._kernel_takes(waveform):
            return self._pending(waveform, tuple(waveform.shape))
        for step in self.feature_steps:
            waveform = step(waveform)
        return waveform

    def _pending(self, waveform, shape: tuple, operations=None) -> Pending:
        self.spec.check_length(shape[-1])
        freq, time = kernel_module().draw_masks(self.spec, shape[-1], channels=shape[0])
        return Pending(waveform, freq, time, operations=operations, shape=shape)

    def _kernel_takes(self, waveform) -> bool:
        return (isinstance(waveform, torch.Tensor) and waveform.dim() == 2
                and waveform.dtype == torch.float32 and not waveform.requires_grad)

    def finish(self, prepared: list, router) -> list:
        """Each clip's features: Pending ones computed by the feature kernel `router` gives
        them (backends.select.Router), one run per stretch of consecutive clips of one shape
        and one kernel; the others as they are."""
        out = list(prepared)
        kernels = [router.kernel_for(FEATURES, (self.spec, item.shape))
                   if isinstance(item, Pending) else None for item in out]
        start = 0
        while start < len(out):
            if kernels[start] is None:
                start += 1
                continue
            shape, stop = out[start].shape, start + 1
            while (stop < len(out) and kernels[stop] is kernels[start]
                   and out[stop].shape == shape):
                stop += 1
            out[start:stop] = self._run(out[start:stop], kernels[start])
            start = stop
        return out

    def _run(self, run: list, kernel) -> list:
        """Features [C, rows, frames] of clips of one shape [C, L], in one kernel run."""
        feature_run = FeatureRun(self._waveforms(run), self.spec,
                                 _stacked([clip.freq_masks for clip in run]),
                                 _stacked([clip.time_masks for clip in run]),
                                 [clip.name for clip in run])
        features = kernel.submit(feature_run).wait()
        return list(torch.from_numpy(features))

    def _waveforms(self, run: list) -> np.ndarray:
        """The clips' final waveforms as one float32 array [N, C, L]: the native waveform
        steps' output, or the clips stacked."""
        if self.native_steps is None:
            return torch.stack([clip.waveform for clip in run]).numpy()
        return self.native_steps.run([clip.waveform for clip in run],
                                     [clip.operations or [] for clip in run])


def _fixed_normalization(steps: list) -> tuple:
    """A last step that is an elementwise op with audio `features` (torchvision's Normalize
    with one mean and one std, the same for every channel of the features) as
    FeatureSpec's normalize=(mean, std), which the kernel applies after the masks as that
    step would; and the steps before it."""
    last = steps[-1]
    op = op_of(last)
    if op is not None and op.role == ELEMENTWISE and op.features is not None:
        features = op.features(last)
        if features is not None:
            return features["normalize"], steps[:-1]
    return None, steps


def _role(step):
    op = op_of(step)
    return None if op is None else op.role


def _stacked(masks: list):
    """The clips' masks of one axis as one int32 array [N, C, K, 2], or None (no mask on
    that axis: cpu_features' own way of saying it)."""
    stacked = np.ascontiguousarray(np.stack(masks).astype(np.int32, copy=False))
    return stacked if stacked.shape[-2] else None
