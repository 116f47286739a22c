"""What the cost model assumes: the published figures of real UPMEM systems and the
instruction counts per unit of the kernel's work, each a `Param` with its source and
reasoning, at its best, nominal and worst value (`CASES`). See docs/cost_model.md."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields


CASES = ("best", "nominal", "worst")

# sources of the figures
PRIM = "measured by PrIM (Gomez-Luna et al. 2021/2022), upmem-reference.md"
UPMEM_DOCS = "UPMEM docs, upmem-reference.md"
COUNTED = ("counted: crop_resize.c on an RV32 proxy of the DPU ISA (python -m "
           "benchmarks.instruction_counts, 2026-12-01)")
ASSUMED = "assumed"

# sizes of the structs of include/pim_params.h and include/pim_dpu_layout.h, from the C build


@dataclass(frozen=True)
class Param:
    """One named figure of the model: its best / nominal / worst value, unit, source, reason."""
    best: float
    nominal: float
    worst: float
    unit: str
    source: str
    why: str

    def at(self, case: str) -> float:
        if case not in CASES:
            raise ValueError(f"case must be one of {CASES}, got {case!r}")
        return float(getattr(self, case))


def _fixed(value: float, unit: str, source: str, why: str) -> Param:
    return Param(value, value, value, unit, source, why)


@dataclass(frozen=True)
class Assumptions:
    """Every figure the projection uses. Change one with dataclasses.replace."""

    # -- DMA between MRAM and WRAM (per DPU) --
    dma_read_latency: Param = _fixed(77, "cycles/call", PRIM, "MRAM->WRAM fixed cost per mram_read")
    dma_write_latency: Param = _fixed(61, "cycles/call", PRIM, "WRAM->MRAM fixed cost per mram_write")
    dma_cycles_per_byte: Param = _fixed(0.5, "cycles/byte", PRIM, "at most ~2 B/cycle per DPU")
    dma_latency_hidden: Param = Param(
        1.0, 0.0, 0.0, "fraction", ASSUMED,
        "share of the fixed DMA latency hidden by other tasklets' DMAs on the DPU's one DMA engine. "
        "0 (every call costs 77|61 + n/2 in turn) matches PrIM's sustained ~630 MB/s for 2 KB "
        "transfers with many tasklets; 1 (only the bytes serialise) is an optimistic bound")
    # -- the pipeline --
    pipeline_depth: Param = _fixed(
        11, "tasklets", UPMEM_DOCS,
        "a tasklet issues at most one instruction every 11 cycles; >= 11 busy tasklets fill the "
        "pipeline at one instruction per cycle per DPU")
    overlap_dma_compute: Param = Param(
        1, 1, 0, "0/1", ASSUMED,
        "1: while one tasklet waits on its DMA the others compute, so a DPU takes max(compute, "
        "DMA); 0: no overlap at all (compute + DMA), a pessimistic bound")
    # -- host <-> DPU transfers --
    host_to_dpu_rank_bw: Param = _fixed(6.7e9, "B/s per rank", PRIM,
                                        "parallel dpu_push_xfer to the 64 DPUs of a rank")
    dpu_to_host_rank_bw: Param = _fixed(4.7e9, "B/s per rank", PRIM,
                                        "parallel dpu_push_xfer(FROM_DPU) from a rank")
    rank_scaling: Param = Param(
        1.0, 1.0, 0.0, "fraction", ASSUMED,
        "how transfer bandwidth grows with ranks: 1 = every rank moves its data at the per-rank "
        "figure at once (ranks sit on separate DIMMs/channels); 0 = the whole system shares one "
        "rank's bandwidth (host-side bottleneck). Not measured on more than one rank here")
    overlap_transfers: Param = Param(
        1, 0, 0, "0/1", ASSUMED,
        "1: the next launch's push and the last one's gather run while other ranks compute "
        "(needs >= 2 ranks: the host reaches a DPU's MRAM only while that DPU is stopped); "
        "0: push -> launch -> gather in turn, what csrc/dpu_driver.c does today")
    # -- instructions per unit of work (see KernelWork for what each unit is) --
    # COUNTED: crop_resize.c compiled for RV32IM/RV32EM and run on csrc/proxy/rv32sim.c from
    # emulator traces; best / nominal / worst are the ISA brackets of costmodel.counted
    # (docs/cost_model.md keeps the figures assumed before, from reading the C).
    h_mac: Param = Param(7.7, 8.8, 23.0, "instr/(tap x channel)", COUNTED,
                         "pim_hpass_row_c3's instructions, fitted with h_out (R^2 0.999); "
                         "assumed before: 5 / 6 / 20")
    h_out: Param = Param(11.4, 12.8, 20.9, "instr/(output x channel)", COUNTED,
                         "pim_hpass_row_c3's per-output part (pim_acc_to_u8, ranges, set-up); "
                         "assumed before: 6 / 9 / 14")
    v_mac: Param = Param(10.1, 11.6, 25.1, "instr/element", COUNTED,
                         "pim_vpass_mac over its count; assumed before: 7 / 9 / 23")
    v_init: Param = Param(2.1, 2.6, 3.1, "instr/element", COUNTED,
                          "pim_vpass_init over its count; assumed before: 1 / 2 / 3")
    v_finish: Param = Param(8.1, 9.6, 11.1, "instr/element", COUNTED,
                            "pim_vpass_finish over its count; assumed before: 5 / 7 / 9")
    emit: Param = Param(7.3, 7.9, 8.8, "instr/element", COUNTED,
                        "pim_emit_row over its count; assumed before: 5 / 8 / 12")
    row: Param = Param(156, 173, 269, "instr/(row x segment)", COUNTED,
                       "the rest of run_rows, fitted with column (R^2 ~0.3: a small share, "
                       "~2% of the kernel, poorly explained per tasklet); assumed before: 25 / 40 / 80")
    column: Param = Param(13.4, 16.2, 17.1, "instr/(column x band)", COUNTED,
                          "fitted with row; assumed before: 6 / 10 / 15")
    sample_load: Param = Param(234, 274, 476, "instr/load", COUNTED,
                               "load_sample over its count (64-bit checks are libgcc routines); "
                               "assumed before: 100 / 150 / 400")
    dma_call: Param = Param(35.4, 37.4, 48.4, "instr/call", COUNTED,
                            "read_big, write_big, read_span, source_row and the ldma/sdma "
                            "itself, per call; assumed before: 5 / 10 / 20")

    def table(self) -> list[dict]:
        """Every parameter as a dict (name, best, nominal, worst, unit, source, why)."""
        return [{"name": f.name, **{k: getattr(getattr(self, f.name), k) for k in
                                    ("best", "nominal", "worst", "unit", "source", "why")}}
                for f in fields(self)]


@dataclass(frozen=True)
class System:
    """A UPMEM system: DPU count, clock, DPUs per rank."""
    name: str
    nr_dpus: int
    clock_hz: float
    dpus_per_rank: int = 64
    source: str = UPMEM_DOCS

    @property
    def ranks(self) -> int:
        return max(1, math.ceil(self.nr_dpus / self.dpus_per_rank))


SYSTEMS = (
    System("1 rank", 64, 350e6, source="64 DPUs per rank (8 chips x 8), 350 MHz: " + UPMEM_DOCS),
    System("640 DPUs", 640, 267e6, source="the older 640-DPU PrIM system at 267 MHz: " + PRIM),
    System("2,560 DPUs", 2560, 350e6, source="20 DIMMs, 2,560 DPUs at 350 MHz (2,556 usable): " + PRIM),
)


__all__ = ["ASSUMED", "Assumptions", "CASES", "COUNTED", "PRIM", "Param", "SYSTEMS", "System",
           "UPMEM_DOCS"]
