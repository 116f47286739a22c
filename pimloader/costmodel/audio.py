"""PROJECTED speed of the DPU log-mel kernel (dpu_src/audio_features.c). Nothing here is a
measurement: the work is counted exactly from the kernel's loops for a spec and clip lengths,
the DMA and transfer bytes are the emulator's counts for a real batch, the instructions per
unit of work are counted on the RV32 proxy (`AudioCosts`, benchmarks.audio_instruction_counts)
and the rest are the published figures of `assumptions.Assumptions` (PrIM). docs/audio.md,
"DPU kernel".

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

COUNTED = ("counted: dpu_src/audio_features.c on the RV32 proxy (python -m benchmarks.audio_instruction_counts, "
           "2026-12-01: 8 launches, n_fft 240-1024, 40-128 mels, fitted per part; products at AUDIO_MUL)")


def _counted(best: float, nominal: float, worst: float, unit: str, what: str, before: tuple) -> Param:
    return Param(best, nominal, worst, unit, COUNTED,
                 f"{what}; assumed before it was counted: {before[0]} / {before[1]} / {before[2]}")


@dataclass(frozen=True)
class AudioCosts:
    """Instructions per unit of the log-mel kernel's work (best / nominal / worst), COUNTED on
    the RV32 proxy with the brackets of costmodel.counted (a 16x16 product is costmodel.
    audio_counted.AUDIO_MUL DPU instructions); what the units cover, and the figures assumed
    before, in each note."""
    sample: Param = _counted(31.3, 37.8, 61.4, "instr/sample", "fill_frame and sample_at: cache, "
                             "reflection, window product, peak", (14, 22, 45))
    scale: Param = _counted(2.2, 2.5, 2.8, "instr/value", "rshift_round, inlined", (4, 5, 8))
    peak: Param = _counted(4.8, 5.5, 6.3, "instr/component", "peak_of", (3, 5, 7))
    bf2: Param = _counted(57.9, 61.8, 69.1, "instr/butterfly", "a radix-2 butterfly with fft_dif's loads, "
                          "stores and twiddle tests (its products are mul_q15's)", (10, 14, 20))
    bf4: Param = _counted(154.5, 163.4, 175.7, "instr/butterfly", "a radix-4 butterfly with fft_dif's loads, "
                          "stores and twiddle tests", (30, 40, 60))
    odd_term: Param = _counted(104.7, 112.6, 146.5, "instr/term", "butterfly_odd per (q, j) term, and its "
                               "butterfly's share of fft_dif's loads and stores", (10, 14, 20))
    mul_q15: Param = _counted(13.6, 19.6, 47.4, "instr/product", "mul_q15: two 16x16 products", (12, 20, 46))
    square: Param = _counted(20.0, 29.0, 68.0, "instr/square", "square: three 16x16 products, 64-bit sums",
                             (22, 31, 70))
    power_bin: Param = _counted(38.0, 39.7, 61.0, "instr/slot", "split_real, real_bin and to_power per slot "
                                "(their products are mul_q15's and square's)", (8, 12, 20))
    mel_mac: Param = _counted(34.1, 43.6, 83.1, "instr/term", "mel_row's terms: bin_pos and weight loads, "
                              "power_of, mul_u48_u16, 64-bit accumulate", (28, 41, 90))
    mel_value: Param = _counted(86.6, 99.8, 164.4, "instr/value", "log2_q16, to_db, floor, store, max",
                                (45, 65, 130))
    mask_value: Param = _counted(13.9, 19.1, 24.3, "instr/value", "mask_row, in_masks", (12, 20, 30))
    clamp_value: Param = _counted(6.2, 7.3, 8.5, "instr/value", "clamp_frames", (3, 4, 6))
    frame: Param = _counted(430.3, 486.4, 712.3, "instr/frame", "per frame: run_frame, stage set-up, "
                            "stage_shift, the calls of every part", (120, 200, 400))
    dma_call: Param = _counted(16.7, 19.2, 21.8, "instr/call", "read_big/write_big and the call", (5, 10, 20))


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
