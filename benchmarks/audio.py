"""Keyword-spotting pipeline: clips/s of PIMDataLoader against torch's DataLoader + torchaudio.

The speech folder of make_speech_dataset.py (espeak-ng words, 16 kHz mostly, some 8 and
44.1 kHz, FLAC and stereo files, a noise folder), read through the keyword pipeline:

    load -> downmix -> resample to 16 kHz -> RandomCropOrPad(1 s) -> RandomTimeShift(100 ms)
    -> RandomGain(+-6 dB, p=0.8) -> AddBackgroundNoise(snr 5-20 dB, p=0.8)
    -> MelSpectrogram(n_fft=480, hop 160, n_mels=40) -> AmplitudeToDB(top_db=80)
    -> FrequencyMasking(8) -> TimeMasking(20)

Contenders, `shuffle=True`, the same batch size and seeds:

- "torch + torchaudio": torch's DataLoader over a dataset that reads each file with
  soundfile, averages its channels, resamples with torchaudio.functional.resample, then the
  transform with torchaudio's MelSpectrogram, AmplitudeToDB and masks (pimloader's waveform
  augmentations, which torchaudio lacks): what a PyTorch user writes;
- "pimloader": PIMDataLoader(AudioFolder(root, sample_rate=16000, downmix=True),
  transform=<the same Compose>, backend="cpu"), the spectral steps through the fused feature
  kernel where this build has it (else in torch: the "route" column says which);
- "pimloader emulator (not DPU speed)": the same with backend="emulator" (--emulator-dpus
  DPUs of 16 tasklets; 0 leaves it out): the spectral steps on the DPU log-mel kernel, run
  by pimloader's libdpu emulator on this machine's cores. Its clips/s are the emulator's,
  not a DPU's: what DPUs would do is benchmarks.audio_dpu_projection's PROJECTED figure.

Each group (workers) runs its contenders in the same process, one epoch each in rotating
order; figures are medians over the timed epochs after a warm-up epoch. This process runs
with torch.set_num_threads(1), as DataLoader workers do; with workers,
persistent_workers=True. Then ms per clip by stage, one thread, in this process.

`python -m benchmarks` runs it with its defaults (400 clips, 5 epochs, 0 and 2 workers).
Writes results/latest/audio.json and, but for --quick, the plot results/latest/audio.png
(benchmarks/plot_tasks.py).

    python -m benchmarks.audio --per-word 40 --epochs 3 [--quick] [--plot FILE.png]
"""
from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time
from pathlib import Path

import soundfile
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks import peer_dali_audio
from benchmarks.cpu_time import CpuClock
from benchmarks.harness import close_loader, interleaved, run_benchmark, settle, warnings_once
from benchmarks.make_speech_dataset import DATA_DIR, Params, ensure_dataset
from benchmarks.plot_tasks import draw_audio
from benchmarks.progress import bar
from pimloader import PIMDataLoader
from pimloader import transforms as T
from pimloader.backends.select import CPU, Backends
from pimloader.datasets import AudioFolder
from pimloader.pipelines.audio_features import FusedFeatures, kernel_module
from pimloader.transforms.registry import flatten

try:
    import torchaudio.functional as audio_functional
    import torchaudio.transforms as audio_transforms
except Exception:  # torchaudio pins an older torch; it may not import
    audio_functional = audio_transforms = None

RATE = 16000
MEL = dict(sample_rate=RATE, n_fft=480, hop_length=160, n_mels=40)
QUICK = {"per_word": 8, "epochs": 2, "batch_size": 16}
REFERENCE, PIMLOADER = "torch + torchaudio", "pimloader"
EMULATOR = "pimloader emulator (not DPU speed)"


