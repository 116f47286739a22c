"""PROJECTED: JPEG decode on DPUs, then crop/resize on the same DPUs, against decode on the
host (today), from emulator counts and the cost model (docs/cost_model.md, "Decode on DPUs
(projected)"). No DPU hardware is reachable: nothing here measures a DPU.

On the benchmark dataset's seekable copy (benchmarks.make_dataset, then make_seekable), for
the training (float32, float16) and validation pipelines of benchmarks.dpu_projection:

- today: the host decodes each crop box (MEASURED here, CPU time on one core) and the DPUs
  crop/resize (`benchmarks.dpu_projection.measure`: the emulator's counts, the cost model);
- the chain: each box's restart intervals are decoded on an emulated DPU, alone (one image
  per launch, so that the emulator's DMA counts and the kernel's own work counts,
  `DpuJpegDecoder.last_work`, are that image's); `pimloader.costmodel.decode.project_chain`
  prices them with the counted instructions per unit and chains them with the crop/resize
  run of the same samples (two dpu_loads per launch, no pixels pushed);
- the host CPU the chain leaves per image (MEASURED here, one core): reading the file,
  parsing its header and finding its restart intervals (`parse_baseline`, C), choosing
  and packing the box's intervals, copying the outputs into the batch; files the DPUs refuse
  are decoded on the host (counted over the whole folder by reason).

With riscv64-unknown-elf-gcc installed (unless `--no-count`), it also counts the
decoder's instructions on the RV32 proxy for a few of the dataset's images and fits the
instructions per unit of decode work (pimloader.costmodel.decode_counted), beside the
figures the model uses.

    python -m benchmarks.decode_projection [--quick] [--dpus 64] [--images-per-dpu 4] [--no-count]
"""
from __future__ import annotations

import argparse
import math
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from benchmarks.dpu_projection import PIPELINES, QUICK, host_copy_bandwidth, image_files, measure
from benchmarks.harness import run_benchmark, settle
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.progress import bar
from pimloader import costmodel as cm
from pimloader.backends.dpu import jpeg as DJ
from pimloader.backends.dpu.driver import DEFAULT_STACK_BYTES, DpuDriver
from pimloader.costmodel import decode as dm
from pimloader.decode.baseline import parse_baseline

LABEL = "PROJECTED"
DECODE_FIXED_BYTES = 256 + 128 + 256   # jpeg_decode.c: window, block, IDCT workspace


def seekable_folder(root: Path) -> Path:
    from benchmarks.imagenet_pipeline import seekable_copy
    return seekable_copy(root)


def fallbacks(root: Path) -> dict:
    """Every file of the folder by what the DPU decoder says: 'dpu colour', 'dpu grey', or
    the reason it falls back to the host (a key of decode.baseline.REASONS)."""
    counts = Counter()
    for path in sorted(p for p in root.glob("*/*") if p.is_file()):   # the class folders' files
        data = path.read_bytes()
        reason = DJ.fallback_reason(data, path)
        counts[reason or ("dpu grey" if len(parse_baseline(data).components) == 1 else "dpu colour")] += 1
    return dict(counts)


def decodable_files(root: Path, count: int) -> list[Path]:
    """`count` JPEGs of the folder that the DPUs decode (the others fall back to the host and
    are counted by `fallbacks`), cycling through them when there are fewer."""
    files = [p for p in image_files(root, count) if DJ.fallback_reason(p.read_bytes(), p) is None]
    if not files:
        raise SystemExit(f"no file under {root} decodes on DPUs (make it seekable: make_seekable)")
    return [files[i % len(files)] for i in range(count)]


