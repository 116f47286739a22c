"""The fused CPU audio feature kernel against torchaudio: speed, one thread, and accuracy.

Speed: a batch of 64 one-second 16 kHz clips (speech-like noise), MelSpectrogram(16000,
n_fft, hop_length=160, n_mels=64) + AmplitudeToDB(top_db=80):
- torchaudio: both transforms on the [64, 1, L] batch (the floor is per example, as for a
  single clip), `torch.set_num_threads(1)`;
- pimloader: one `cpu_features` call writing the [64, 64, 101] batch into a preallocated
  array (FeatureSpec built once).
Interleaved repeat by repeat; medians of wall time and of the thread's CPU time (the steadier
figure on a shared machine). Without torchaudio, pimloader's pure-torch namesakes stand in
(torch.stft, the same operations) and the report says so.

Accuracy (--accuracy): the kernel's features against torchaudio over reference signals
(chirp, white noise, clipped chirp, quiet noise, espeak-ng speech where installed, silence)
and n_fft 400/512/1024 x hop 160/128 x center x power 1/2 x htk/slaney x norm, with and
without AmplitudeToDB(top_db=80), both SIMD levels, and torchaudio's own float32 error
against float64 for scale: max abs dB error over the cells within 80 dB (in power) of each
example's peak, and the largest error relative to the example's peak.

    python -m benchmarks.audio_kernel [--batch 64] [--repeats 15] [--simd 0] [--accuracy]

Not part of `python -m benchmarks`.
"""
from __future__ import annotations

import argparse
import copy
import io
import itertools
import json
import os
import shutil
import statistics
import subprocess
import time
import wave

import numpy as np
import torch

from benchmarks.harness import results_path
from pimloader.backends.audio_features import FeatureSpec, cpu_features, simd_level

try:
    import torchaudio.transforms as REF
    REFERENCE = "torchaudio " + __import__("torchaudio").__version__
except Exception:  # not installed, or not importable beside this torch
    from pimloader import transforms as REF
    REFERENCE = "pimloader.transforms (pure torch; torchaudio unavailable)"

SR = 16000


def speech(length: int, word: str = "seven") -> np.ndarray:
    """A spoken word (espeak-ng, resampled linearly to 16 kHz), or a synthetic vowel (120 Hz
    harmonics under formants at 700, 1220, 2600 Hz) where espeak-ng is not installed."""
    if shutil.which("espeak-ng"):
        raw = subprocess.run(["espeak-ng", "-v", "en", "-s", "150", "--stdout", word],
                             capture_output=True, check=True, timeout=30).stdout
        with wave.open(io.BytesIO(raw)) as w:
            rate = w.getframerate()
            x = np.frombuffer(w.readframes(w.getnframes()), np.int16) / 32768.0
        x = np.interp(np.arange(0, len(x), rate / SR), np.arange(len(x)), x)
    else:
        t = np.arange(length) / SR
        x = sum(np.exp(-((120 * h - f) / 150) ** 2) * np.sin(2 * np.pi * 120 * h * t)
                for h in range(1, 60) for f in (700, 1220, 2600)) * np.hanning(length) * 0.3
    out = np.zeros(length)
    out[:min(length, len(x))] = x[:length]
    return out


def reference_signals(length: int) -> dict[str, np.ndarray]:
    """Chirp (100 Hz -> 7 kHz), white noise, the chirp clipped, quiet noise, speech, silence."""
    t = np.arange(length) / SR
    chirp = 0.5 * np.sin(2 * np.pi * (100 * t + 6900 / (2 * t[-1]) * t ** 2))
    rng = np.random.default_rng(1)
    return {"chirp": chirp, "noise": 0.1 * rng.standard_normal(length),
            "clipped": np.clip(4 * chirp, -1, 1), "quiet": 1e-4 * rng.standard_normal(length),
            "speech": speech(length), "silence": np.zeros(length)}


def per_example(chain, waves: np.ndarray, dtype=torch.float32) -> np.ndarray:
    """The chain applied to each waveform alone, in `dtype` (a float64 copy of each step for
    float64: the truth the float32 results are measured against)."""
    if dtype != torch.float32:
        chain = [copy.deepcopy(t).to(dtype) for t in chain]
    outs = []
    for w in waves:
        y = torch.from_numpy(w).to(dtype)
        for t in chain:
            y = t(y)
        outs.append(y.numpy())
    return np.stack(outs)


def db_error(got, ref, spec: FeatureSpec) -> float:
    """max |got - ref| over the cells within 80 dB (in power) of each example's peak"""
    floor = ref.max(axis=(1, 2), keepdims=True) - 4 * spec.multiplier * spec.power
    return float(np.where(ref >= floor, np.abs(got - ref), 0).max())


def peak_error(got, ref) -> float:
    peak = ref.max(axis=(1, 2), keepdims=True)
    return float((np.abs(got - ref) / np.where(peak > 0, peak, 1)).max())


