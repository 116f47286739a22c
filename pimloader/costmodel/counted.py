"""From instructions counted on the proxy ISA (pimloader.costmodel.proxy) to the cost
model's units of work (pimloader.costmodel.work.WORK), in the three cases of the model.

Two steps. (1) A proxy instruction becomes DPU instructions by its class, in brackets for
how the RV32 proxy differs from the DPU ISA (`BRACKETS`, docs/cost_model.md). (2) The
kernel's instructions are attributed to source functions through the DWARF inline chains
(`proxy.by_source_function`), and each unit's cost is its own functions' instructions over
its count; the horizontal pass is fitted to h_mac and h_out, the rest of run_rows to row and
column (non-negative least squares over tasklets). `python -m benchmarks.instruction_counts`
runs it and prints the result beside the assumptions it replaced.
"""
from __future__ import annotations

import numpy as np

from . import proxy
from .work import WORK

# How a proxy instruction maps to DPU instructions, per case (docs/cost_model.md). The kernel
# multiplies weight x pixel as two 8x8 products (PIM_MUL_8X8), one DPU instruction each
# (mul_sh_ul, mul_ul_ul); the few 32-bit products of addresses are software on a DPU: nominal
# 1.5 per RV32 `mul` on average, worst 8 (mul_step chains everywhere). A DPU's ALU
# instructions can carry a conditional jump, so a compare-and-branch may fuse into the
# instruction before it (best: all, nominal: half, worst: none). The worst case takes the
# 16-register RV32EM build's counts (spills) for the DPU's 24 registers.
BRACKETS = {
    "best": {"isa": "rv32im", "mul": 1.0, "branch": 0.0},
    "nominal": {"isa": "rv32im", "mul": 1.5, "branch": 0.5},
    "worst": {"isa": "rv32em", "mul": 8.0, "branch": 1.0},
}

# Where each unit of work (pimloader.costmodel.work.WORK) runs in the kernel's source.
UNIT_SOURCES = {
    "v_mac": ("pim_vpass_mac",), "v_init": ("pim_vpass_init",), "v_finish": ("pim_vpass_finish",),
    "emit": ("pim_emit_row",), "sample_load": ("load_sample",),
    "dma_call": ("read_big", "write_big", "read_span", "source_row", "(dma)"),
}
HPASS = ("pim_hpass_row_c3", "pim_hpass_row_c1")   # h_mac and h_out, fitted
WANTED = HPASS + tuple(f for fs in UNIT_SOURCES.values() for f in fs)
# the rest (run_rows inlined into main, fail) is fitted to row and column


def class_weights(bracket: dict) -> np.ndarray:
    """DPU instructions per proxy instruction of each class (proxy.CLASSES, then DMA calls)."""
    w = np.ones(len(proxy.CLASSES) + 1)
    w[proxy.CLASSES.index("mul")] = bracket["mul"]
    w[proxy.CLASSES.index("branch")] = bracket["branch"]
    return w


def nnls_fit(design: np.ndarray, counted: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares over the tasklets' rows (design: [rows, k], k small): the
    best least-squares fit over every subset of the columns whose coefficients are all >= 0;
    the coefficients and R^2."""
    counted = counted.astype(np.float64)
    k = design.shape[1]
    best, best_residual = np.zeros(k), float((counted ** 2).sum())
    for mask in range(1, 2 ** k):
        columns = [j for j in range(k) if mask >> j & 1]
        solution = np.linalg.lstsq(design[:, columns], counted, rcond=None)[0]
        if (solution < 0).any():
            continue
        coefficients = np.zeros(k)
        coefficients[columns] = solution
        residual = float(((counted - design @ coefficients) ** 2).sum())
        if residual < best_residual:
            best, best_residual = coefficients, residual
    spread = float(((counted - counted.mean()) ** 2).sum()) or 1.0
    return best, 1.0 - best_residual / spread


def fits(entries: list[dict]) -> dict:
    """Per bracket, instructions per unit of work: a unit's own source functions' instructions
    over its count (all launches together); h_mac/h_out fitted to the horizontal pass's
    instructions, row/column to the rest of run_rows (non-negative least squares per tasklet)."""
    work = np.concatenate([np.array(w) for e in entries for w in e["tasklet_work"]])
    col = {name: work[:, i] for i, name in enumerate(WORK)}
    col["dma_call"] = np.concatenate([np.array(c) for e in entries for c in e["tasklet_dma_calls"]])
    out = {}
    for case in BRACKETS:
        tables = [per for e in entries for per in e["tasklet_functions"][case]]
        T = len(col["row"])

        def instructions(names):
            return np.concatenate([sum((np.array(per[n]) for n in names if n in per),
                                       np.zeros(len(next(iter(per.values())))))
                                   for per in tables]) if tables else np.zeros(T)
        units = {name: float(instructions(sources).sum() / max(col[name].sum(), 1))
                 for name, sources in UNIT_SOURCES.items()}
        (units["h_mac"], units["h_out"]), r2_h = nnls_fit(np.column_stack([col["h_mac"], col["h_out"]]),
                                                          instructions(HPASS))
        known = set(WANTED)
        rest_names = {n for per in tables for n in per if n not in known}
        (units["row"], units["column"]), r2_rest = nnls_fit(np.column_stack([col["row"], col["column"]]),
                                                            instructions(tuple(rest_names)))
        out[case] = {"units": {k: float(v) for k, v in units.items()}, "r2_hpass": r2_h, "r2_rest": r2_rest,
                     "rest_functions": sorted(rest_names)}
    return out
