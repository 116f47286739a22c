"""A projection of what the DPU kernel would cost on real UPMEM systems (the design's "perf model").

No DPU hardware is reachable from this project: every time and rate this module returns is a
PROJECTION from a cost model, never a measurement. What goes in:

1. what pimloader's libdpu emulator COUNTED for a real batch (`DpuRun.from_backend`): per DPU
   the MRAM<->WRAM DMA calls and bytes in each direction and the host<->DPU bytes, plus the
   common (padded) transfer lengths of `DpuDriver.run_info()`;
2. the work the kernel does, COUNTED from the batch's own axis tables (`sample_work`,
   `dpu_work`): taps per output of each resampled axis, rows and elements, walked the way
   dpu_src/crop_resize.c walks them (each source row resampled once per segment and tasklet band
   thanks to its WRAM ring), over the driver's split of the batch over DPUs (by estimated work)
   and of each DPU's rows into tasklet bands: the driver's own plan, read from its C code
   (`driver_plan`: pim_dpu_plan of csrc/dpu_plan.c, through `pimloader._dpu_emulated`; no copy
   of it here);
3. ASSUMED instruction counts per unit of that work (`Assumptions`, read off the kernel source
   and the DPU instruction set; each with its reasoning), and the published figures of real
   systems (/work/shared/docs/upmem-reference.md, "Figures of real systems": PrIM's
   measurements and UPMEM's documentation), each a `Param` with its source.

What comes out (`project`): the time of one launch on a system of N DPUs split into host->DPU
transfer, DPU compute, DPU DMA and DPU->host transfer; which of them bounds the launch; and the
images/s of the DPU path, for three cases (`CASES`): "best", "nominal" and "worst" take every
parameter at its optimistic, most likely and pessimistic value, so the spread is the
sensitivity of the projection to what is not known.

The model, in formulas (per DPU d of the measured run; c = the case's parameter values):

    instructions_d = work_d . cost_c                  (dot product over the work counters)
    compute_d      = max(instructions_d, depth * max_t instructions_{d,t})   [cycles]
                     (one instruction per cycle per DPU at best; a tasklet issues at most one
                     instruction every `depth` = 11 cycles, so few or unbalanced tasklets
                     cannot fill the pipeline)
    dma_d          = (1 - hidden) * (77 * read_calls_d + 61 * write_calls_d)
                     + 0.5 * (read_bytes_d + write_bytes_d)                   [cycles]
                     (one DMA engine per DPU; hidden = the share of the fixed latency that
                     other tasklets' DMAs would hide: 0 matches PrIM's sustained bandwidth)
    dpu_d          = max(compute_d, dma_d) if overlap_dma_compute else compute_d + dma_d
    t_dpu          = max_d dpu_d / clock              (the slowest DPU ends the launch)
    t_in           = N * xfer_len / (bw_in  * ranks_eff),  xfer_len = bytes per DPU pushed
    t_out          = N * out_len  / (bw_out * ranks_eff),  out_len  = common gather length
                     ranks_eff = 1 + scaling * (ranks - 1)   (scaling 1: ranks in parallel)
    t_launch       = t_in + t_dpu + t_out             (push, launch, gather: the driver today)
                   = max(t_in + t_out, t_dpu)         (case "best", >= 2 ranks: transfers of one
                                                       group of ranks while another runs)
    images/s       = images_per_launch / t_launch,  images_per_launch = images_per_DPU * N

The measured run is scaled out by weak scaling: a system of N DPUs is taken to run N / D copies
of the measured D-DPU launch at once (the same images per DPU), which holds for this kernel
because DPUs never talk to each other.

The host keeps decoding the JPEGs (nothing here moves decode to DPUs); `end_to_end` takes the
host's MEASURED decode time per image and reports min(host rate, DPU path rate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Optional, Sequence

import numpy as np

from .assumptions import CASES, SYSTEMS, Assumptions, System
from .work import WORK, KernelWork, driver_plan, dpu_work, sample_work


@dataclass
class DpuRun:
    """What one emulated launch did: per-DPU counters, transfer lengths, the kernel's work."""
    nr_dpus: int
    nr_tasklets: int
    n_images: int
    active_dpus: int
    xfer_bytes: int                 # common host->DPU length per active DPU (padded)
    out_xfer_bytes: int             # common DPU->host length per active DPU (padded)
    in_real_bytes: int              # sum of the chunks' real lengths
    out_real_bytes: int
    read_calls: np.ndarray          # [nr_dpus] emulator counters
    read_bytes: np.ndarray
    write_calls: np.ndarray
    write_bytes: np.ndarray
    host_to_dpu_bytes: np.ndarray
    dpu_to_host_bytes: np.ndarray
    dma_cycles_model: np.ndarray    # the emulator's own 77|61 + n/2 sum, a cross-check
    work: list                      # [active_dpus] KernelWork
    least_in_bytes: int             # every input byte the outputs depend on, read once
    least_out_bytes: int            # every output byte, written once
    images_per_dpu: list = field(default_factory=list)

    @classmethod
    def from_backend(cls, backend, packed, counters: Optional[list] = None,
                     info: Optional[dict] = None) -> "DpuRun":
        """Read `backend`'s counters (reset before the one run they must cover) and run_info of
        its last run of the batch whose descriptors and tables are `packed` (pack_batch). The
        split over DPUs and tasklets and each sample's plan (segment width, ring) are the
        driver's own, read from its C code (`driver_plan`)."""
        counters = counters if counters is not None else [backend.counters(d)
                                                          for d in range(backend.nr_dpus)]
        info = info if info is not None else backend.run_info()
        samples, tables = packed.samples, packed.tables
        plan = driver_plan(samples, tables, backend.nr_dpus, backend.nr_tasklets, info["arena_bytes"])
        works = [sample_work(s, tables, ring=p.ring_rows > 0) for s, p in zip(samples, plan.plans)]
        runs = plan.runs
        C = works[0].channels
        nhwc = bool(int(samples[0]["flags"]) & 4)
        dpu_work_list = []
        for d, run in enumerate(runs):
            # one write per (row, segment[, plane]) + the status block (each <= 2048 bytes here)
            per_segment = 1 if nhwc else C
            segs = (counters[d].mram_write_calls - 1) // per_segment
            dpu_work_list.append(dpu_work([works[i] for i in run], backend.nr_tasklets, segs, plan.bands[d]))
        arr = lambda name: np.array([getattr(c, name) for c in counters], dtype=np.int64)  # noqa: E731
        return cls(backend.nr_dpus, backend.nr_tasklets, len(samples), info["active_dpus"],
                   info["xfer_bytes"], info["out_xfer_bytes"], info["in_real_bytes"],
                   info["out_real_bytes"], arr("mram_read_calls"), arr("mram_read_bytes"),
                   arr("mram_write_calls"), arr("mram_write_bytes"), arr("host_to_dpu_bytes"),
                   arr("dpu_to_host_bytes"), arr("dma_cycles_model"), dpu_work_list,
                   sum(w.least_in_bytes for w in works), sum(w.out_bytes for w in works),
                   [len(r) for r in runs])

    # per-image figures (what the tables print)
    def per_image(self) -> dict:
        n = self.n_images
        reads, writes = int(self.read_bytes.sum()), int(self.write_bytes.sum())
        least = self.least_in_bytes + self.least_out_bytes
        return {
            "mram_read_bytes": reads / n, "mram_write_bytes": writes / n,
            "least_in_bytes": self.least_in_bytes / n, "least_out_bytes": self.least_out_bytes / n,
            "dma_ratio": (reads + writes) / least,
            "host_to_dpu_bytes": int(self.host_to_dpu_bytes.sum()) / n,
            "dpu_to_host_bytes": int(self.dpu_to_host_bytes.sum()) / n,
            "transfer_ratio": (int(self.host_to_dpu_bytes.sum()) + int(self.dpu_to_host_bytes.sum())) / least,
        }


