"""Instructions of the DPU log-mel kernel (dpu_src/audio_features.c) COUNTED on the RV32 proxy,
per unit of the cost model's work, beside the figures it assumed before.

Each launch runs a few short clips of one spec (n_fft 240 to 1024, so every mix of the
FFT's radices 2, 3, 4, 5; 40 to 128 mels; with and without top_db and masks) on one emulated
DPU with its MRAM and its host->WRAM arguments traced (DPUEMU_TRACE_DIR); each is replayed
by the kernel built for RV32IM and RV32EM (pimloader.costmodel.proxy: MRAM must equal the
emulator's), its instructions attributed by source function and fitted per part to the
kernel's work (pimloader.costmodel.audio_counted). Prints the counted units, the per-frame
FFT, per-mel and per-log figures, the kernel's static size, and writes
results/latest/audio_instruction_counts.json. Needs riscv64-unknown-elf-gcc; without it,
says so. About a minute here.

    python -m benchmarks.audio_instruction_counts [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from benchmarks.harness import results_path, write_results
from pimloader.backends.dpu.audio import KERNEL_SOURCE, DpuMelFeatures
from pimloader.backends.dpu.audio_tables import DpuMelSpec, DpuMelTables
from pimloader.costmodel import audio as cost
from pimloader.costmodel import audio_counted as ac
from pimloader.costmodel import proxy
from pimloader.costmodel.assumptions import CASES
from pimloader.costmodel.counted import BRACKETS

TASKLETS = 8          # n_fft 1024's tables and buffers fit WRAM at up to 9
STACK_BYTES = 1024
# n_fft (radices of n_fft / 2), n_mels, top_db, masks: the units vary independently
LAUNCHES = [(400, 40, 80.0, True), (512, 64, None, False), (480, 128, 80.0, True), (256, 40, 80.0, False),
            (240, 64, None, True), (1024, 64, 80.0, True), (320, 40, None, False), (600, 96, 80.0, True)]
# What costmodel.audio.AudioCosts assumed before the counts (best, nominal, worst), for comparison.
ASSUMED_BEFORE = {"sample": (14, 22, 45), "scale": (4, 5, 8), "peak": (3, 5, 7), "bf2": (10, 14, 20),
                  "bf4": (30, 40, 60), "odd_term": (10, 14, 20), "mul_q15": (12, 20, 46), "square": (22, 31, 70),
                  "power_bin": (8, 12, 20), "mel_mac": (28, 41, 90), "mel_value": (45, 65, 130),
                  "mask_value": (12, 20, 30), "clamp_value": (3, 4, 6), "frame": (120, 200, 400),
                  "dma_call": (5, 10, 20)}


def launch_clips(n_fft: int, seed: int) -> np.ndarray:
    """Two clips of noise and a chirp, a few frames each."""
    rng = np.random.default_rng(seed)
    length = 6 * n_fft
    t = np.arange(length) / 16000
    chirp = 0.5 * np.sin(2 * np.pi * (100 + 3000 * t) * t)
    return np.stack([rng.uniform(-0.3, 0.3, length), chirp]).astype(np.float32)


def count_launch(setting: tuple, elves: dict, seed: int) -> dict:
    """One launch traced and replayed on every proxy build: its work, its parts' DPU
    instructions per bracket, the proxy's raw totals."""
    n_fft, n_mels, top_db, masks = setting
    spec = DpuMelSpec(n_fft=n_fft, hop_length=n_fft // 2, n_mels=n_mels, top_db=top_db)
    clips = launch_clips(n_fft, seed)
    trace = tempfile.mkdtemp(prefix="pimloader-audio-trace-")
    os.environ["DPUEMU_TRACE_DIR"] = trace
    try:
        with DpuMelFeatures(spec, nr_dpus=1, nr_tasklets=TASKLETS, stack_bytes=STACK_BYTES) as mel:
            mel(clips, freq_masks=[[2, 7], [5, 9]] if masks else None,
                time_masks=[[1, 3], [0, 2]] if masks else None)
            counters = mel.counters()
        [launch] = proxy.traced_launches(trace)
        replays = {isa: proxy.replay(elf, launch) for isa, elf in elves.items()}
    finally:
        del os.environ["DPUEMU_TRACE_DIR"]
        shutil.rmtree(trace, ignore_errors=True)
    frames = sum(spec.frames(clips.shape[1]) for _ in clips)
    work = {unit: count * frames for unit, count in cost.frame_work(DpuMelTables.build(spec)).items()}
    work["dma_call"] = counters.mram_read_calls + counters.mram_write_calls
    per_function = {isa: proxy.by_source_function(elves[isa], [replays[isa]], ac.WANTED)[0] for isa in elves}
    parts = {case: ac.part_instructions(per_function[b["isa"]], case) for case, b in BRACKETS.items()}
    return {"setting": {"n_fft": n_fft, "n_mels": n_mels, "top_db": top_db, "masks": masks},
            "frames": frames, "work": work, "parts": parts,
            "proxy_instructions": {isa: r.total for isa, r in replays.items()}}


def rollups(units: dict, tables: DpuMelTables) -> dict:
    """Per frame FFT (framing to power), per mel value (the filter's terms and its log), per
    log (the log2 and dB of one value), from the counted units, for a spec's tables."""
    work = cost.frame_work(tables)
    fft = ("sample", "scale", "peak", "bf2", "bf4", "odd_term", "mul_q15", "square", "power_bin", "frame")
    per_mel = (work["mel_mac"] * units["mel_mac"]) / tables.spec.n_mels + units["mel_value"]
    return {"fft_per_frame": sum(work[u] * units[u] for u in fft), "mel_per_value": per_mel,
            "log_per_value": units["mel_value"]}


def run(args: argparse.Namespace) -> dict:
    if proxy.find_cross_compiler() is None:
        return {"benchmark": "audio_instruction_counts", "skipped": f"{proxy.CROSS_COMPILER} not installed"}
    started = time.perf_counter()
    defines = {"STACK_SIZE_DEFAULT": STACK_BYTES}
    elves = {isa: proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=TASKLETS, isa=isa, defines=defines)
             for isa in proxy.ISAS}
    settings = LAUNCHES[:4] if args.quick else LAUNCHES
    launches = []
    for i, setting in enumerate(settings):
        launches.append(count_launch(setting, elves, args.seed + i))
        print(f"  counted n_fft={setting[0]} n_mels={setting[1]} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    fitted = ac.fit_units(launches)
    for launch in launches:
        launch["predicted"] = {case: ac.predicted(launch["work"], fitted[case]["units"]) for case in BRACKETS}
        launch["counted"] = {case: sum(launch["parts"][case].values()) for case in BRACKETS}
    model = {f.name: [getattr(cost.AudioCosts(), f.name).at(case) for case in CASES]
             for f in fields(cost.AudioCosts)}
    keyword = DpuMelTables.build(DpuMelSpec(n_fft=400, hop_length=160, n_mels=40, top_db=80.0))
    return {"benchmark": "audio_instruction_counts", "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "note": "instructions COUNTED on an RV32 proxy of the DPU ISA; DPU figures are brackets",
            "brackets": BRACKETS, "audio_mul": ac.AUDIO_MUL, "tasklets": TASKLETS, "launches": launches,
            "fits": fitted, "model_units": model, "assumed_before": ASSUMED_BEFORE,
            "keyword_spec_rollups": {case: rollups(fitted[case]["units"], keyword) for case in BRACKETS},
            "static_size": {isa: proxy.static_size(elf) for isa, elf in elves.items()},
            "iram_instructions": 4096, "wall_s": time.perf_counter() - started}


def report(results: dict) -> None:
    if "skipped" in results:
        print(f"audio instruction counts: skipped ({results['skipped']})")
        return
    print("\nDPU log-mel kernel, instructions per unit of work, best / nominal / worst: COUNTED on the RV32 "
          "proxy (DPU ISA brackets), in the model now, assumed before")
    print(f"{'unit':<12} {'counted':>26}   {'model':>22}   {'assumed before':>16}")
    for name in results["assumed_before"]:
        counted = " / ".join(f"{results['fits'][c]['units'][name]:.1f}" for c in CASES)
        model = " / ".join(f"{v:g}" for v in results["model_units"][name])
        before = " / ".join(f"{v:g}" for v in results["assumed_before"][name])
        print(f"{name:<12} {counted:>26}   {model:>22}   {before:>16}")
    print("R^2 per part (nominal): " + ", ".join(f"{part} {r2:.3f}"
                                                for part, r2 in results["fits"]["nominal"]["r2"].items()))
    print("\nlaunch (n_fft, n_mels)   counted nominal   fitted units   ratio")
    for launch in results["launches"]:
        s, c, p = launch["setting"], launch["counted"]["nominal"], launch["predicted"]["nominal"]
        print(f"  {s['n_fft']:>5} {s['n_mels']:>4}            {c / 1e6:>8.2f}M      {p / 1e6:>8.2f}M   {p / c:.3f}")
    print("\nn_fft 400, hop 160, 40 mels, top_db 80, best / nominal / worst:")
    for key in ("fft_per_frame", "mel_per_value", "log_per_value"):
        print(f"  {key:<16} " + " / ".join(f"{results['keyword_spec_rollups'][c][key]:.0f}" for c in CASES))
    for isa, size in results["static_size"].items():
        print(f"static size {isa}: {size['instructions']} instructions (IRAM holds {results['iram_instructions']})")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four launches; *.quick.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    results = run(args)
    report(results)
    if "skipped" not in results:
        write_results(results, args.out or results_path("audio_instruction_counts", args.quick))
    return results


if __name__ == "__main__":
    main()
