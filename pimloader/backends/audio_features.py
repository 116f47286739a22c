"""The fused CPU audio feature kernel: waveforms in, features straight into the batch.

    spec = FeatureSpec.from_transforms([MelSpectrogram(16000, n_fft=400, hop_length=160,
                                                       n_mels=64),
                                        AmplitudeToDB(top_db=80), FrequencyMasking(8),
                                        TimeMasking(20)], normalize="per_sample")
    freq, time = draw_masks(spec, length)        # per example, torchaudio's torch.rand calls
    cpu_features(waveforms, spec, freq_masks, time_masks, out)

`cpu_features` is one native call (csrc/audio_features.c) for a run of equal-length clips:
pad -> frames -> window -> real FFT -> |X|^power -> mel -> dB / log -> DCT -> masks ->
normalisation. The window, the sparse mel filter bank and the DCT matrix are built here once
per spec from torchaudio's formulas (pimloader.transforms.spectral), so they are the float32
tables torchaudio uses; the FFT and the sums are the kernel's own, in float32.
"""
from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Optional

import numpy as np
import torch

from pimloader import _audio
from pimloader.transforms.audio_draw import draw_masks
from pimloader.transforms.audio_spec import PER_SAMPLE_EPS, WINDOWS, FeatureSpec, MaskSpec
from pimloader.transforms.spectral import create_dct, melscale_fbanks

__all__ = ["FeatureSpec", "MaskSpec", "cpu_features", "draw_masks", "kernel_window",
           "mel_filters", "simd_level"]

ffi, lib = _audio.ffi, _audio.lib
PAD_MODES = {"constant": lib.PIM_AUDIO_PAD_CONSTANT, "reflect": lib.PIM_AUDIO_PAD_REFLECT,
             "replicate": lib.PIM_AUDIO_PAD_REPLICATE, "circular": lib.PIM_AUDIO_PAD_CIRCULAR}
LOG_MELS_OFFSET = 1e-6  # MFCC(log_mels=True): log(mel + LOG_MELS_OFFSET), torchaudio's


def kernel_window(spec: FeatureSpec) -> np.ndarray:
    """The n_fft weights each frame is multiplied by: the window of win_length centred in
    n_fft (torch.stft's padding), with `normalized`'s scale folded in."""
    window = WINDOWS[spec.window](spec.win_length, dtype=torch.float64)
    scale = 1.0
    if spec.normalized is True or spec.normalized == "window":
        scale = 1.0 / float(window.pow(2).sum().sqrt())
    elif spec.normalized == "frame_length":
        scale = spec.n_fft ** -0.5
    left = (spec.n_fft - spec.win_length) // 2
    padded = np.zeros(spec.n_fft, np.float64)
    padded[left:left + spec.win_length] = window.numpy() * scale
    return padded.astype(np.float32)


def mel_filters(spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """torchaudio's filter bank as (first bin, bin count, offset into weights, weights) per
    mel: each triangle's non-zero span only."""
    with warnings.catch_warnings():  # an all-zero filter was warned about by the transform
        warnings.simplefilter("ignore", UserWarning)
        bank = melscale_fbanks(spec.n_freqs, spec.f_min, spec.f_max, spec.n_mels,
                               spec.sample_rate, spec.norm, spec.mel_scale).numpy()
    first, count, weights = [], [], []
    for column in bank.T:
        bins = np.flatnonzero(column)
        start = int(bins[0]) if bins.size else 0
        stop = int(bins[-1]) + 1 if bins.size else 0
        first.append(start)
        count.append(stop - start)
        weights.append(column[start:stop])
    offsets = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int32)
    return (np.array(first, np.int32), np.array(count, np.int32), offsets,
            np.concatenate(weights + [np.zeros(1, np.float32)]).astype(np.float32))