def balanced(run: DpuRun) -> DpuRun:
    """What-if: the same batch with its work and DMAs spread evenly over the active DPUs and
    their tasklets: the bound of any split (the driver's is contiguous, by an estimate of work,
    and cannot cut a sample between DPUs)."""
    active = run.active_dpus
    mean = lambda v: np.full(len(v), float(np.sum(v)) / active)  # noqa: E731
    total = sum(w.total for w in run.work)
    even = np.tile(total / (active * run.nr_tasklets), (run.nr_tasklets, 1))
    return replace(run, read_calls=mean(run.read_calls), read_bytes=mean(run.read_bytes),
                   write_calls=mean(run.write_calls), write_bytes=mean(run.write_bytes),
                   work=[KernelWork(even.copy()) for _ in range(active)])


# ---- the projection --------------------------------------------------------------------------

def dma_cycles(read_calls, read_bytes, write_calls, write_bytes, a: Assumptions, case: str):
    """Cycles of a DPU's DMA engine (per DPU, arrays welcome)."""
    hidden = a.dma_latency_hidden.at(case)
    latency = a.dma_read_latency.at(case) * np.asarray(read_calls) + \
        a.dma_write_latency.at(case) * np.asarray(write_calls)
    return (1.0 - hidden) * latency + a.dma_cycles_per_byte.at(case) * (
        np.asarray(read_bytes) + np.asarray(write_bytes))


