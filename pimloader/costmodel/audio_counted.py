"""The DPU log-mel kernel's instructions COUNTED on the proxy ISA (costmodel.proxy), turned into
instructions per unit of costmodel.audio's work in the model's three cases.

A launch runs a few clips of one spec on one DPU; its counts per source function
(`proxy.by_source_function`: an instruction goes to the innermost of `WANTED` in its DWARF
inline chain) are grouped into the parts of `PARTS`, and each part's DPU instructions are
fitted over the launches, which vary n_fft (so the FFT's radices), n_mels, top_db and the
masks, to its units' counts (non-negative least squares): a part with one unit is its
instructions over its count; `frame` collects the per-frame share of every part. A proxy
instruction becomes DPU instructions by its class as for the other kernels
(costmodel.counted.BRACKETS), except its multiplies, which are 16x16-bit products here
(`AUDIO_MUL`: four of the DPU's 8x8 multiplies and three shift-adds; worst, mul_step chains).
"""
from __future__ import annotations

import numpy as np

from . import proxy
from .audio import UNITS
from .counted import BRACKETS, class_weights, nnls_fit

AUDIO_MUL = {"best": 4.0, "nominal": 7.0, "worst": 20.0}
# part: (its source functions, the units its instructions are fitted to)
PARTS = {
    "framing": (("fill_frame", "sample_at"), ("sample", "frame")),
    "scaling": (("rshift_round", "shifted"), ("scale",)),
    "peaks": (("peak_of",), ("peak", "frame")),
    "butterflies": (("fft_dif", "butterfly", "butterfly4", "butterfly_odd", "twiddle", "stage_shift"),
                    ("bf2", "bf4", "odd_term", "frame")),
    "q15_products": (("mul_q15",), ("mul_q15",)),
    "power": (("split_real", "real_bin", "to_power"), ("power_bin", "frame")),
    "squares": (("square",), ("square",)),
    "mel": (("mel_row", "mul_u48_u16", "power_of", "log2_q16", "to_db", "bit_length64", "__clzsi2"),
            ("mel_mac", "mel_value")),
    "masks": (("mask_row", "in_masks"), ("mask_value", "frame")),
    "clamp": (("clamp_frames",), ("clamp_value",)),
}
REST = ("frame", "dma_call")   # every other function: the frame loop, the clip set-up, the DMA
WANTED = tuple(f for functions, _ in PARTS.values() for f in functions)
COLUMNS = (*UNITS, "dma_call")


def part_instructions(per_function: dict, case: str) -> dict:
    """DPU instructions of each part (and "rest") of one launch in `case`'s bracket, from
    `proxy.by_source_function`'s [tasklets, classes + 1] tables."""
    weights = class_weights(BRACKETS[case])
    weights[proxy.CLASSES.index("mul")] = AUDIO_MUL[case]
    owner = {f: part for part, (functions, _) in PARTS.items() for f in functions}
    totals = {part: 0.0 for part in (*PARTS, "rest")}
    for name, table in per_function.items():
        totals[owner.get(name, "rest")] += float((np.asarray(table).sum(axis=0) * weights).sum())
    return totals


def fit_units(launches: list[dict]) -> dict:
    """Per case, instructions per unit (costmodel.audio.UNITS and dma_call) and each part's R^2.

    launches: {"work": {unit: count, "dma_call": calls}, "parts": {case: part_instructions}}."""
    out = {}
    for case in BRACKETS:
        units, r2 = dict.fromkeys(COLUMNS, 0.0), {}
        groups = {**{part: names for part, (_, names) in PARTS.items()}, "rest": REST}
        for part, names in groups.items():
            design = np.array([[launch["work"][n] for n in names] for launch in launches], np.float64)
            counted = np.array([launch["parts"][case][part] for launch in launches])
            coefficients, r2[part] = nnls_fit(design, counted)
            for name, value in zip(names, coefficients):
                units[name] += float(value)
        out[case] = {"units": units, "r2": r2}
    return out


def predicted(work: dict, units: dict) -> float:
    """The instructions the fitted units give for one launch's work."""
    return float(sum(count * units[name] for name, count in work.items()))


__all__ = ["AUDIO_MUL", "PARTS", "WANTED", "fit_units", "part_instructions", "predicted"]