class _NativeSpec:
    """pim_audio_spec_t for a FeatureSpec, owning the arrays it points to."""

    def __init__(self, spec: FeatureSpec):
        self.arrays = [kernel_window(spec)]
        c = self.struct = ffi.new("pim_audio_spec_t *")
        c.n_fft, c.hop_length, c.pad = spec.n_fft, spec.hop_length, spec.pad
        c.center_pad = spec.n_fft // 2 if spec.center else 0
        c.pad_mode, c.power = PAD_MODES[spec.pad_mode], spec.power
        c.window = self._pointer("float *", self.arrays[0])
        if spec.n_mels is not None:
            first, count, at, weights = mel_filters(spec)
            c.n_mels = spec.n_mels
            c.mel_first, c.mel_count = self._pointer("int32_t *", first), self._pointer("int32_t *", count)
            c.mel_at, c.mel_weights = self._pointer("int32_t *", at), self._pointer("float *", weights)
        self._fill_log(spec)
        if spec.n_mfcc is not None:
            c.n_mfcc = spec.n_mfcc
            dct = np.ascontiguousarray(create_dct(spec.n_mfcc, spec.n_mels, spec.dct_norm).numpy())
            c.dct = self._pointer("float *", dct)
        self._fill_output(spec)

    def _pointer(self, ctype: str, array: np.ndarray):
        self.arrays.append(array)
        return ffi.cast(ctype, ffi.from_buffer(array))

    def _fill_log(self, spec: FeatureSpec) -> None:
        c = self.struct
        c.log_kind = (lib.PIM_AUDIO_LOG_DB if spec.to_db else
                      lib.PIM_AUDIO_LOG_LN if spec.log_mels else lib.PIM_AUDIO_LOG_NONE)
        c.multiplier, c.amin = spec.multiplier, spec.amin
        c.db_offset = spec.multiplier * spec.db_multiplier
        c.has_top_db = spec.top_db is not None
        c.top_db = spec.top_db or 0.0
        c.log_offset = LOG_MELS_OFFSET

    def _fill_output(self, spec: FeatureSpec) -> None:
        c = self.struct
        c.mask_value = spec.mask_value
        if spec.normalize is None:
            c.norm_kind = lib.PIM_AUDIO_NORM_NONE
        elif spec.normalize == "per_sample":
            c.norm_kind, c.norm_eps = lib.PIM_AUDIO_NORM_PER_SAMPLE, PER_SAMPLE_EPS
        else:
            c.norm_kind = lib.PIM_AUDIO_NORM_FIXED
            c.norm_mean, c.norm_std = spec.normalize


@lru_cache(maxsize=32)
def _native_spec(spec: FeatureSpec) -> _NativeSpec:
    return _NativeSpec(spec)


def _masks_array(masks, lead: tuple, name: str) -> np.ndarray:
    """masks as an int32 array [clips, K, 2] (None: no mask)"""
    if masks is None:
        return np.zeros((int(np.prod(lead)), 0, 2), np.int32)
    array = np.asarray(masks)
    if array.dtype != np.int32 or array.shape[:-2] != lead or array.shape[-1:] != (2,):
        raise ValueError(f"{name} must be an int32 array {list(lead) + ['K', 2]} of [start, "
                         f"end) pairs, got {array.dtype} {list(array.shape)}")
    return np.ascontiguousarray(array.reshape((int(np.prod(lead)),) + array.shape[-2:]))


def _checked_io(waveforms, spec: FeatureSpec, out) -> tuple[np.ndarray, np.ndarray]:
    waves = np.asarray(waveforms)
    if waves.dtype != np.float32 or waves.ndim not in (2, 3):
        raise ValueError(f"waveforms must be a float32 array [N, L] or [N, channels, L], got "
                         f"{waves.dtype} {list(waves.shape)}")
    spec.check_length(waves.shape[-1])
    shape = waves.shape[:-1] + spec.out_shape(waves.shape[-1])
    if out is None:
        return np.ascontiguousarray(waves), np.empty(shape, np.float32)
    result = np.asarray(out)
    if (result.dtype != np.float32 or result.shape != shape or not result.flags.c_contiguous
            or not result.flags.writeable):
        raise ValueError(f"out must be a writable C-contiguous float32 array {list(shape)}, got "
                         f"{result.dtype} {list(result.shape)}")
    return np.ascontiguousarray(waves), result


def cpu_features(waveforms, spec: FeatureSpec, freq_masks=None, time_masks=None, out=None
                 ) -> np.ndarray:
    """Features of N examples of L samples (float32 [N, L], or [N, channels, L]) into out
    (float32 [N, rows, frames] or [N, channels, rows, frames], allocated when None), in one
    native call; the channels of an example share its top_db floor and normalisation, as in
    torchaudio. freq_masks and time_masks: int32 [N, K, 2] (or [N, channels, K, 2]) arrays of
    [start, end) rows and frames set to spec.mask_value after dB (None: no mask), as
    draw_masks gives them. Returns out. A NaN or infinite sample is refused (ValueError
    naming the clip, counted over N x channels) before anything is written."""
    waves, result = _checked_io(waveforms, spec, out)
    lead = waves.shape[:-1]
    freq = _masks_array(freq_masks, lead, "freq_masks")
    time = _masks_array(time_masks, lead, "time_masks")
    native = _native_spec(spec)
    err = ffi.new("char[]", 256)
    status = lib.pim_audio_features(
        native.struct, ffi.cast("float *", ffi.from_buffer(waves)), int(np.prod(lead)),
        waves.shape[-1], lead[1] if len(lead) == 2 else 1,
        ffi.cast("int32_t *", ffi.from_buffer(freq)), freq.shape[1],
        ffi.cast("int32_t *", ffi.from_buffer(time)), time.shape[1],
        ffi.cast("float *", ffi.from_buffer(result, require_writable=True)),
        spec.rows, spec.frames(waves.shape[-1]), err, len(err))
    if status == -2:
        raise MemoryError("audio features: no memory for the kernel's scratch buffers")
    if status != 0:
        raise ValueError(f"audio features: {ffi.string(err).decode()}")
    return result


def simd_level(request: int = -1) -> int:
    """Which loops the kernel runs (0 portable, 1 AVX2 + FMA); request -1: the best."""
    return lib.pim_audio_simd(request)
