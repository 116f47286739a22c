"""JPEG decode on DPUs as a stage of the cost model, and the decode -> crop/resize chain on
one DPU, PROJECTED (docs/cost_model.md, "Decode on DPUs (projected)").

Nothing here is a measurement of a DPU. What goes in:

1. the decoder's own work counts per image (`DpuJpegDecoder.last_work`: MCUs, 8x8 blocks,
   AC coefficients, entropy-coded bytes, and the output pixels of the box), the MRAM DMA
   calls and bytes the emulator counted for that image alone, and the bytes of its chunk
   (the restart intervals its box needs, descriptors, tables): `DecodeImage`;
2. instructions per unit of that work, COUNTED: dpu_src/jpeg_decode.c compiled for the RV32
   proxy and replayed (pimloader.costmodel.proxy), attributed by source function (Huffman,
   IDCT, upsampling, colour, the rest) and fitted per part (`fit_units`), mapped to DPU
   instructions by the ISA brackets of costmodel.counted plus one of the IDCT's own
   (`IDCT_MUL`: its 32-bit products are mul_step chains on a DPU);
3. the published figures of assumptions.py, and the time of a `dpu_load` (`DecodeAssumptions`).

The chain (`project_chain`): per launch, the host loads the decoder (`dpu_load`), pushes
the compressed intervals, launches, loads crop_resize (IRAM cannot hold both: 2,509 + 2,070
proxy instructions > 4,096), pushes only the crop/resize chunk's descriptors and axis tables
(the decoded boxes stay in MRAM where the decoder wrote them), launches and gathers the
outputs and the decoder's statuses. A DPU decodes the samples crop_resize then resamples
(the crop/resize driver's split of the batch).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Sequence

import numpy as np

from .assumptions import ASSUMED, Assumptions, Param, System
from .model import DpuRun, dma_cycles, project

# Units of decode work, each priced by a DecodeAssumptions parameter of the same name.
DECODE_WORK = ("huff_block", "huff_coef", "huff_byte", "idct_block", "idct_coef", "upsample_pixel",
               "colour_pixel", "mcu", "dma_call", "image")
STEP2 = ("huff_block", "huff_coef", "huff_byte", "idct_block", "idct_coef", "mcu")  # intervals over tasklets
SERIAL = ("image",)   # tasklet 0 alone: the image's descriptor and tables
# the rest (upsampling, colour, the DMA calls) is step 3: output rows over tasklets

# Where each part of the decoder runs (its source functions; inlined code is charged to the
# innermost of these in its DWARF chain), and the work columns its instructions are fitted to.
PARTS = {
    "huffman": (("decode_symbol", "decode_block", "fill", "next_byte", "get_bits", "extend", "reader_start"),
                ("huff_block", "huff_coef", "huff_byte")),
    "idct": (("idct_islow", "idct_1d", "idct_sample"), ("idct_block", "idct_coef")),
    "upsampling": (("upsample_segment", "h2_filter"), ("upsample_pixel",)),
    "colour": (("make_row",), ("colour_pixel",)),
}
REST = ("mcu", "dma_call", "image")   # every other function (intervals, strips, DMA helpers, set-up)

# DPU instructions per RV32 `mul` in the IDCT (idct_islow's coefficient x constant products,
# 16-bit by 13-15-bit values in 32 bits). The DPU has 8x8 multiplies only (upmem-reference.md):
# best 7 = a 16x16 product from four 8x8 products and three shift-adds (exact here, not yet
# written); nominal 16 = a mul_step chain over the constant's 15 bits plus its set-up; worst
# 32 = the full chain of a 32-bit product (PrIM's ~10 MOPS of 32-bit multiply against ~58 MOPS
# of add per DPU is ~30 extra cycles per product).
IDCT_MUL = {"best": 7.0, "nominal": 16.0, "worst": 32.0}

COUNTED = ("counted: jpeg_decode.c on the RV32 proxy (python -m benchmarks.decode_projection, "
           "2026-12-01: 16 launches, 8 of the dataset's photos whole and as a centred half box)")
IRAM_BYTES_PER_INSTRUCTION = 6   # 4,096 48-bit instructions in a 24 KB IRAM (UPMEM docs)


@dataclass(frozen=True)
class DecodeAssumptions:
    """Instructions per unit of decode work (COUNTED, best / nominal / worst ISA brackets) and
    the programs' sizes for `dpu_load`. Change one with dataclasses.replace."""
    huff_block: Param = Param(225.6, 240.8, 271.5, "instr/block", COUNTED, "DC symbol, EOB, clearing the block")
    huff_coef: Param = Param(52.4, 56, 65.5, "instr/AC coefficient", COUNTED,
                             "one Huffman symbol (lookup or slow path), its extra bits, the store")
    huff_byte: Param = Param(46.8, 49.5, 49.6, "instr/entropy byte", COUNTED,
                             "fetching and unstuffing the entropy-coded bytes (fill, next_byte)")
    idct_block: Param = Param(2162, 3132, 5068, "instr/block", COUNTED,
                              "jpeg_idct_islow with its shortcuts for all-zero columns and rows; "
                              "its 32-bit products at IDCT_MUL DPU instructions each")
    idct_coef: Param = Param(73, 118.6, 210.8, "instr/AC coefficient", COUNTED,
                             "the extra IDCT work of non-zero columns and rows")
    upsample_pixel: Param = Param(38.8, 41.4, 49.2, "instr/pixel", COUNTED,
                                  "4:2:0 fancy upsampling of Cb and Cr (h2v2 on column sums)")
    colour_pixel: Param = Param(38.4, 41.9, 47.6, "instr/pixel", COUNTED,
                                "make_row: YCbCr->RGB by jdcolor.c's tables, the row's assembly")
    mcu: Param = Param(191, 194, 286, "instr/MCU", COUNTED, "decode_interval's loops, strips, flushes")
    dma_call: Param = Param(30.7, 33.8, 54.3, "instr/call", COUNTED,
                            "read_big, write_big, read_plane_row, the ldma/sdma (fitted with mcu and image: "
                            "R^2 0.999)")
    image: Param = Param(14768, 15195, 19469, "instr/image", COUNTED,
                         "per image (counted per launch: the colour tables too): descriptor, tables, plans, "
                         "barriers; tasklet 0 alone")
    decoder_program_bytes: Param = Param(
        2509 * IRAM_BYTES_PER_INSTRUCTION + 8192, 2509 * IRAM_BYTES_PER_INSTRUCTION + 8192, 24576 + 65536,
        "B/DPU", ASSUMED,
        "what dpu_load writes per DPU: the decoder's 2,509 proxy instructions x 6 B of IRAM + 8 KB of "
        "WRAM globals; worst: the whole 24 KB IRAM and 64 KB WRAM")
    transform_program_bytes: Param = Param(
        2070 * IRAM_BYTES_PER_INSTRUCTION + 4096, 2070 * IRAM_BYTES_PER_INSTRUCTION + 4096, 24576 + 65536,
        "B/DPU", ASSUMED, "crop_resize's 2,070 proxy instructions x 6 B + 4 KB of WRAM data; worst: all of both")
    load_bandwidth_share: Param = Param(
        1.0, 1.0, 0.1, "fraction", ASSUMED,
        "dpu_load's rate as a share of the parallel host->DPU rate (PrIM's 6.7 GB/s per rank): 1 = the "
        "program goes to every DPU of a rank at once; worst 0.1 = ELF parsing and per-DPU writes")

    def table(self) -> list[dict]:
        return [{"name": f.name, **{k: getattr(getattr(self, f.name), k) for k in
                                    ("best", "nominal", "worst", "unit", "source", "why")}}
                for f in fields(self)]

    def costs(self, case: str) -> np.ndarray:
        return np.array([getattr(self, name).at(case) for name in DECODE_WORK])