def strip_mcus(layout, nr_tasklets: int) -> int:
    """jpeg_decode.c's plan_decode: the MCUs a tasklet's strip holds."""
    mcu_bytes = 64 * sum(c.h * c.v for c in layout.components)
    arena = DJ.arena_bytes(nr_tasklets, DEFAULT_STACK_BYTES)
    return min((arena - DECODE_FIXED_BYTES) // mcu_bytes, 64)


def decode_image(decoder: DJ.DpuJpegDecoder, data: bytes, name: str, box) -> dm.DecodeImage:
    """One box decoded alone on one emulated DPU: the kernel's work, the emulator's DMA counts."""
    decoder.dpus.reset_counters()
    decoder.decode([data], [name], [box])
    c = decoder.dpus.counters()
    image = DJ._Image(data, name, decoder.max_mcus_without_restarts, box)
    chunk = DJ._Chunk([image], decoder.nr_tasklets, decoder.stack_bytes)
    layout = image.layout
    items = dm.interval_items(len(image.chosen), layout.restart_mcus or layout.total_mcus,
                              strip_mcus(layout, decoder.nr_tasklets), decoder.nr_tasklets)
    work = dm.work_of(decoder.last_work[0], image.channels, c.mram_read_calls + c.mram_write_calls)
    return dm.DecodeImage(work, c.mram_read_calls, c.mram_read_bytes, c.mram_write_calls, c.mram_write_bytes,
                          chunk.in_bytes, items, image.box[2])


def host_side(paths: list[Path], boxes) -> dict:
    """MEASURED CPU seconds per image (this thread, one core) of what the host still does per
    image when the DPUs decode: read the file, parse its header and find its restart
    intervals (parse_baseline), choose the box's intervals and pack the chunk."""
    read = parse = select = pack = 0.0
    for path, box in zip(paths, boxes):
        t0 = time.thread_time()
        data = path.read_bytes()
        t1 = time.thread_time()
        parse_baseline(data, path)
        t2 = time.thread_time()
        image = DJ._Image(data, path, DJ.DEFAULT_MAX_MCUS_WITHOUT_RESTARTS, box)   # parses again
        t3 = time.thread_time()
        chunk = DJ._Chunk([image], 16, DEFAULT_STACK_BYTES)
        chunk.pack(DJ._round8(chunk.in_bytes), DJ._round8(chunk.out_bytes), 1, 0)
        t4 = time.thread_time()
        read, parse, select, pack = read + t1 - t0, parse + t2 - t1, select + (t3 - t2) - (t2 - t1), pack + t4 - t3
    n = len(paths)
    return {"read_s": read / n, "parse_s": parse / n, "select_s": max(select / n, 0.0), "pack_s": pack / n}


def transform_meta_bytes(packed) -> list[int]:
    """Per sample, what crop_resize's chunk carries besides pixels: its descriptor and its
    share of the axis tables (the mean: tables are about the same size per sample here)."""
    n = len(packed.samples)
    return [packed.samples.dtype.itemsize + packed.tables.nbytes // n] * n


def chain_entry(pipeline: str, dtype: str, paths: list[Path], driver, decoder, args, copy_bw: float,
                fallback_share: float) -> dict:
    entry = measure(pipeline, dtype, paths, driver, args.decode_repeats)
    run, packed, boxes = entry["run"], entry["packed"], entry["boxes"]
    images = [decode_image(decoder, p.read_bytes(), str(p), box) for p, box in zip(paths, boxes)]
    meta = transform_meta_bytes(packed)
    host = host_side(paths, boxes)
    out_copy = run.out_real_bytes / run.n_images / copy_bw
    today_host = host["read_s"] + entry["decode_cpu_s_per_image"] + (run.in_real_bytes + run.out_real_bytes) / run.n_images / copy_bw
    in_copy = float(np.mean([im.chunk_bytes for im in images])) / copy_bw
    chain_host = (host["read_s"] + host["parse_s"] + host["select_s"] + host["pack_s"] + in_copy + out_copy
                  + fallback_share * entry["decode_cpu_s_per_image"])
    cached = chain_host - host["parse_s"]   # with each file's layout parsed once and kept
    floor = host["read_s"] + in_copy + out_copy + fallback_share * entry["decode_cpu_s_per_image"]
    rows = []
    for system in cm.SYSTEMS:
        for case in cm.CASES:
            today = cm.project(run, system, case=case)
            chain = dm.project_chain(run, images, meta, system, case=case)
            rows.append({"system": system.name, "case": case, "today": {
                "dpu_images_per_s": today.images_per_s, "bound": today.bound,
                "end_to_end": dm.end_to_end(today.images_per_s, today_host, args.host_cores)},
                "chain": {**chain.as_dict(), "end_to_end": dm.end_to_end(chain.images_per_s, chain_host, args.host_cores),
                          "end_to_end_cached_layout": dm.end_to_end(chain.images_per_s, cached, args.host_cores),
                          "end_to_end_floor": dm.end_to_end(chain.images_per_s, floor, args.host_cores)}})
    what_if = {system.name: dm.project_chain(run, images, meta, system, balanced=True).images_per_s
               for system in cm.SYSTEMS}   # nominal: the decode spread evenly over the DPUs
    work = np.sum([im.work for im in images], axis=0) / len(images)
    return {"pipeline": pipeline, "dtype": dtype, "images": len(images),
            "decode_work_per_image": dict(zip(dm.DECODE_WORK, work.tolist())),
            "decode_mram_per_image": {k: float(np.mean([getattr(im, k) for im in images])) for k in
                                      ("read_calls", "read_bytes", "write_calls", "write_bytes", "chunk_bytes")},
            "crop_host_to_dpu_bytes_per_image": run.per_image()["host_to_dpu_bytes"],
            "transform_meta_bytes_per_image": float(np.mean(meta)),
            "host_today_s_per_image": today_host, "host_decode_cpu_s_per_image": entry["decode_cpu_s_per_image"],
            "host_chain_s_per_image": chain_host, "host_chain_cached_layout_s_per_image": cached,
            "host_chain_floor_s_per_image": floor,
            "host_chain_parts_s": {**host, "compressed_copy_s": in_copy, "output_copy_s": out_copy},
            "projections": rows, "what_if_balanced_decode": what_if}


def _bound(e2e: dict, projection: dict) -> str:
    return e2e["bound"] if e2e["bound"] == "host CPU" else projection["bound"]


def verdict(entry: dict) -> dict:
    """Nominal case: per system, the chain's end-to-end rate over today's (as built, and with
    the host side at its floor) and what bounds each; and the DPUs per host core from which
    the chain pays: today's host rate per core over the chain's PROJECTED rate per DPU
    (the 2,560-DPU system at 350 MHz), where the chain's host side costs less than today's."""
    systems, per_dpu = {}, None
    for row in entry["projections"]:
        if row["case"] != "nominal":
            continue
        today, chain, floor = (row["today"]["end_to_end"], row["chain"]["end_to_end"],
                               row["chain"]["end_to_end_floor"])
        systems[row["system"]] = {
            "gain": chain["images_per_s"] / today["images_per_s"],
            "gain_at_floor": floor["images_per_s"] / today["images_per_s"],
            "today_bound": _bound(today, row["today"]), "chain_bound": _bound(chain, row["chain"]),
            "floor_bound": _bound(floor, row["chain"])}
        per_dpu = row["chain"]["images_per_s"] / cm.SYSTEMS[-1].nr_dpus
    today_per_core = 1.0 / entry["host_today_s_per_image"]

    def break_even(host_s: float):
        return None if host_s >= entry["host_today_s_per_image"] else math.ceil(today_per_core / per_dpu)
    return {"systems": systems, "chain_images_per_s_per_dpu": per_dpu,
            "today_images_per_s_per_core": today_per_core,
            "dpus_per_core_to_pay": {"as built": break_even(entry["host_chain_s_per_image"]),
                                     "layouts kept": break_even(entry["host_chain_cached_layout_s_per_image"]),
                                     "floor": break_even(entry["host_chain_floor_s_per_image"])}}


def run(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    seekable = seekable_folder(root)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    started, load_before = time.perf_counter(), os.getloadavg()
    counts = {"plain": fallbacks(root), "seekable": fallbacks(seekable)}
    total = sum(counts["seekable"].values())
    share = sum(v for k, v in counts["seekable"].items() if not k.startswith("dpu")) / total
    paths = decodable_files(seekable, args.dpus * args.images_per_dpu)
    copy_bw = host_copy_bandwidth()
    entries = []
    with DpuDriver(args.dpus, args.tasklets) as driver, DJ.DpuJpegDecoder(1, args.tasklets) as decoder:
        for pipeline, dtype in bar(PIPELINES, desc="decode projection", unit="pipeline"):
            entries.append(chain_entry(pipeline, dtype, paths, driver, decoder, args, copy_bw, share))
            entries[-1]["verdict"] = verdict(entries[-1])
            print(f"  measured {pipeline} {dtype} ({time.perf_counter() - started:.0f} s)", flush=True)
    counted = None
    if args.count_instructions:
        from benchmarks.decode_counts import count_decoder
        counted = count_decoder(paths[:args.count_images], args.tasklets)
    return {"benchmark": "decode_projection", "label": LABEL, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                         if k not in ("out", "quick")},
            "note": ("every DPU time and rate is PROJECTED by pimloader.costmodel (no DPU hardware); decode "
                     "work and DMA counts come from the emulator; host CPU times are measured on this machine"),
            "load": [load_before[0], os.getloadavg()[0]], "wall_s": time.perf_counter() - started,
            "host_memcpy_bytes_per_s": copy_bw, "fallbacks": counts, "fallback_share": share,
            "decode_assumptions": dm.DecodeAssumptions().table(), "idct_mul": dm.IDCT_MUL,
            "pipelines": entries, "counted": counted}


def format_table(results: dict) -> str:
    cores = results["settings"]["host_cores"]
    head = (f"{'pipeline':<13} {'system':<10} {'case':<7} {'today DPU':>9} {'today e2e':>9} {'bound':<16} "
            f"{'chain DPU':>9} {'dec ms':>7} {'xfer ms':>7} {'load ms':>7} {'chain e2e':>9} {'bound':<16} "
            f"{'e2e cached':>10} {'e2e floor':>9}")
    lines = [f"ALL RATES ARE {LABEL} img/s (cost model, no DPU hardware); e2e = min(host CPU on {cores} cores, "
             "measured per image on one core and scaled linearly, DPUs)", head, "-" * len(head)]
    for e in results["pipelines"]:
        for r in e["projections"]:
            t, c = r["today"], r["chain"]
            tb = t["end_to_end"]["bound"] if t["end_to_end"]["bound"] == "host CPU" else t["bound"]
            cb = c["end_to_end"]["bound"] if c["end_to_end"]["bound"] == "host CPU" else c["bound"]
            xfer = c["t_in_decode"] + c["t_in_transform"] + c["t_out"]
            lines.append(f"{e['pipeline'] + ' ' + e['dtype']:<13} {r['system']:<10} {r['case']:<7} "
                         f"{t['dpu_images_per_s']:>9.0f} {t['end_to_end']['images_per_s']:>9.0f} {tb:<16} "
                         f"{c['images_per_s']:>9.0f} {c['t_decode'] * 1e3:>7.1f} {xfer * 1e3:>7.1f} "
                         f"{c['t_load'] * 1e3:>7.2f} {c['end_to_end']['images_per_s']:>9.0f} {cb:<16} "
                         f"{c['end_to_end_cached_layout']['images_per_s']:>10.0f} "
                         f"{c['end_to_end_floor']['images_per_s']:>9.0f}")
    return "\n".join(lines)


def report(results: dict) -> None:
    print(f"Decode on DPUs, {LABEL}; load {results['load'][0]:.1f} -> {results['load'][1]:.1f}, "
          f"{results['wall_s']:.0f} s")
    print("files of the folder, by where they decode:", results["fallbacks"])
    for e in results["pipelines"]:
        h = e["host_chain_parts_s"]
        print(f"{e['pipeline']} {e['dtype']}: decode instructions/image (nominal) "
              f"{e['projections'][1]['chain']['decode_instructions_per_image'] / 1e6:.1f} M; host CPU per image, "
              f"measured: today {e['host_today_s_per_image'] * 1e3:.3f} ms (decode "
              f"{e['host_decode_cpu_s_per_image'] * 1e3:.3f}), chain {e['host_chain_s_per_image'] * 1e3:.3f} ms "
              f"(read {h['read_s'] * 1e3:.3f}, parse {h['parse_s'] * 1e3:.3f}, select {h['select_s'] * 1e3:.3f}, "
              f"pack {h['pack_s'] * 1e3:.3f}, copies {(h['compressed_copy_s'] + h['output_copy_s']) * 1e3:.3f}), "
              f"with layouts kept {e['host_chain_cached_layout_s_per_image'] * 1e3:.3f} ms, floor "
              f"{e['host_chain_floor_s_per_image'] * 1e3:.3f} ms")
    print(format_table(results))
    print(f"what-if, {LABEL} chain DPU img/s (nominal) with the decode spread evenly over the DPUs (the split "
          "is crop_resize's today): " + "; ".join(
              f"{e['pipeline']} {e['dtype']}: " + ", ".join(f"{s} {v:.0f}" for s, v in e["what_if_balanced_decode"].items())
              for e in results["pipelines"]))
    for e in results["pipelines"]:
        v = e["verdict"]
        pays = {k: "never (its host side costs more than today's)" if n is None else f"from {n} DPUs per host core"
                for k, n in v["dpus_per_core_to_pay"].items()}
        print(f"verdict {e['pipeline']} {e['dtype']} (nominal): chain / today end to end " + "; ".join(
            f"{s}: x{x['gain']:.2f} ({x['chain_bound']}), x{x['gain_at_floor']:.2f} at the host floor "
            f"({x['floor_bound']}; today {x['today_bound']})" for s, x in v["systems"].items())
              + "; pays " + ", ".join(f"{k}: {n}" for k, n in pays.items()))
    print("e2e cached: each file's layout parsed once and kept; e2e floor: the host only reads the file, copies "
          "the compressed bytes in and the outputs out (parse and packing in C taken as free: ASSUMED)")
    if results["counted"]:
        from benchmarks.decode_counts import report_counts
        report_counts(results["counted"])


def parse_args(argv=None) -> argparse.Namespace:
    from pimloader.costmodel import proxy
    p = argparse.ArgumentParser(prog="python -m benchmarks.decode_projection", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=500, help="files in the ImageNet-like folder")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--data", type=Path, help="dataset folder (default: results/data/imagenet_like[_quick])")
    p.add_argument("--dpus", type=int, default=64)
    p.add_argument("--tasklets", type=int, default=16)
    p.add_argument("--images-per-dpu", type=int, default=4)
    p.add_argument("--decode-repeats", type=int, default=3)
    p.add_argument("--host-cores", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count-images", type=int, default=8, help="images whose decode is counted on the proxy")
    p.add_argument("--no-count", dest="count_instructions", action="store_false",
                   help="skip counting the decoder's instructions on the RV32 proxy")
    p.add_argument("--out", type=Path)
    p.add_argument("--quick", action="store_true")
    args = settle(p.parse_args(argv), "decode_projection", {**QUICK, "count_images": 2}, data="imagenet_like")
    args.count_instructions = args.count_instructions and proxy.find_cross_compiler() is not None
    return args


def main(argv=None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