def keyword_transform(noise: list, spectral) -> T.Compose:
    return T.Compose([
        T.RandomCropOrPad(RATE, pad_position="random"), T.RandomTimeShift(RATE // 10),
        T.RandomGain(-6.0, 6.0, p=0.8), T.AddBackgroundNoise(noise, snr=(5.0, 20.0), p=0.8),
        spectral.MelSpectrogram(**MEL), spectral.AmplitudeToDB(top_db=80.0),
        spectral.FrequencyMasking(8), spectral.TimeMasking(20)])


def spectral_module():
    """pimloader's torch namesakes of torchaudio's transforms, else torchaudio's."""
    return T if hasattr(T, "MelSpectrogram") else audio_transforms


class ReferenceClips(Dataset):
    """soundfile reads, channels averaged, torchaudio resamples, then the transform."""

    def __init__(self, samples: list, transform) -> None:
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
        waveform = torch.from_numpy(samples.T).mean(dim=0, keepdim=True)
        return self.transform(audio_functional.resample(waveform, rate, RATE)), target


def make_loaders(root: Path, workers: int, batch_size: int, emulator_dpus: int = 0) -> dict:
    folder = AudioFolder(root, sample_rate=RATE, downmix=True)
    noise = folder.background_noise()
    common = dict(batch_size=batch_size, shuffle=True, num_workers=workers,
                  persistent_workers=workers > 0)
    loaders = {
        REFERENCE: DataLoader(ReferenceClips(folder.samples,
                                             keyword_transform(noise, audio_transforms)),
                              generator=torch.Generator().manual_seed(0), **common),
        PIMLOADER: PIMDataLoader(folder, transform=keyword_transform(noise, spectral_module()),
                                 generator=torch.Generator().manual_seed(0), backend="cpu",
                                 **common),
        **peer_dali_audio.contender(folder, workers, batch_size, MEL),
    }
    if emulator_dpus:
        loaders[EMULATOR] = PIMDataLoader(
            folder, transform=keyword_transform(noise, spectral_module()),
            generator=torch.Generator().manual_seed(0), backend="emulator",
            nr_dpus=emulator_dpus, nr_tasklets=16, **common)
    return loaders


def run_epoch(loader) -> float:
    seen = 0
    start = time.perf_counter()
    for features, _labels in loader:
        if features.shape[1:] != (1, MEL["n_mels"], RATE // MEL["hop_length"] + 1):
            raise RuntimeError(f"{type(loader).__name__} gave {tuple(features.shape)} batches")
        seen += features.shape[0]
    if seen != len(loader.dataset):
        raise RuntimeError(f"{type(loader).__name__} gave {seen} of {len(loader.dataset)} clips")
    return time.perf_counter() - start


def measure(root: Path, workers: int, batch_size: int, epochs: int, warmup: int = 1,
            emulator_dpus: int = 0) -> dict:
    """One epoch of each contender in turn, the order rotating, so that they share the
    machine's noise epoch by epoch (the load here changes within seconds)."""
    loaders = make_loaders(root, workers, batch_size, emulator_dpus)
    names = list(loaders)
    seconds = {name: [] for name in names}
    cpu = {name: [] for name in names}   # this process + every live worker (all loaders')
    try:
        with bar(total=(warmup + epochs) * len(names), desc=f"audio workers={workers}",
                 unit="epoch") as progress:
            for repeat in range(warmup + epochs):
                for name in interleaved(names, repeat):
                    progress.set_postfix_str(name)
                    clock = CpuClock().start()
                    elapsed = run_epoch(loaders[name])
                    used = clock.elapsed()
                    if repeat >= warmup:
                        seconds[name].append(elapsed)
                        cpu[name].append(used)
                    progress.update()
        kernel_clips = {name: loader.stats()[-1].kernel_samples
                        for name, loader in loaders.items() if isinstance(loader, PIMDataLoader)}
    finally:
        for loader in loaders.values():
            close_loader(loader)
    clips = len(loaders[names[0]].dataset)
    row = {"workers": workers, "clips": clips, "contenders": {}}
    for name in names:
        row["contenders"][name] = {"median_clips_s": clips / statistics.median(seconds[name]),
                                   "epoch_s": seconds[name],
                                   "cpu_ms_per_clip": 1e3 * statistics.median(cpu[name]) / clips}
    base = row["contenders"][REFERENCE]["median_clips_s"]
    for entry in row["contenders"].values():
        entry["ratio"] = entry["median_clips_s"] / base
    for name, clips_run in kernel_clips.items():
        row["contenders"][name]["kernel_clips_last_epoch"] = clips_run
    return row


def timed(function, repeats: int) -> tuple[float, object]:
    """(median seconds of `repeats` calls, the last result)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def stage_breakdown(root: Path, clips: int = 64, repeats: int = 3) -> dict:
    """ms per clip of each stage, one thread, over the first `clips` clips: file read,
    decode_audio, resample (torchaudio's and pimloader's), the waveform
    augmentations, then the features by torchaudio and by pimloader (kernel or torch)."""
    from pimloader.decode import decode_audio
    from pimloader.transforms.resample import resample
    folder = AudioFolder(root, sample_rate=RATE, downmix=True)
    fused_route = kernel_module() is not None
    paths = [path for path, _ in folder.samples[:clips]]
    stage = {}
    seconds, blobs = timed(lambda: [Path(p).read_bytes() for p in paths], repeats)
    stage["read file"] = seconds
    stage["decode + downmix (soundfile + torch, as the reference)"], _ = timed(
        lambda: [_soundfile_mono(b) for b in blobs], repeats)
    seconds, decoded = timed(lambda: [decode_audio(b, downmix=True) for b in blobs], repeats)
    stage["decode + downmix (plain WAV natively, else libsndfile)"] = seconds
    mono = [(torch.from_numpy(s), r) for s, r in decoded]
    stage["resample (torchaudio)"], _ = timed(
        lambda: [audio_functional.resample(w, r, RATE) for w, r in mono], repeats)
    stage["resample (pimloader, conv1d: the AudioFolder's)"], waves = timed(
        lambda: [resample(w, r, RATE) for w, r in mono], repeats)
    if fused_route:
        from pimloader.backends.audio_waveform import resample as native_resample
        stage["resample (pimloader, native: the loader's)"], _ = timed(
            lambda: [native_resample(w, r, RATE) for w, r in mono], repeats)
    steps = flatten(keyword_transform(folder.background_noise(), spectral_module()))
    torch.manual_seed(0)
    stage["waveform augmentations (torch, per clip)"], augmented = timed(
        lambda: [_apply(steps[:4], w) for w in waves], repeats)
    native = FusedFeatures.lower(T.Compose(steps)).native_steps if fused_route else None
    if native is not None:
        stage["waveform augmentations (native: draws, one call)"], _ = timed(
            lambda: native.run(waves, [native.draw(tuple(w.shape))[0] for w in waves]), repeats)
    reference_features = flatten(keyword_transform([torch.ones(1)], audio_transforms))[4:]
    stage["features (torchaudio, per clip)"], _ = timed(
        lambda: [_apply(reference_features, w) for w in augmented], repeats)
    fused = FusedFeatures.lower(T.Compose(steps[4:]))
    if fused is not None:
        router = Backends().router(CPU)
        stage["features (fused kernel: masks drawn, one call)"], _ = timed(
            lambda: fused.finish([fused.prepare(w) for w in augmented], router), repeats)
    else:
        stage["features (pimloader, torch route)"], _ = timed(
            lambda: [_apply(steps[4:], w) for w in augmented], repeats)
    return {name: 1e3 * value / len(paths) for name, value in stage.items()}


def _soundfile_mono(blob: bytes):
    samples, rate = soundfile.read(io.BytesIO(blob), dtype="float32", always_2d=True)
    return torch.from_numpy(samples.T).mean(dim=0, keepdim=True), rate


def _apply(steps: list, waveform):
    for step in steps:
        waveform = step(waveform)
    return waveform


def format_rows(rows: list) -> str:
    lines = [f"{'workers':>7}  {'contender':<36} {'clips/s':>9} {'ratio':>6} {'CPU ms/clip':>11}"]
    for row in rows:
        for name, entry in row["contenders"].items():
            lines.append(f"{row['workers']:>7}  {name:<36} {entry['median_clips_s']:>9.1f} "
                         f"{entry['ratio']:>6.2f} {entry['cpu_ms_per_clip']:>11.3f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    if audio_transforms is None:
        raise SystemExit("benchmarks.audio compares with torchaudio, which does not import here "
                         "(pip install --no-deps torchaudio)")
    torch.set_num_threads(args.threads)
    root = ensure_dataset(args.root, Params(per_word=args.per_word))
    rows = [measure(root, workers, args.batch_size, args.epochs, emulator_dpus=args.emulator_dpus)
            for workers in args.workers]
    return {"benchmark": "audio", "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "load_average_1m": os.getloadavg()[0]},
            "route": "fused kernel" if kernel_module() is not None else "torch",
            "batch_size": args.batch_size, "rows": rows,
            "emulator": {"nr_dpus": args.emulator_dpus, "nr_tasklets": 16,
                         "note": "pimloader's libdpu emulator on this machine's cores: "
                                 "not DPU speed (see benchmarks.audio_dpu_projection)"},
            "ms_per_clip_by_stage": stage_breakdown(root)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None,
                        help="the speech dataset (default: benchmarks/results/data/speech_commands_like[_quick])")
    parser.add_argument("--per-word", type=int, default=Params.per_word)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--emulator-dpus", type=int, default=16,
                        help="DPUs of the emulator contender (0: leave it out)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON results (default: results/latest/audio[.quick].json)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG to draw (default: results/latest/audio.png; none with --quick)")
    args = settle(parser.parse_args(argv), "audio", QUICK, plot="audio.png")
    if args.root is None:
        args.root = DATA_DIR / ("speech_commands_like_quick" if args.quick else "speech_commands_like")
    return args


def main(argv=None) -> dict:
    with warnings_once():
        return run_benchmark(parse_args(argv), run, report, draw_audio)


def report(results: dict) -> None:
    print(f"route: {results['route']}; batch {results['batch_size']}; "
          f"load average {results['machine']['load_average_1m']:.1f}")
    print(format_rows(results["rows"]))
    print("ms per clip by stage (one thread):")
    for name, value in results["ms_per_clip_by_stage"].items():
        print(f"  {name:<56} {value:8.3f}")


if __name__ == "__main__":
    main()
