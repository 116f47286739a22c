"""PROJECTED speed of the DPU log-mel kernel: no DPU hardware is measured here.

    python -m benchmarks.audio_dpu_projection            # about 20 s
    python -m benchmarks.audio_dpu_projection --quick

A batch of 1 s clips at 16 kHz (4 per DPU on 16 emulated DPUs x 16 tasklets by default) runs
through the kernel on the emulator, which counts its DMA and transfer bytes; the kernel's
work is counted from its loops (`pimloader.costmodel.audio.frame_work`, checked against an
instrumented build by tests/test_audio_dpu.py) and priced by instruction costs counted on the
RV32 proxy (`cost.AudioCosts`, benchmarks.audio_instruction_counts); the
published figures of real systems (PrIM) turn both into time per launch, by weak scaling to
one rank, 640 and 2,560 DPUs. For scale, the float reference's time per clip on this host
(torchaudio, or the torch formulation, one thread) is measured too: that one *is* measured,
on a shared machine.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from benchmarks import audio_reference
from benchmarks.harness import results_path, write_results
from pimloader.backends.dpu.audio import DpuMelFeatures
from pimloader.backends.dpu.audio_tables import DpuMelSpec, DpuMelTables
from pimloader.costmodel import audio as cost

SETTINGS = {"n_mels=40, top_db=80": dict(n_fft=400, hop_length=160, n_mels=40, top_db=80.0),
            "n_mels=64, top_db=80": dict(n_fft=400, hop_length=160, n_mels=64, top_db=80.0)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audio_dpu_projection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 DPUs, one setting; *.quick.json")
    parser.add_argument("--dpus", type=int, default=16)
    parser.add_argument("--clips-per-dpu", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def reference_ms_per_clip(waves: np.ndarray, spec: DpuMelSpec) -> float:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        audio_reference.reference_db(waves[:2].astype(np.float32), spec)     # warm-up
        start = time.perf_counter()
        audio_reference.reference_db(waves.astype(np.float32), spec)
        return (time.perf_counter() - start) / len(waves) * 1e3
    finally:
        torch.set_num_threads(threads)


def main(argv=None) -> dict:
    args = parse_args(argv)
    dpus = 4 if args.quick else args.dpus
    settings = dict(list(SETTINGS.items())[:1]) if args.quick else SETTINGS
    rng = np.random.default_rng(args.seed)
    waves = rng.standard_normal((dpus * args.clips_per_dpu, 16000)) * 0.1
    results = {}
    print("PROJECTED (cost model; no DPU was measured): the DPU log-mel kernel, 1 s clips at 16 kHz")
    print(f"{'setting':22} {'system':11} {'case':8} {'clips/s':>10} {'instr/clip':>11} "
          f"{'in ms':>7} {'compute':>8} {'DMA':>6} {'out ms':>7} {'bound':>20}")
    for name, kwargs in settings.items():
        spec = DpuMelSpec(**kwargs)
        with DpuMelFeatures(spec, nr_dpus=dpus, nr_tasklets=16) as mel:
            run = cost.measure(mel, waves)
        tables = DpuMelTables.build(spec)
        rows = [p.__dict__ for p in cost.project_all(run, tables)]
        for p in rows:
            print(f"{name:22} {p['system']:11} {p['case']:8} {p['clips_per_s']:10,.0f} "
                  f"{p['instructions_per_clip'] / 1e6:9.2f} M {p['t_in'] * 1e3:7.2f} "
                  f"{p['t_compute'] * 1e3:8.1f} {p['t_dma'] * 1e3:6.2f} {p['t_out'] * 1e3:7.2f} {p['bound']:>20}")
        nominal = next(p for p in rows if p["case"] == "nominal")
        top = sorted(nominal["share"].items(), key=lambda kv: -kv[1])[:6]
        print("  nominal instructions by unit: " + ", ".join(f"{u} {s:.0%}" for u, s in top))
        ms = reference_ms_per_clip(waves[:16], spec)
        print(f"  measured here: float reference ({audio_reference.which()}, 1 thread) {ms:.2f} ms per clip "
              f"= {1e3 / ms:,.0f} clips/s per core (shared, loaded machine)")
        results[name] = {"projections": rows, "reference_ms_per_clip": ms,
                         "dma_per_clip": {"read_bytes": float(run.read_bytes.sum() / run.clips),
                                          "write_bytes": float(run.write_bytes.sum() / run.clips),
                                          "push_bytes_per_dpu": run.xfer_in, "gather_bytes_per_dpu": run.xfer_out}}
    write_results({"benchmark": "audio_dpu_projection", "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   "dpus": dpus, "clips_per_dpu": args.clips_per_dpu, "results": results},
                  args.out or results_path("audio_dpu_projection", args.quick), default=float)
    return results


if __name__ == "__main__":
    main()
