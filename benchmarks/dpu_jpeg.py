"""JPEG decoding on (emulated) DPUs: what one decode moves and computes, per photograph.

For scikit-image's colour photographs saved by Pillow (quality 90, 4:2:0) and made seekable
(`add_restart_markers(..., 4)`), each decoded whole and as a centred box of half its height
and width on one DPU with 16 tasklets (`pimloader.backends.dpu.jpeg.DpuJpegDecoder`):

- the emulator's counts: host<->DPU bytes, MRAM reads and writes (bytes and DMA calls);
- the kernel's own work counts (MCUs, blocks, AC coefficients, entropy-coded bytes);
- where riscv64-unknown-elf-gcc is installed, the instructions the kernel executed, counted on
  the cost model's RV32IM/RV32EM proxy (the traced launch replayed; MRAM must match).

These are counts, not time: the emulator's speed is not DPU speed (docs/dpu.md, "JPEG decode
on DPUs"). Not part of `python -m benchmarks`.

    python -m benchmarks.dpu_jpeg [--out results/latest/dpu_jpeg.json]
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
from pathlib import Path

from PIL import Image

from benchmarks.harness import results_path, write_results
from pimloader.backends.dpu.jpeg import KERNEL_SOURCE, DpuJpegDecoder
from pimloader.costmodel import proxy
from pimloader.decode import add_restart_markers

PHOTOS = ("astronaut", "coffee", "chelsea")
NR_TASKLETS = 16


def seekable_photo(name: str) -> bytes:
    import skimage.data
    buffer = io.BytesIO()
    Image.fromarray(getattr(skimage.data, name)()).save(buffer, "JPEG", quality=90)
    return add_restart_markers(buffer.getvalue(), 4)


def decode_once(jpeg: bytes, box, elves: dict) -> dict:
    """One decode on a fresh DPU: the emulator's counts, the kernel's, the proxy's."""
    trace = tempfile.mkdtemp(prefix="pimloader-jpeg-trace-")
    os.environ["DPUEMU_TRACE_DIR"] = trace
    try:
        with DpuJpegDecoder(nr_dpus=1, nr_tasklets=NR_TASKLETS) as dpus:
            dpus.dpus.reset_counters()
            dpus.decode([jpeg], boxes=[box])
            c, work = dpus.dpus.counters(), dpus.last_work[0]
        [launch] = proxy.traced_launches(trace)
        counted = {isa: proxy.replay(elf, launch).total for isa, elf in elves.items()}
    finally:
        del os.environ["DPUEMU_TRACE_DIR"]
        shutil.rmtree(trace, ignore_errors=True)
    return {"host_to_dpu_bytes": c.host_to_dpu_bytes, "dpu_to_host_bytes": c.dpu_to_host_bytes,
            "mram_read_bytes": c.mram_read_bytes, "mram_read_calls": c.mram_read_calls,
            "mram_write_bytes": c.mram_write_bytes, "mram_write_calls": c.mram_write_calls,
            "work": work, "instructions": counted,
            "instructions_per_pixel": {isa: n / work["pixels"] for isa, n in counted.items()}}


def run() -> dict:
    elves = {}
    if proxy.find_cross_compiler() is not None:
        elves = {isa: proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=NR_TASKLETS, isa=isa) for isa in proxy.ISAS}
    rows = []
    for name in PHOTOS:
        jpeg = seekable_photo(name)
        height, width = Image.open(io.BytesIO(jpeg)).size[::-1]
        for part, box in (("whole", None), ("box", (height // 4, width // 4, height // 2, width // 2))):
            rows.append({"photo": name, "size": [height, width], "part": part, "seekable_bytes": len(jpeg),
                         **decode_once(jpeg, box, elves)})
    sizes = {isa: {opt: proxy.static_size(proxy.build_kernel(KERNEL_SOURCE, nr_tasklets=NR_TASKLETS, isa=isa,
                                                             optimisation=opt))["instructions"]
                   for opt in ("-O2", "-Os")} for isa in elves}
    return {"nr_tasklets": NR_TASKLETS, "decodes": rows, "static_instructions": sizes}


def report(results: dict) -> None:
    print("JPEG decode on one emulated DPU, 16 tasklets (counts, not time)")
    print(f"{'photo':10s} {'part':5s} {'h->d kB':>8s} {'d->h kB':>8s} {'MRAM rd kB':>10s} {'wr kB (calls)':>15s} "
          f"{'MCUs':>5s} {'AC coefs':>8s} {'RV32IM instr/px':>15s}")
    for r in results["decodes"]:
        per_pixel = r["instructions_per_pixel"].get("rv32im")
        print(f"{r['photo']:10s} {r['part']:5s} {r['host_to_dpu_bytes'] / 1e3:8.1f} {r['dpu_to_host_bytes'] / 1e3:8.1f} "
              f"{r['mram_read_bytes'] / 1e3:10.1f} {r['mram_write_bytes'] / 1e3:7.1f} ({r['mram_write_calls']:>5d}) "
              f"{r['work']['mcus']:5d} {r['work']['ac_coefficients']:8d} "
              f"{'-' if per_pixel is None else f'{per_pixel:.1f}':>15s}")
    if results["static_instructions"]:
        print("code size (proxy instructions, IRAM holds 4,096):", results["static_instructions"])
    else:
        print(f"instruction counts skipped: {proxy.CROSS_COMPILER} is not installed")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=results_path("dpu_jpeg", quick=False))
    args = parser.parse_args(argv)
    results = run()
    report(results)
    write_results(results, args.out)
    return results


if __name__ == "__main__":
    main()
