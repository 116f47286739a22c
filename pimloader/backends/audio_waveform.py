"""The audio pipeline's waveform steps in native code: one call per run of clips.

pimloader's waveform augmentations (CropOrPad, RandomCropOrPad, RandomTimeShift, RandomGain,
AddBackgroundNoise) draw their random numbers in `make_params`, from the clip's shape alone,
with torch's calls. `WaveformSteps.draw` replays those calls per clip, in the transform's
order, through each step's registered draw (transforms/audio_draw.py), and turns the draws
into operations (csrc/include/pim_audio_wave.h):

    CropOrPad / RandomCropOrPad         place(start, length, fill)
    RandomTimeShift                     place(-shift, size, fill), or roll(shift)
    RandomGain                          gain(10 ** (gain_db / 20))
    AddBackgroundNoise                  noise(which, offset, snr_db)

(nothing for a step whose coin skipped it); `WaveformSteps.run` applies every clip's
operations in one native call (csrc/audio_waveform.c), writing each clip straight into its
row of the [N, channels, length] float32 array the feature kernel reads. Crop, pad, shift and
gain give torch's floats exactly; a noise mix differs from torch's only in how the two
energies are summed (double here, float32 in torch): tests/test_audio_waveform_native.py
states and asserts the bound.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import numpy as np
import torch

from pimloader import _audio
from pimloader.transforms.registry import WAVEFORM, op_of
from pimloader.transforms.resample import _cached_filters, _reduced_rates

__all__ = ["WaveformSteps", "OP_DTYPE", "resample"]

ffi, lib = _audio.ffi, _audio.lib
OP_DTYPE = np.dtype([("kind", "<i4"), ("noise", "<i4"), ("at", "<i8"), ("length", "<i8"),
                     ("value", "<f8")])
NEGLIGIBLE = 1e-20   # resampling: filter taps below this times the largest are left out
if ffi.sizeof("pim_wave_op_t") != OP_DTYPE.itemsize:
    raise ImportError("pim_wave_op_t and OP_DTYPE disagree: rebuild pimloader._audio")


# the operations the steps' draws give (transforms/audio_draw.py), as the kernel's kinds
_KINDS = {"place": lib.PIM_WAVE_PLACE, "roll": lib.PIM_WAVE_ROLL, "gain": lib.PIM_WAVE_GAIN,
          "noise": lib.PIM_WAVE_NOISE}


def _lowered(step) -> bool:
    """Whether `step` is a registered waveform op (pimloader's own augmentations, exactly:
    a subclass may compute something else)."""
    op = op_of(step)
    return op is not None and op.role == WAVEFORM


class WaveformSteps:
    """A list of waveform steps run natively (picklable: it goes to the loader's workers;
    the native noise table is rebuilt in each process)."""

    def __init__(self, steps: list) -> None:
        self.steps = list(steps)
        self._noise_base = []
        base = 0
        for step in self.steps:
            self._noise_base.append(base)
            base += len(_noises(step))
        self._table = None

    @classmethod
    def lower(cls, steps: list) -> Optional["WaveformSteps"]:
        """The steps as native operations, or None when one of them is not pimloader's own
        waveform augmentation."""
        if not all(_lowered(step) for step in steps):
            return None
        return cls(steps)

    def __getstate__(self):
        return dict(self.__dict__, _table=None)

    @staticmethod
    def takes(waveform) -> bool:
        """Whether the native steps take this waveform: float32 [channels, time]."""
        return (isinstance(waveform, torch.Tensor) and waveform.dim() == 2
                and waveform.dtype == torch.float32 and waveform.device.type == "cpu"
                and not waveform.requires_grad and waveform.shape[-1] > 0)

    def draw(self, shape: tuple) -> tuple[list, tuple]:
        """(operations, the clip's shape after them) for a clip of `shape` [channels, time]:
        each step's random numbers drawn with its torch calls, in order."""
        operations, size = [], shape[-1]
        for step, base in zip(self.steps, self._noise_base):
            drawn, size = op_of(step).draw(step, (shape[0], size))
            operations += [(_KINDS[kind], base + noise if kind == "noise" else noise, at,
                            length, value) for kind, noise, at, length, value in drawn]
        return operations, (shape[0], size)

    def run(self, sources: list, operations: list, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The clips (float32 [channels, time] tensors) through their operations (lists
        from `draw`; [] for a clip already final) into out, float32 [N, channels, length]
        (allocated when None), in one native call."""
        sources = [source.contiguous() for source in sources]
        channels = sources[0].shape[0]
        length = _final_length(sources[0].shape[-1], operations[0])
        if out is None:
            out = np.empty((len(sources), channels, length), np.float32)
        ops = np.array([op for clip in operations for op in clip], OP_DTYPE)
        starts = np.zeros(len(sources) + 1, np.int64)
        np.cumsum([len(clip) for clip in operations], out=starts[1:])
        table, count = self._noise_table()
        err = ffi.new("char[]", 256)
        status = lib.pim_audio_waveforms(
            ffi.new("float *[]", [ffi.cast("float *", s.data_ptr()) for s in sources]),
            ffi.new("int64_t[]", [s.shape[-1] for s in sources]), len(sources), channels,
            ffi.cast("pim_wave_op_t *", ffi.from_buffer(ops)),
            ffi.cast("int64_t *", ffi.from_buffer(starts)), table, count,
            ffi.cast("float *", ffi.from_buffer(out, require_writable=True)), length, err,
            len(err))
        if status == -2:
            raise MemoryError("waveform steps: no memory for the scratch buffers")
        if status != 0:
            raise ValueError(f"waveform steps: {ffi.string(err).decode()}")
        return out

    def _noise_table(self):
        """(pim_wave_noise_t array, count) of every AddBackgroundNoise step's clips, as
        float32 [channels, time], in the order of the steps (made once per process)."""
        if self._table is None:
            noises = [noise.to(torch.float32).reshape(-1, noise.shape[-1]).contiguous().numpy()
                      for step in self.steps for noise in _noises(step)]
            table = ffi.new("pim_wave_noise_t[]", max(len(noises), 1))
            for entry, noise in zip(table, noises):
                entry.samples = ffi.cast("float *", ffi.from_buffer(noise))
                entry.channels, entry.length = noise.shape
            self._table = (table, len(noises), noises)
        return self._table[:2]


@lru_cache(maxsize=32)
def _polyphase(orig: int, new: int, dtype: torch.dtype) -> tuple:
    """torchaudio's filters for orig -> new (rates divided by their gcd; transforms/_resample),
    as float32 [new, taps], with each phase's span of taps that matter (first, count): the
    taps beyond the filter's zero crossings are its clamped window tails, cos^2(pi / 2) ~
    1e-33 times the sinc there, some 1e-24 in float32, and are left out (all of them together
    move an output by less than taps * NEGLIGIBLE of the clip's peak)."""
    filters, width = _cached_filters(orig, new, 6, 0.99, "sinc_interp_hann", None, dtype)
    weights = np.ascontiguousarray(filters.reshape(new, -1).numpy())
    nonzero = np.abs(weights) > NEGLIGIBLE * np.abs(weights).max()
    first = np.where(nonzero.any(1), nonzero.argmax(1), 0).astype(np.int32)
    last = np.where(nonzero.any(1), weights.shape[1] - nonzero[:, ::-1].argmax(1), 0)
    return weights, width, first, (last - first).astype(np.int32)


def resample(waveform: torch.Tensor, orig_freq: int, new_freq: int) -> torch.Tensor:
    """torchaudio.functional.resample(waveform, orig_freq, new_freq) with its default filter
    (sinc_interp_hann, 6 zero crossings, rolloff 0.99) for a float32 [channels, time]
    waveform, computed over each output's non-zero taps only (csrc/audio_waveform.c): the
    same products, summed in another order than conv1d's (tests/test_audio_waveform_native.py
    states the tolerance)."""
    orig, new = _reduced_rates(orig_freq, new_freq)
    if orig == new:
        return waveform
    weights, width, first, count = _polyphase(orig, new, waveform.dtype)
    source = waveform.contiguous()
    length = source.shape[-1]
    kept = min(-(-new * length // orig), (length // orig + 1) * new)
    out = torch.empty(source.shape[0], kept, dtype=torch.float32)
    err = ffi.new("char[]", 256)
    status = lib.pim_audio_resample(
        ffi.cast("float *", source.data_ptr()), length, source.shape[0], orig, new, width,
        ffi.cast("float *", ffi.from_buffer(weights)), weights.shape[1],
        ffi.cast("int32_t *", ffi.from_buffer(first)), ffi.cast("int32_t *", ffi.from_buffer(count)),
        ffi.cast("float *", out.data_ptr()), kept, err, len(err))
    if status == -2:
        raise MemoryError("resampling: no memory for the padded row")
    if status != 0:
        raise ValueError(f"resampling: {ffi.string(err).decode()}")
    return out


def _noises(step) -> list:
    """The noise clips a step mixes in (AddBackgroundNoise's `noises`)."""
    return getattr(step, "noises", None) or []


def _final_length(size: int, operations: list) -> int:
    for kind, _, _, length, _ in operations:
        if kind == lib.PIM_WAVE_PLACE:
            size = length
    return size
