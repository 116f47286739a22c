"""PROJECTED speed of the DPU log-mel kernel (dpu_src/audio_features.c). Nothing here is a
measurement: the work is counted exactly from the kernel's loops for a spec and clip lengths,
the DMA and transfer bytes are the emulator's counts for a real batch, and the rest are the
assumptions below (instruction costs per unit of work, read off the kernel) and the
published figures of `assumptions.Assumptions` (PrIM). docs/audio.md, "DPU kernel".

Units of work (what each counts, per frame unless said):
  sample      n_fft: framed samples (cache read, reflection, window product, peak)
  scale       values shifted by rshift_round (input normalisation, every stage, the split)
  peak        components scanned by peak_of (before every stage, the split, the power)
  bf2, bf4    radix-2 / radix-4 butterflies (additions only)
  odd_term    (q, j) terms of radix-3/5 butterflies, q, j <= r/2 (twiddle loads, adds)
  mul_q15     32x16-bit Q15 products (two 16x16 products each)
  square      64-bit squares of int32 (three 16x16 products each)
  power_bin   slots turned into power (64-bit add and shift)
  mel_mac     weight x power terms of the filter bank (three 16x16 products each)
  mel_value   mel values: log2 by table, exponent, dB, store
  mask_value  values checked against the masks; clamp_value: values clamped (top_db pass)
  frame       frames (loop set-up, stage_shift, calls)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np

from pimloader.backends.dpu import audio as host
from .assumptions import CASES, SYSTEMS, Assumptions, Param, System
from .model import dma_cycles

KERNEL = "assumed: counted by reading dpu_src/audio_features.c"
MUL16 = ("a 16x16-bit product is four of the DPU's native 8x8 multiplies and three shift-adds "
         "(~7 instructions); worst: the compiler emits a mul_step chain (~20)")


@dataclass(frozen=True)
class AudioCosts:
    """Instructions per unit of the log-mel kernel's work (best / nominal / worst)."""
    sample: Param = Param(14, 22, 45, "instr/sample", KERNEL,
                          "sample_at (address, cache bounds test, load), reflection tests, window load, "
                          "one 16x16 product, abs and max, store, loop. " + MUL16)
    scale: Param = Param(4, 5, 8, "instr/value", KERNEL, "rshift_round: load, add the half, shift, store")
    peak: Param = Param(3, 5, 7, "instr/component", KERNEL, "peak_of: load, abs, compare-select")
    bf2: Param = Param(10, 14, 20, "instr/butterfly", KERNEL, "4 add/sub, 2 complex stores, twiddle test, loop")
    bf4: Param = Param(30, 40, 60, "instr/butterfly", KERNEL, "16 add/sub, 4 complex stores, twiddle tests, loop")
    odd_term: Param = Param(10, 14, 20, "instr/term", KERNEL,
                            "butterfly_odd per (q, j): index update, two twiddle loads, four adds, "
                            "and its share of the S_j, D_j sums and the four outputs")
    mul_q15: Param = Param(12, 20, 46, "instr/product", KERNEL,
                           "mul_q15: split into halves (shift, and), two 16x16 products, round, shift, add. "
                           + MUL16)
    square: Param = Param(22, 31, 70, "instr/square", KERNEL,
                          "square: abs, halves, three 16x16 products, 64-bit shifts and adds (two "
                          "instructions per 64-bit add on a 32-bit DPU). " + MUL16)
    power_bin: Param = Param(8, 12, 20, "instr/slot", KERNEL, "64-bit add of the squares, 64-bit shift, two stores")
    mel_mac: Param = Param(28, 41, 90, "instr/term", KERNEL,
                           "bin_pos and weight loads, power_of (two loads, combine), mul_u48_u16 (three "
                           "16x16 products, 64-bit shifts and adds), 64-bit accumulate. " + MUL16)
    mel_value: Param = Param(45, 65, 130, "instr/value", KERNEL,
                             "log2_q16 (64-bit clz, mantissa shift, two table loads, one 16x16 "
                             "interpolation), exponent, floor, to_db (two 16x16 products), store, max")
    mask_value: Param = Param(12, 20, 30, "instr/value", KERNEL, "in_masks over 4 masks per axis")
    clamp_value: Param = Param(3, 4, 6, "instr/value", KERNEL, "clamp_frames: load, compare-select, store")
    frame: Param = Param(120, 200, 400, "instr/frame", KERNEL,
                         "per frame: stage loops set-up, stage_shift's loop, calls, row DMA bookkeeping")
    dma_call: Param = Param(5, 10, 20, "instr/call", KERNEL, "read_big/write_big loop and the call itself")


UNITS = tuple(f.name for f in fields(AudioCosts) if f.name != "dma_call")


