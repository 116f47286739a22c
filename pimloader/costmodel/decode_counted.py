"""The JPEG decoder's instructions COUNTED on the proxy ISA, turned into instructions per unit
of decode work (pimloader.costmodel.decode.DECODE_WORK) in the model's three cases.

Each launch decodes one image (or one box of it) on one DPU, so that a launch's counts and
the kernel's own work counts (`DpuJpegDecoder.last_work`) describe the same image. A proxy
instruction becomes DPU instructions by its class (costmodel.counted.BRACKETS), except the
IDCT's multiplies, which take `decode.IDCT_MUL`. The kernel's instructions are attributed to
its source functions (`proxy.by_source_function`), grouped into the parts of `decode.PARTS`,
and each part's instructions are fitted over the launches to its work columns (non-negative
least squares); every other function is fitted to MCUs and DMA calls.
"""
from __future__ import annotations

import numpy as np

from . import proxy
from .counted import BRACKETS, class_weights, nnls_fit
from .decode import DECODE_WORK, IDCT_MUL, PARTS, REST

WANTED = tuple(f for functions, _ in PARTS.values() for f in functions)


def part_instructions(per_function: dict, case: str) -> dict:
    """DPU instructions of each part (and "rest") of one launch, in `case`'s bracket, from
    `proxy.by_source_function`'s [tasklets, classes + 1] tables."""
    general = class_weights(BRACKETS[case])
    idct = general.copy()
    idct[proxy.CLASSES.index("mul")] = IDCT_MUL[case]
    owner = {f: part for part, (functions, _) in PARTS.items() for f in functions}
    totals = {part: 0.0 for part in (*PARTS, "rest")}
    for name, table in per_function.items():
        part = owner.get(name, "rest")
        weights = idct if part == "idct" else general
        totals[part] += float((np.asarray(table).sum(axis=0) * weights).sum())
    return totals


def fit_units(launches: list[dict]) -> dict:
    """Per case, instructions per unit of DECODE_WORK and the R^2 of each part's fit.

    launches: one dict per launch, {"work": DECODE_WORK values, "parts": {case: part_instructions}}."""
    work = np.array([launch["work"] for launch in launches], dtype=np.float64)
    column = {name: work[:, i] for i, name in enumerate(DECODE_WORK)}
    out = {}
    for case in BRACKETS:
        units, r2 = {}, {}
        groups = {**{part: units_of for part, (_, units_of) in PARTS.items()}, "rest": REST}
        for part, names in groups.items():
            counted = np.array([launch["parts"][case][part] for launch in launches])
            coefficients, r2[part] = nnls_fit(np.column_stack([column[n] for n in names]), counted)
            units.update({n: float(c) for n, c in zip(names, coefficients)})
        out[case] = {"units": units, "r2": r2}
    return out


def predicted(work: np.ndarray, units: dict) -> float:
    """The instructions the fitted units give for one launch's work."""
    return float(sum(w * units[name] for w, name in zip(work, DECODE_WORK)))


__all__ = ["WANTED", "fit_units", "part_instructions", "predicted"]
