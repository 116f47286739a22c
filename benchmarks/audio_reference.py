"""The float reference the DPU log-mel path is measured against (tests and benchmarks; not
part of the package, which does not depend on torchaudio): torchaudio's
`MelSpectrogram` + `AmplitudeToDB` when torchaudio imports (`pip install --no-deps
torchaudio` beside torch), else the same maths written in torch (torch.stft, the filter bank
of `audio_tables.mel_filter_bank`, torchaudio's amplitude_to_DB formula). `which` says which
one ran.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from pimloader.backends.dpu.audio_tables import DpuMelSpec, mel_filter_bank  # torchaudio's, in pimloader


def _torchaudio():
    try:
        import torchaudio.transforms as transforms
    except Exception:  # not installed, or built for another torch
        return None
    return transforms


def which() -> str:
    return "torchaudio" if _torchaudio() is not None else "torch formulation"


def reference_db(waveforms, spec: DpuMelSpec, freq_masks=None, time_masks=None, mask_value: float = 0.0,
                 dtype=torch.float32) -> np.ndarray:
    """float dB [N, n_mels, frames] of float waveforms [N, L] (each clip its own top_db cut,
    as AmplitudeToDB does on a 2-D spectrogram); masks as `audio_tables.pack_masks` takes them."""
    x = torch.as_tensor(np.asarray(waveforms), dtype=dtype)
    transforms = _torchaudio()
    kwargs = dict(sample_rate=spec.sample_rate, n_fft=spec.n_fft, win_length=spec.win_length,
                  hop_length=spec.hop_length, f_min=spec.f_min, f_max=spec.f_max, n_mels=spec.n_mels,
                  power=spec.power, center=spec.center, pad_mode=spec.pad_mode, norm=spec.norm,
                  mel_scale=spec.mel_scale)
    if transforms is not None:
        mel = transforms.MelSpectrogram(**kwargs).to(dtype)
        to_db = transforms.AmplitudeToDB("power", top_db=spec.top_db)
        out = torch.stack([to_db(mel(clip)) for clip in x])
    else:
        out = torch.stack([_torch_db(_torch_mel(clip, spec, dtype), spec) for clip in x])
    out = out.numpy()
    for i in range(len(out)):
        for masks, axis in ((freq_masks, 0), (time_masks, 1)):
            if masks is None:
                continue
            for start, end in np.asarray(masks[i]).reshape(-1, 2):
                index = [slice(None), slice(None)]
                index[axis] = slice(int(start), max(int(start), int(end)))
                out[i][tuple(index)] = mask_value
    return out


def _torch_mel(clip: torch.Tensor, spec: DpuMelSpec, dtype) -> torch.Tensor:
    window = torch.hann_window(spec.win_length, periodic=True, dtype=dtype)
    stft = torch.stft(clip, spec.n_fft, spec.hop_length, spec.win_length, window, center=spec.center,
                      pad_mode=spec.pad_mode, normalized=False, onesided=True, return_complex=True)
    fb = torch.as_tensor(mel_filter_bank(spec.n_freqs, spec.f_min, spec.f_max, spec.n_mels, spec.sample_rate,
                                         spec.norm, spec.mel_scale), dtype=dtype)
    return (fb.T @ stft.abs() ** 2)


def _torch_db(power: torch.Tensor, spec: DpuMelSpec) -> torch.Tensor:
    db = 10.0 * torch.log10(torch.clamp(power, min=spec.amin))
    db -= 10.0 * math.log10(max(spec.amin, spec.ref_value))
    if spec.top_db is not None:
        db = torch.max(db, db.max() - spec.top_db)
    return db