def instruction_costs(a: Assumptions, case: str) -> np.ndarray:
    return np.array([getattr(a, name).at(case) for name in WORK])


def compute_cycles(work: KernelWork, dma_calls: float, a: Assumptions, case: str) -> tuple[float, float]:
    """(cycles, instructions) of one DPU: max(total, depth x the busiest tasklet)."""
    per = work.per_tasklet @ instruction_costs(a, case)
    if per.sum() > 0:  # the DMA calls' instructions, spread like the rest of the work
        per = per * (1.0 + a.dma_call.at(case) * dma_calls / per.sum())
    total = float(per.sum())
    return max(total, a.pipeline_depth.at(case) * float(per.max(initial=0.0))), total


@dataclass
class Projection:
    """PROJECTED time of one launch on `system` (seconds) and the images/s it gives."""
    system: str
    case: str
    nr_dpus: int
    clock_hz: float
    images_per_launch: float
    t_in: float
    t_compute: float
    t_dma: float
    t_dpu: float
    t_out: float
    t_launch: float
    images_per_s: float
    bound: str
    instructions_per_image: float
    dpu_imbalance: float       # slowest DPU / mean DPU time
    tasklet_imbalance: float   # the slowest DPU's compute cycles / its instructions (1: pipeline full)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def project(run: DpuRun, system: System, a: Assumptions = Assumptions(), case: str = "nominal") -> Projection:
    """Project the measured launch onto `system` (weak scaling: same images per DPU)."""
    clock = system.clock_hz
    dmas = dma_cycles(run.read_calls, run.read_bytes, run.write_calls, run.write_bytes, a, case)
    per_dpu, comp, instrs = [], [], []
    for d, work in enumerate(run.work):
        cycles, n_instr = compute_cycles(work, float(run.read_calls[d] + run.write_calls[d]), a, case)
        instrs.append(n_instr)
        comp.append(cycles)
        if a.overlap_dma_compute.at(case):
            per_dpu.append(max(cycles, float(dmas[d])))
        else:
            per_dpu.append(cycles + float(dmas[d]))
    slowest = int(np.argmax(per_dpu))
    t_dpu = per_dpu[slowest] / clock
    t_compute, t_dma = comp[slowest] / clock, float(dmas[slowest]) / clock
    ranks_eff = 1.0 + a.rank_scaling.at(case) * (system.ranks - 1)
    # per DPU: the 72-byte header push + the chunk push, together the common length xfer_bytes
    t_in = system.nr_dpus * run.xfer_bytes / (a.host_to_dpu_rank_bw.at(case) * ranks_eff)
    t_out = system.nr_dpus * run.out_xfer_bytes / (a.dpu_to_host_rank_bw.at(case) * ranks_eff)
    if a.overlap_transfers.at(case) and system.ranks >= 2:
        t_launch = max(t_in + t_out, t_dpu)
    else:
        t_launch = t_in + t_dpu + t_out
    images = run.n_images / run.active_dpus * system.nr_dpus
    stages = {"host->DPU transfer": t_in, "DPU compute": t_compute, "DPU DMA": t_dma,
              "DPU->host transfer": t_out}
    bound = max(stages, key=stages.get)
    mean_dpu = float(np.mean(per_dpu))
    dpu_imbalance = per_dpu[slowest] / mean_dpu if mean_dpu > 0 else 1.0
    tasklet_imbalance = comp[slowest] / instrs[slowest] if instrs[slowest] > 0 else 1.0
    rate = images / t_launch if t_launch > 0 else math.inf
    return Projection(system.name, case, system.nr_dpus, clock, images, t_in, t_compute, t_dma,
                      t_dpu, t_out, t_launch, rate, bound, sum(instrs) / run.n_images,
                      dpu_imbalance, tasklet_imbalance)


def project_all(run: DpuRun, systems: Sequence[System] = SYSTEMS,
                a: Assumptions = Assumptions()) -> list[Projection]:
    return [project(run, s, a, c) for s in systems for c in CASES]


def end_to_end(dpu_images_per_s: float, host_s_per_image: float, host_cores: int) -> dict:
    """min(host rate, DPU path rate): the host decodes (and packs) on `host_cores` cores at the
    measured `host_s_per_image` each (linear scaling across cores: assumed)."""
    host = host_cores / host_s_per_image
    return {"host_images_per_s": host, "dpu_images_per_s": dpu_images_per_s,
            "images_per_s": min(host, dpu_images_per_s),
            "bound": "host decode" if host < dpu_images_per_s else "DPU path"}


__all__ = ["DpuRun", "Projection", "balanced", "compute_cycles", "dma_cycles", "end_to_end",
           "instruction_costs", "project", "project_all"]