@dataclass
class DecodeImage:
    """One image's decode on a DPU: its work (DECODE_WORK), the emulator's DMA counts for it
    alone, its chunk's bytes, and how its two steps split over tasklets."""
    work: np.ndarray          # [len(DECODE_WORK)]
    read_calls: int
    read_bytes: int
    write_calls: int
    write_bytes: int
    chunk_bytes: int          # header + descriptor + intervals + tables + compressed bytes
    interval_items: int       # step 2: the runs of intervals the tasklets take
    row_items: int            # step 3: output rows


def work_of(last_work: dict, channels: int, dma_calls: int) -> np.ndarray:
    """DECODE_WORK of one image from the kernel's counts (DpuJpegDecoder.last_work) and the
    DMA calls the emulator counted for it."""
    blocks, coefs = last_work["blocks"], last_work["ac_coefficients"]
    colour = last_work["pixels"] if channels == 3 else 0
    values = {"huff_block": blocks, "huff_coef": coefs, "huff_byte": last_work["entropy_bytes"],
              "idct_block": blocks, "idct_coef": coefs, "upsample_pixel": colour,
              "colour_pixel": last_work["pixels"], "mcu": last_work["mcus"], "dma_call": dma_calls, "image": 1}
    return np.array([values[name] for name in DECODE_WORK], dtype=np.float64)


