"""The DPU backend's feature runs: a `FeatureRun` on the DPU log-mel kernel (audio.py).

`DpuFeatureRuns` is the DPU backend's kernel for "features" runs (registered in backend.py).
The kernel computes frames -> Hann window -> FFT -> power -> mel -> dB (top_db) -> masks of
mono clips (`DpuMelSpec.from_feature_spec` says which specs); a spec's `normalize` runs on
the host after the kernel, with the CPU kernel's arithmetic (`normalise_features`). What it
cannot take goes, through the router, to the CPU backend:
- a spec the kernel does not compute (MFCC, a spectrogram without mels or dB, windows other
  than Hann, `pad`, `normalized`, power other than 2, n_fft / 2 not a product of 2, 3, 4, 5,
  more than MAX_MASKS masks on an axis, tables that do not fit WRAM at this NR_TASKLETS);
- a clip of more than one channel (the kernel takes [N, L]; a stereo clip's channels share
  one top_db floor, which the kernel keeps per clip), or longer than the kernel's
  MAX_LENGTH samples;
- everything, on `backend="upmem"`: this host module drives pimloader's libdpu emulator
  only (`emulator.DpuSet`); an SDK build of it is not done (docs/audio.md).

The kernel runs one spec at a time on one DPU set: a run of another spec closes the set and
opens one for it. Runs complete inside `submit` (the kernel's host side pushes,
launches and gathers synchronously). Errors name the DPU and the run's clips by the names
the pipeline gave them.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional

import numpy as np

from pimloader.transforms.audio_spec import normalise_features

from ..base import Done, FeatureRun, Kernel
from .audio import DpuMelFeatures, mask_q16, pack_tables, wram_shortfall
from .audio_tables import MAX_MASKS, DpuMelSpec, DpuMelTables

MAX_LENGTH = 1 << 24   # PIM_AUDIO_MAX_LENGTH, audio.py's


class DpuFeatureRuns(Kernel):
    """Feature runs on `nr_dpus` (emulated) DPUs of `nr_tasklets` tasklets, for `backend`."""

    def __init__(self, backend, nr_dpus: int, nr_tasklets: int, profile: str,
                 emulated: bool) -> None:
        super().__init__(backend)
        self.nr_dpus, self.nr_tasklets = nr_dpus, nr_tasklets
        self.profile, self.emulated = profile, emulated
        self._refusals: dict = {}      # FeatureSpec -> what the kernel does not do ("" none)
        self._spec = None              # the spec the open DPU set runs
        self._kernel = None            # its DpuMelFeatures

    def unsupported(self, item: tuple) -> str:
        spec, clip_shape = item
        if not self.emulated:
            return ("compute audio features on UPMEM DPUs yet (its host module drives "
                    "pimloader's emulator only)")
        if spec not in self._refusals:
            self._refusals[spec] = self._spec_refusal(spec, self.nr_tasklets)
        channels, length = clip_shape
        if self._refusals[spec]:
            return self._refusals[spec]
        if channels != 1:
            return "take clips of more than one channel"
        if length > MAX_LENGTH:
            return f"take clips longer than {MAX_LENGTH} samples"
        return ""

    @staticmethod
    def _spec_refusal(spec, nr_tasklets: int) -> str:
        """What of `spec` the kernel does not compute, checked without DPUs ("" none)."""
        per_axis = Counter(mask.axis for mask in spec.masks)
        crowded = [axis for axis, count in per_axis.items() if count > MAX_MASKS]
        if crowded:
            return f"draw more than {MAX_MASKS} masks on the {crowded[0]} axis"
        try:
            mel_spec = DpuMelSpec.from_feature_spec(_without_normalize(spec))
            mask_q16(spec.mask_value)
        except ValueError as error:
            return f"compute these features ({error})"
        tables, _ = pack_tables(DpuMelTables.build(mel_spec))
        shortfall = wram_shortfall(mel_spec, len(tables), nr_tasklets)
        return f"fit these features in WRAM ({shortfall})" if shortfall else ""

    def submit(self, run: FeatureRun) -> Done:
        kernel = self._kernel_for(run.spec)
        waves = run.waveforms.reshape(len(run.waveforms), -1)   # mono: [N, 1, L] -> [N, L]
        for i, wave in enumerate(waves):
            if not np.isfinite(wave).all():
                raise ValueError(f"DPU log-mel: {run.clips[i]} has a NaN or infinite sample")
        features = kernel(waves, _mono(run.freq_masks), _mono(run.time_masks), names=run.clips)
        features = features[:, None]                           # [N, 1, n_mels, frames]
        return Done(normalise_features(features, run.spec.normalize))

    def _kernel_for(self, spec):
        """The DPU set running `spec` (opened on first use; another spec's is closed)."""
        if self._spec != spec:
            self.close()
            self._kernel = DpuMelFeatures(_without_normalize(spec), nr_dpus=self.nr_dpus,
                                          nr_tasklets=self.nr_tasklets, profile=self.profile)
            self._spec = spec
        return self._kernel

    def close(self) -> None:
        kernel, self._kernel, self._spec = self._kernel, None, None
        if kernel is not None:
            kernel.close()


def _without_normalize(spec):
    return dataclasses.replace(spec, normalize=None)


def _mono(masks: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """[N, 1, K, 2] masks of mono clips as the kernel's [N, K, 2]."""
    return None if masks is None else masks[:, 0]
