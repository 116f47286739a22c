"""The JPEG decoder's instructions COUNTED on the RV32 proxy, per unit of decode work (for
benchmarks.decode_projection; needs riscv64-unknown-elf-gcc).

Each of a few of the dataset's images is decoded whole and as a centred box of half its
height and width, alone on one emulated DPU with its MRAM traced; each launch is replayed by
the decoder built for RV32IM and RV32EM (MRAM must equal the emulator's) and its instructions
attributed by source function (pimloader.costmodel.decode_counted), then fitted per part to
the kernel's own work counts.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from pimloader.backends.dpu import jpeg as DJ
from pimloader.costmodel import decode as dm
from pimloader.costmodel import decode_counted as dc
from pimloader.costmodel import proxy
from pimloader.costmodel.counted import BRACKETS
from pimloader.decode import image_size
from pimloader.decode.baseline import parse_baseline


def count_launch(data: bytes, name: str, box, elves: dict, nr_tasklets: int) -> dict:
    """One decode, traced and replayed on every proxy build: its work, its parts' DPU
    instructions per bracket, the proxy's raw total."""
    trace = tempfile.mkdtemp(prefix="pimloader-decode-trace-")
    os.environ["DPUEMU_TRACE_DIR"] = trace
    try:
        with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=nr_tasklets) as decoder:
            decoder.dpus.reset_counters()
            decoder.decode([data], [name], [box])
            c, last = decoder.dpus.counters(), decoder.last_work[0]
        [launch] = proxy.traced_launches(trace)
        replays = {isa: proxy.replay(elf, launch) for isa, elf in elves.items()}
    finally:
        del os.environ["DPUEMU_TRACE_DIR"]
        shutil.rmtree(trace, ignore_errors=True)
    channels = len(parse_baseline(data).components)
    work = dm.work_of(last, channels, c.mram_read_calls + c.mram_write_calls)
    functions = {isa: proxy.by_source_function(elves[isa], [r], dc.WANTED)[0] for isa, r in replays.items()}
    parts = {case: dc.part_instructions(functions[b["isa"]], case) for case, b in BRACKETS.items()}
    return {"name": name, "box": box, "work": work.tolist(), "last_work": last, "parts": parts,
            "proxy_instructions": {isa: r.total for isa, r in replays.items()}}


def count_decoder(paths: list[Path], nr_tasklets: int) -> dict:
    elves = {isa: proxy.build_kernel(DJ.KERNEL_SOURCE, nr_tasklets=nr_tasklets, isa=isa) for isa in proxy.ISAS}
    launches = []
    for path in paths:
        data = path.read_bytes()
        if DJ.fallback_reason(data, path) is not None:
            continue
        height, width = image_size(data)
        for box in (None, (height // 4, width // 4, height // 2, width // 2)):
            launches.append(count_launch(data, str(path), box, elves, nr_tasklets))
    fits = dc.fit_units(launches)
    model = dm.DecodeAssumptions()
    for launch in launches:
        launch["predicted"] = {case: float(np.dot(launch["work"], model.costs(case))) for case in BRACKETS}
        launch["counted"] = {case: float(sum(launch["parts"][case].values())) for case in BRACKETS}
    sizes = {isa: proxy.static_size(elf)["instructions"] for isa, elf in elves.items()}
    return {"launches": launches, "fits": fits, "idct_mul": dm.IDCT_MUL, "static_instructions": sizes}


def report_counts(counted: dict) -> None:
    print("\nJPEG decoder, DPU instructions per unit of decode work COUNTED on the RV32 proxy "
          "(best / nominal / worst brackets) vs the model's")
    model = dm.DecodeAssumptions()
    for name in dm.DECODE_WORK:
        fitted = " / ".join(f"{counted['fits'][c]['units'][name]:.1f}" for c in BRACKETS)
        used = " / ".join(f"{getattr(model, name).at(c):g}" for c in BRACKETS)
        print(f"  {name:<15} {fitted:>24}   model {used}")
    print("  R^2 per part (nominal):", {k: round(v, 4) for k, v in counted["fits"]["nominal"]["r2"].items()})
    worst = max(abs(l["predicted"]["nominal"] / l["counted"]["nominal"] - 1) for l in counted["launches"])
    print(f"  the model's figures predict each counted launch within {100 * worst:.1f}% (nominal)")