def accuracy() -> dict:
    waves = np.stack(list(reference_signals(SR + 37).values())).astype(np.float32)
    worst = {"db": 0.0, "db_ref_float32_vs_float64": 0.0, "peak_relative": 0.0,
             "peak_relative_ref_float32_vs_float64": 0.0, "mfcc_abs": 0.0}
    grid = list(itertools.product((400, 512, 1024), (160, 128), (True, False), (1.0, 2.0),
                                  ("htk", "slaney"), (None, "slaney")))
    for level in (0, 1)[:simd_level(-1) + 1]:
        simd_level(level)
        for n_fft, hop, center, power, scale, norm in grid:
            mel = REF.MelSpectrogram(SR, n_fft=n_fft, hop_length=hop, center=center, power=power,
                                     n_mels=64, mel_scale=scale, norm=norm)
            db = REF.AmplitudeToDB("power" if power == 2 else "magnitude", top_db=80)
            ref, ref64 = per_example([mel], waves), per_example([mel], waves, torch.float64)
            spec = FeatureSpec.from_transforms([mel, db])
            _update(worst, "peak_relative", peak_error(
                cpu_features(waves, FeatureSpec.from_transforms([mel])), ref))
            _update(worst, "peak_relative_ref_float32_vs_float64", peak_error(ref64, ref))
            ref_db = per_example([mel, db], waves)
            _update(worst, "db", db_error(cpu_features(waves, spec), ref_db, spec))
            _update(worst, "db_ref_float32_vs_float64",
                    db_error(per_example([mel, db], waves, torch.float64), ref_db, spec))
        for log_mels in (False, True):
            mfcc = REF.MFCC(SR, n_mfcc=40, log_mels=log_mels,
                            melkwargs=dict(n_fft=400, hop_length=160, n_mels=64))
            got = cpu_features(waves, FeatureSpec.from_transforms([mfcc]))
            _update(worst, "mfcc_abs", float(np.abs(got - per_example([mfcc], waves)).max()))
    simd_level(-1)
    return worst


def _update(worst: dict, key: str, value: float) -> None:
    worst[key] = max(worst[key], value)


def speed(batch: int, repeats: int, n_fft: int) -> dict:
    rng = np.random.default_rng(0)
    waves = np.stack([0.3 * speech(SR) + 0.05 * rng.standard_normal(SR)
                      for _ in range(batch)]).astype(np.float32)
    mel = REF.MelSpectrogram(SR, n_fft=n_fft, hop_length=160, n_mels=64)
    db = REF.AmplitudeToDB(top_db=80)
    spec = FeatureSpec.from_transforms([mel, db])
    batch_in = torch.from_numpy(waves).unsqueeze(1)
    out = np.empty((batch,) + spec.out_shape(SR), np.float32)
    timers = {"reference": lambda: db(mel(batch_in)),
              "pimloader": lambda: cpu_features(waves, spec, None, None, out)}
    for fn in timers.values():
        fn()
    wall = {name: [] for name in timers}
    cpu = {name: [] for name in timers}
    for _ in range(repeats):
        for name, fn in timers.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            wall[name].append((time.perf_counter() - t0) * 1e3)
            cpu[name].append((time.thread_time() - c0) * 1e3)
    ref = timers["reference"]()[:, 0].numpy()
    result = {name: {"wall_ms": statistics.median(wall[name]),
                     "cpu_ms": statistics.median(cpu[name])} for name in timers}
    result["wall_ratio"] = result["reference"]["wall_ms"] / result["pimloader"]["wall_ms"]
    result["cpu_ratio"] = result["reference"]["cpu_ms"] / result["pimloader"]["cpu_ms"]
    result["max_db_error"] = db_error(out, ref, spec)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audio_kernel",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="clips per call")
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats (median)")
    parser.add_argument("--simd", type=int, default=-1, choices=[-1, 0, 1],
                        help="kernel loops: -1 best, 0 portable, 1 AVX2 + FMA")
    parser.add_argument("--accuracy", action="store_true", help="the error sweep instead")
    parser.add_argument("--out", help="JSON file (default: "
                        "results/latest/audio_kernel[.accuracy].json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.accuracy:
        report = {"reference": REFERENCE, "worst": accuracy()}
        for key, value in report["worst"].items():
            print(f"{key:40s} {value:.3g}")
    else:
        level = simd_level(args.simd)
        report = {"reference": REFERENCE, "batch": args.batch, "repeats": args.repeats,
                  "simd_level": level, "threads": torch.get_num_threads(),
                  "n_fft": {n: speed(args.batch, args.repeats, n) for n in (400, 512)}}
        print(f"{args.batch} x 1 s at 16 kHz, MelSpectrogram(n_mels=64, hop 160) + "
              f"AmplitudeToDB(top_db=80), 1 thread, median of {args.repeats}; "
              f"reference {REFERENCE}; kernel SIMD level {level}")
        print(f"{'n_fft':>5s} {'ref ms':>8s} {'ours ms':>8s} {'ratio':>6s} "
              f"{'ref cpu':>8s} {'ours cpu':>8s} {'ratio':>6s} {'max dB err':>10s}")
        for n_fft, r in report["n_fft"].items():
            print(f"{n_fft:5d} {r['reference']['wall_ms']:8.2f} {r['pimloader']['wall_ms']:8.2f} "
                  f"{r['wall_ratio']:5.2f}x {r['reference']['cpu_ms']:8.2f} "
                  f"{r['pimloader']['cpu_ms']:8.2f} {r['cpu_ratio']:5.2f}x "
                  f"{r['max_db_error']:10.2g}")
    stem = "audio_kernel" + (".accuracy" if args.accuracy else "")
    path = args.out or results_path(stem, quick=False)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {path}")
    return report


if __name__ == "__main__":
    main()
