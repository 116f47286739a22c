"""What fixed point costs: dB errors of the DPU log-mel kernel against the float reference.

    python -m benchmarks.audio_fixed_point            # about a minute
    python -m benchmarks.audio_fixed_point --quick    # a few seconds

Clips (1 s at 16 kHz, from a seed): words spoken by espeak-ng (several voices, speeds,
pitches and levels; skipped with a note when espeak-ng is missing), the same words mixed
with white noise at 10-30 dB SNR, and synthetic signals (white noise at several levels,
linear chirps, decaying tones, tone bursts in silence). Each clip goes through the DPU
kernel on pimloader's emulator (`DpuMelFeatures`: int16 PCM in, Q16 dB out) and through the
float reference (torchaudio MelSpectrogram + AmplitudeToDB in float32, or the same maths in
torch when torchaudio does not import) on the same float waveform. Reported per kind of
clip and setting: the largest, 99th-percentile and mean absolute dB error over every
(clip, mel, frame) value, and the same over values within 60 dB of their clip's maximum
(what a model mostly sees). "kernel only" compares with the reference run on the very int16
PCM the DPU received (the kernel's arithmetic alone); the other columns include rounding the
float waveform to int16 (`audio_tables.quantize_waveforms`). Nothing here is a DPU speed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import wave

import numpy as np

from benchmarks import audio_reference
from benchmarks.harness import results_path, write_results
from benchmarks.progress import bar
from pimloader.backends.dpu.audio import DpuMelFeatures
from pimloader.backends.dpu.audio_tables import DpuMelSpec, quantize_waveforms

RATE = 16000
WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "zero", "one", "two",
         "three", "four", "five", "six", "seven", "eight", "nine")
VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-scotland", "en-us+m7", "en-029+f2")
SETTINGS = {
    "n_mels=40, top_db=80": dict(n_fft=400, hop_length=160, n_mels=40, top_db=80.0),
    "n_mels=64, top_db=80": dict(n_fft=400, hop_length=160, n_mels=64, top_db=80.0),
    "n_mels=64, no top_db": dict(n_fft=400, hop_length=160, n_mels=64),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audio_fixed_point", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few clips; results go to *.quick.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def fit_one_second(x: np.ndarray) -> np.ndarray:
    out = np.zeros(RATE)
    n = min(len(x), RATE)
    start = (RATE - n) // 2
    out[start:start + n] = x[:n]
    return out


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    """To 16 kHz (torchaudio's resampler when present; linear otherwise: either is fine here,
    the DPU and the reference see the same waveform)."""
    if rate == RATE:
        return x
    try:
        import torch
        import torchaudio.functional as F
        return F.resample(torch.as_tensor(x), rate, RATE).numpy()
    except Exception:
        t = np.arange(int(len(x) * RATE / rate)) * rate / RATE
        return np.interp(t, np.arange(len(x)), x)


def spoken_word_waveform(word: str, voice: str, speed: int, pitch: int):
    """(float PCM, sample rate) of `word` spoken by espeak-ng, or None without espeak-ng."""
    if shutil.which("espeak-ng") is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "word.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", path, word], check=True)
        with wave.open(path) as f:
            return np.frombuffer(f.readframes(f.getnframes()), np.int16) / 32768.0, f.getframerate()


def spoken_words(count: int, rng: np.random.Generator) -> list:
    """`count` words from espeak-ng at random voices, speeds, pitches and levels ([] without it)."""
    clips = []
    for k in bar(range(count), desc="espeak-ng words", unit="word"):
        word, voice = WORDS[k % len(WORDS)], VOICES[rng.integers(len(VOICES))]
        spoken = spoken_word_waveform(word, voice, int(rng.integers(110, 200)), int(rng.integers(20, 80)))
        if spoken is None:
            return []
        x = fit_one_second(resample(*spoken))
        level = 10 ** (rng.uniform(-30, 0) / 20)
        clips.append(x / max(np.abs(x).max(), 1e-9) * 0.99 * level)
    return clips


def noisy(clips: list, rng: np.random.Generator) -> list:
    out = []
    for x in clips:
        noise = rng.standard_normal(len(x))
        snr = rng.uniform(10, 30)
        noise *= np.sqrt(np.mean(x ** 2) / np.mean(noise ** 2) / 10 ** (snr / 10))
        y = x + noise
        out.append(y / max(1.0, np.abs(y).max()))
    return out


def synthetic(count: int, rng: np.random.Generator) -> dict:
    t = np.arange(RATE) / RATE
    kinds = {"white noise": [], "chirp": [], "decaying tone": [], "tone bursts": []}
    for _ in range(count):
        level = 10 ** (rng.uniform(-40, 0) / 20)
        kinds["white noise"].append(np.clip(rng.standard_normal(RATE) * 0.3 * level, -1, 1))
        f0, f1 = rng.uniform(50, 500), rng.uniform(2000, 7900)
        kinds["chirp"].append(level * np.sin(2 * np.pi * (f0 + (f1 - f0) * t / 2) * t))
        f = rng.uniform(100, 4000)
        kinds["decaying tone"].append(level * np.sin(2 * np.pi * f * t) * np.exp(-rng.uniform(1, 8) * t))
        bursts = np.zeros(RATE)
        for start in rng.integers(0, RATE - 2000, 3):
            bursts[start:start + 2000] = np.sin(2 * np.pi * rng.uniform(200, 3000) * t[:2000])
        kinds["tone bursts"].append(level * bursts)
    return kinds


def errors(dpu: np.ndarray, ref: np.ndarray) -> dict:
    err = np.abs(dpu.astype(np.float64) - ref)
    top = ref >= ref.max(axis=(1, 2), keepdims=True) - 60.0
    def stats(e):
        return {"max": float(e.max()), "p99": float(np.percentile(e, 99)), "mean": float(e.mean())}
    return {"all": stats(err), "within 60 dB of the clip max": stats(err[top]), "values": int(err.size)}


def measure(kinds: dict, settings: dict) -> dict:
    results = {}
    with bar(total=len(settings) * len(kinds), desc="DPU log-mel on the emulator",
             unit="set") as progress:
        for name, kwargs in settings.items():
            spec = DpuMelSpec(sample_rate=RATE, **kwargs)
            with DpuMelFeatures(spec, nr_dpus=4, nr_tasklets=16) as mel:
                for kind, clips in kinds.items():
                    progress.set_postfix_str(f"{name}, {kind}")
                    if clips:
                        results.setdefault(name, {})[kind] = kind_errors(mel, spec, clips)
                    progress.update()
    return results


def kind_errors(mel, spec, clips: list) -> dict:
    """The DPU kernel's |dB error| on `clips` against the float reference on the same
    waveforms, and against it on the kernel's own 16-bit input ("kernel only")."""
    waves = np.stack(clips)
    dpu = mel(waves)
    ref = audio_reference.reference_db(waves.astype(np.float32), spec)
    pcm, gains = quantize_waveforms(waves)
    same_pcm = pcm / 2.0 ** (15 + gains[:, None])
    ref_pcm = audio_reference.reference_db(same_pcm.astype(np.float32), spec)
    return {"clips": len(clips), **errors(dpu, ref), "kernel only": errors(dpu, ref_pcm)["all"]}