def interval_items(n_intervals: int, restart_mcus: int, strip_mcus: int, nr_tasklets: int) -> int:
    """Step 2's items: jpeg_decode.c's decode_image gives a tasklet runs of consecutive
    intervals that fill its strip, if every tasklet still gets one."""
    run = strip_mcus // restart_mcus if restart_mcus else 1
    run = 1 if run < 1 else min(run, max(1, n_intervals // nr_tasklets))
    return math.ceil(n_intervals / run)


def _step_cycles(instructions: float, items: int, nr_tasklets: int, depth: float) -> float:
    """Cycles of one step whose `items` equal items are shared by the tasklets: one instruction
    per cycle at best, and the busiest tasklet (ceil(items / T) items) issues once per `depth`."""
    if items <= 0 or instructions <= 0:
        return 0.0
    busiest = math.ceil(items / nr_tasklets) * instructions / items
    return max(instructions, depth * busiest)


def image_cycles(image: DecodeImage, costs: np.ndarray, nr_tasklets: int, depth: float) -> tuple[float, float]:
    """(cycles, instructions) of one image's decode: its two steps, a barrier between them."""
    per_unit = image.work * costs
    step2 = float(sum(per_unit[DECODE_WORK.index(u)] for u in STEP2))
    serial = float(sum(per_unit[DECODE_WORK.index(u)] for u in SERIAL))
    step3 = float(per_unit.sum()) - step2 - serial
    return (depth * serial + _step_cycles(step2, image.interval_items, nr_tasklets, depth)
            + _step_cycles(step3, image.row_items, nr_tasklets, depth)), step2 + step3 + serial


def decode_dpu_time(images: Sequence[DecodeImage], a: Assumptions, d: DecodeAssumptions, case: str,
                    nr_tasklets: int) -> dict:
    """One DPU decoding `images` one after the other: compute and DMA cycles and the time of
    the stage on it (overlapped as in the crop/resize model)."""
    costs, depth = d.costs(case), a.pipeline_depth.at(case)
    cycles = instr = 0.0
    for image in images:
        c, i = image_cycles(image, costs, nr_tasklets, depth)
        cycles, instr = cycles + c, instr + i
    dma = float(dma_cycles(sum(im.read_calls for im in images), sum(im.read_bytes for im in images),
                           sum(im.write_calls for im in images), sum(im.write_bytes for im in images), a, case))
    total = max(cycles, dma) if a.overlap_dma_compute.at(case) else cycles + dma
    return {"compute_cycles": cycles, "dma_cycles": dma, "cycles": total, "instructions": instr}


@dataclass
class ChainProjection:
    """PROJECTED time of one launch of decode then crop/resize on `system` (seconds)."""
    system: str
    case: str
    images_per_launch: float
    t_load: float            # the two dpu_loads
    t_in_decode: float       # the compressed intervals
    t_decode: float          # the slowest DPU's decode
    t_in_transform: float    # crop_resize's descriptors and tables (no pixels)
    t_transform: float       # the slowest DPU's crop/resize (from the crop/resize projection)
    t_out: float             # outputs + the decoder's statuses
    t_launch: float
    images_per_s: float
    bound: str
    decode_instructions_per_image: float

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _runs(images_per_dpu: Sequence[int]) -> list[range]:
    edges = np.concatenate([[0], np.cumsum(images_per_dpu)]).astype(int)
    return [range(edges[i], edges[i + 1]) for i in range(len(images_per_dpu))]


def project_chain(crop: DpuRun, images: Sequence[DecodeImage], transform_meta_bytes: Sequence[int],
                  system: System, a: Assumptions = Assumptions(), d: DecodeAssumptions = DecodeAssumptions(),
                  case: str = "nominal", status_bytes: int = 32, balanced: bool = False) -> ChainProjection:
    """Decode then crop/resize on the same DPUs (weak scaling as `project`). `images[i]` and
    `transform_meta_bytes[i]` (its crop/resize descriptor and axis tables) belong to sample i
    of the crop/resize run `crop`, which DPU d's run of samples follows. balanced=True: the
    what-if of a decode spread evenly over the DPUs (the mean DPU's decode time instead of
    the slowest's; a bound for a split that weighs both stages' work)."""
    if len(images) != crop.n_images or len(transform_meta_bytes) != crop.n_images:
        raise ValueError(f"{len(images)} decoded images and {len(transform_meta_bytes)} descriptors "
                         f"for a crop/resize run of {crop.n_images}")
    runs = _runs(crop.images_per_dpu)
    stages = [decode_dpu_time([images[i] for i in run], a, d, case, crop.nr_tasklets) for run in runs]
    cycles = [s["cycles"] for s in stages]
    t_decode = (sum(cycles) / len(cycles) if balanced else max(cycles)) / system.clock_hz
    ranks_eff = 1.0 + a.rank_scaling.at(case) * (system.ranks - 1)
    bw_in = a.host_to_dpu_rank_bw.at(case) * ranks_eff
    bw_out = a.dpu_to_host_rank_bw.at(case) * ranks_eff
    push = max(sum(images[i].chunk_bytes for i in run) for run in runs)          # common length
    meta = max(sum(transform_meta_bytes[i] for i in run) for run in runs) + 64   # + its header
    statuses = (max(len(run) for run in runs) + 1) * status_bytes
    N = system.nr_dpus
    load_bw = bw_in * d.load_bandwidth_share.at(case)
    t_load = N * (d.decoder_program_bytes.at(case) + d.transform_program_bytes.at(case)) / load_bw
    t_in_decode, t_in_transform = N * push / bw_in, N * meta / bw_in
    transform = project(crop, system, a, case)
    t_transform = transform.t_dpu
    t_out = transform.t_out + N * statuses / bw_out
    transfers = t_load + t_in_decode + t_in_transform + t_out
    if a.overlap_transfers.at(case) and system.ranks >= 2:
        t_launch = max(transfers, t_decode + t_transform)
    else:
        t_launch = transfers + t_decode + t_transform
    per_image = crop.n_images / crop.active_dpus
    launch_images = per_image * N
    parts = {"program loads": t_load, "host->DPU transfer": t_in_decode + t_in_transform,
             "DPU decode": t_decode, "DPU crop/resize": t_transform, "DPU->host transfer": t_out}
    return ChainProjection(system.name, case, launch_images, t_load, t_in_decode, t_decode, t_in_transform,
                           t_transform, t_out, t_launch, launch_images / t_launch, max(parts, key=parts.get),
                           sum(s["instructions"] for s in stages) / crop.n_images)


def end_to_end(dpu_images_per_s: float, host_s_per_image: float, host_cores: int) -> dict:
    """min(host rate, DPU rate); the host's share per image measured on one core, scaled
    linearly to `host_cores` (assumed)."""
    host = host_cores / host_s_per_image if host_s_per_image > 0 else math.inf
    return {"host_images_per_s": host, "dpu_images_per_s": dpu_images_per_s,
            "images_per_s": min(host, dpu_images_per_s),
            "bound": "host CPU" if host < dpu_images_per_s else "DPUs"}


__all__ = ["ChainProjection", "DECODE_WORK", "DecodeAssumptions", "DecodeImage", "IDCT_MUL", "PARTS", "REST",
           "decode_dpu_time", "end_to_end", "image_cycles", "interval_items", "project_chain", "work_of"]