def frame_work(tables) -> dict:
    """Units of one frame, walking the kernel's loops for these tables (DpuMelTables)."""
    spec = tables.spec
    size = spec.n_fft // 2
    work = dict.fromkeys(UNITS, 0)
    work.update(sample=spec.n_fft, scale=spec.n_fft, frame=1)
    span = size
    for r in tables.radices:
        m = span // r
        butterflies = size // r
        blocks = size // span
        work["peak"] += 2 * size
        work["scale"] += 2 * size
        if r in (2, 4):
            work[f"bf{r}"] += butterflies
        else:
            work["odd_term"] += butterflies * (r // 2) ** 2
            work["mul_q15"] += butterflies * 4 * (r // 2) ** 2
        work["mul_q15"] += 4 * (r - 1) * (butterflies - blocks)   # twiddles, none where n1 = 0
        span = m
    pairs = size // 2 + 1
    work["peak"] += 2 * size + 2 * (size + 1)
    work["scale"] += 4 * pairs
    work["mul_q15"] += 4 * (size + 1)
    work["square"] += 2 * (size + 1)
    work["power_bin"] += size + 1
    work["mel_mac"] += int(tables.mel_ranges[:, 1].astype(np.int64).sum())
    work["mel_value"] += spec.n_mels
    work["mask_value"] += spec.n_mels
    work["clamp_value"] += spec.n_mels if spec.top_db is not None else 0
    return work


def instructions(work: dict, costs: AudioCosts, case: str) -> float:
    return float(sum(n * getattr(costs, unit).at(case) for unit, n in work.items()))


@dataclass
class AudioRun:
    """What the emulator counted for one launch, and the frames each DPU and tasklet ran."""
    nr_dpus: int
    nr_tasklets: int
    clips: int
    frames: list                 # per DPU: frames of each of its clips
    read_calls: np.ndarray       # per DPU
    read_bytes: np.ndarray
    write_calls: np.ndarray
    write_bytes: np.ndarray
    xfer_in: int                 # common push length per DPU (bytes)
    xfer_out: int                # common gather length per DPU


def measure(mel, waveforms) -> AudioRun:
    """Run `waveforms` through `mel` (a DpuMelFeatures on the emulator) and keep its counts."""
    mel(waveforms)
    n, length = np.asarray(waveforms).shape
    frames = np.full(n, mel.spec.frames(length))
    runs = host.split_clips(frames, mel.nr_dpus)
    counters = [mel._live().counters(d) for d in range(mel.nr_dpus)]
    in_bytes = max(host.round8(host.CHUNK_DTYPE.itemsize + host.SAMPLE_DTYPE.itemsize * (b - a))
                   + (b - a) * host.round8(2 * length) for a, b in runs)
    out_bytes = max(host.STATUS_DTYPE.itemsize + host.row_bytes(mel.spec.n_mels) * int(frames[a:b].sum())
                    for a, b in runs)
    pick = lambda name: np.array([getattr(c, name) for c in counters], np.float64)  # noqa: E731
    return AudioRun(mel.nr_dpus, mel.nr_tasklets, n, [list(frames[a:b]) for a, b in runs],
                    pick("mram_read_calls"), pick("mram_read_bytes"), pick("mram_write_calls"),
                    pick("mram_write_bytes"), host.round8(in_bytes), host.round8(out_bytes))


@dataclass
class AudioProjection:
    """PROJECTED time of one launch on `system` and the clips/s it gives."""
    system: str
    case: str
    clips_per_launch: float
    instructions_per_clip: float
    t_in: float
    t_compute: float
    t_dma: float
    t_out: float
    t_launch: float
    clips_per_s: float
    bound: str
    share: dict                  # instructions per unit, as a fraction of the clip's


def project(run: AudioRun, tables, system: System, case: str = "nominal",
            a: Assumptions = Assumptions(), costs: AudioCosts = AudioCosts()) -> AudioProjection:
    """Weak scaling as docs/cost_model.md: `system` runs copies of the measured launch (the same
    clips per DPU); a DPU takes max(compute, DMA), or their sum in the worst case."""
    per_frame = frame_work(tables)
    frame_instr = instructions(per_frame, costs, case)
    clock = system.clock_hz
    per_dpu, comp_of, dma_of = [], [], []
    for d, frames in enumerate(run.frames):
        total = frame_instr * sum(frames) + costs.dma_call.at(case) * (run.read_calls[d] + run.write_calls[d])
        busiest = frame_instr * sum(math.ceil(f / run.nr_tasklets) for f in frames)
        compute = max(total, a.pipeline_depth.at(case) * busiest)
        dma = float(dma_cycles(run.read_calls[d], run.read_bytes[d], run.write_calls[d], run.write_bytes[d],
                               a, case))
        comp_of.append(compute)
        dma_of.append(dma)
        per_dpu.append(max(compute, dma) if a.overlap_dma_compute.at(case) else compute + dma)
    slowest = int(np.argmax(per_dpu))
    ranks_eff = 1.0 + a.rank_scaling.at(case) * (system.ranks - 1)
    t_in = system.nr_dpus * run.xfer_in / (a.host_to_dpu_rank_bw.at(case) * ranks_eff)
    t_out = system.nr_dpus * run.xfer_out / (a.dpu_to_host_rank_bw.at(case) * ranks_eff)
    t_dpu = per_dpu[slowest] / clock
    overlap = a.overlap_transfers.at(case) and system.ranks >= 2
    t_launch = max(t_in + t_out, t_dpu) if overlap else t_in + t_dpu + t_out
    active = sum(1 for f in run.frames if f)
    clips = run.clips / active * system.nr_dpus
    stages = {"host->DPU transfer": t_in, "DPU compute": comp_of[slowest] / clock,
              "DPU DMA": dma_of[slowest] / clock, "DPU->host transfer": t_out}
    frames_per_clip = sum(sum(f) for f in run.frames) / run.clips
    share = {unit: n * getattr(costs, unit).at(case) / frame_instr for unit, n in per_frame.items() if n}
    return AudioProjection(system.name, case, clips, frame_instr * frames_per_clip, t_in,
                           comp_of[slowest] / clock, dma_of[slowest] / clock, t_out, t_launch,
                           clips / t_launch, max(stages, key=stages.get), share)


def project_all(run: AudioRun, tables, systems: Sequence[System] = SYSTEMS,
                costs: Optional[AudioCosts] = None) -> list:
    return [project(run, tables, s, c, costs=costs or AudioCosts()) for s in systems for c in CASES]


__all__ = ["AudioCosts", "AudioProjection", "AudioRun", "UNITS", "frame_work", "measure", "project",
           "project_all"]