def print_table(results: dict) -> None:
    print(f"{'setting':22} {'clips':24} {'n':>4}  {'max':>7} {'p99':>7} {'mean':>7}   "
          f"{'max60':>7} {'p99_60':>7} {'mean60':>7}   {'kernel max':>10} {'p99':>6} {'mean':>7}  (|dB error|)")
    for name, kinds in results.items():
        for kind, r in kinds.items():
            a, t, k = r["all"], r["within 60 dB of the clip max"], r["kernel only"]
            print(f"{name:22} {kind:24} {r['clips']:>4}  {a['max']:7.3f} {a['p99']:7.3f} {a['mean']:7.4f}   "
                  f"{t['max']:7.3f} {t['p99']:7.3f} {t['mean']:7.4f}   {k['max']:10.3f} {k['p99']:6.3f} {k['mean']:7.4f}")


def main(argv=None) -> dict:
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    words = spoken_words(6 if args.quick else 120, rng)
    kinds = {"speech (espeak-ng)": words, "speech + noise 10-30 dB": noisy(words, rng)}
    kinds.update(synthetic(3 if args.quick else 30, rng))
    settings = dict(list(SETTINGS.items())[:1]) if args.quick else SETTINGS
    results = measure(kinds, settings)
    print(f"DPU log-mel (emulator, integer kernel) vs float reference ({audio_reference.which()}); "
          f"espeak-ng: {'yes' if words else 'missing, speech skipped'}")
    print_table(results)
    write_results({"reference": audio_reference.which(), "espeak_ng": bool(words), "seed": args.seed,
                   "results": results}, args.out or results_path("audio_fixed_point", args.quick))
    return results


if __name__ == "__main__":
    main()
