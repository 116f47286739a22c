"""PROJECTED DPU throughput of the fused step, from emulator counts and a cost model.

No DPU hardware is reachable: nothing here measures a DPU. For each pipeline

- training: RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(float32, scale=True),
  Normalize(ImageNet mean and std); the same with ToDtype(float16, scale=True);
- validation: Resize(256), CenterCrop(224), ToDtype(float32, scale=True), Normalize,

it draws each image's parameters with pimloader's lowering of that torchvision pipeline (the
draws PIMDataLoader makes), decodes each crop box on the host with pimloader's libjpeg-turbo
decoder (MEASURED here, per image on one core: decoding stays on the host), runs the batch
through `DpuDriver` on pimloader's libdpu emulator (`--dpus` DPUs x `--tasklets` tasklets,
`--images-per-dpu` images each), and reads what the emulator COUNTED: MRAM<->WRAM DMA calls
and bytes per DPU, host<->DPU bytes and the padded transfer lengths. `pimloader.costmodel`
turns those counts, the work counted from the batch's axis tables, and the published figures
of UPMEM systems into PROJECTED per-stage times and images/s for a 64-DPU rank, a 640-DPU and
a 2,560-DPU system, in a best / nominal / worst case (docs/cost_model.md). The end-to-end
projection is min(host decode rate, DPU path rate), the host rate MEASURED here, for the
plain JPEGs and for seekable copies of them (`decode.add_restart_markers`: the same pixels,
a crop decoded from the restart intervals around it; column "e2e seek").

    python -m benchmarks.dpu_projection [--dpus 64] [--images-per-dpu 4] [--quick]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness import run_benchmark, settle
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.pipelines import DTYPES, MEAN, STD, make_transform
from benchmarks.progress import bar
from pimloader import costmodel as cm
from pimloader import decode
from pimloader.backends import kernels as K
from pimloader.backends.dpu.driver import DpuDriver
from pimloader.transforms import lower

PIPELINES = (("train", "float32"), ("train", "float16"), ("val", "float32"))
QUICK = {"count": 40, "classes": 4, "dpus": 16, "images_per_dpu": 2, "decode_repeats": 1}
LABEL = "projected"


def image_files(root: Path, count: int) -> list[Path]:
    """`count` JPEG files of the folder, cycling through it when it has fewer."""
    files = sorted(p for p in root.glob("*/*.JPEG") if decode.is_jpeg(p.read_bytes()))
    if not files:
        raise SystemExit(f"no JPEG files under {root}")
    return [files[i % len(files)] for i in range(count)]


def decode_batch(files: list[Path], plan, repeats: int):
    """Each file's drawn geometry and decoded crop box, and the MEASURED decode time per image
    (wall and CPU, see decode_time) of the files and of seekable copies of them."""
    datas = [f.read_bytes() for f in files]
    geometries = []
    for data in datas:
        height, width = decode.image_size(data)
        geometries.append(plan.draw(height, width).geometry)
    sources = [decode.decode_image(d, g.box, channels=3) for d, g in zip(datas, geometries)]
    seekable = [decode.add_restart_markers(d) for d in datas]
    return (geometries, sources, decode_time(datas, geometries, repeats),
            decode_time(seekable, geometries, repeats))


def decode_time(datas: list[bytes], geometries, repeats: int) -> tuple[float, float]:
    """(wall, this thread's CPU) seconds per image to decode each crop box as the loader does
    (into a reused buffer), median over `repeats` passes after one warm-up."""
    buffer, walls, cpus = np.empty(0, np.uint8), [], []
    for rep in range(repeats + 1):
        wall, cpu = time.perf_counter(), time.thread_time()
        for data, geometry in zip(datas, geometries):
            buffer = decode.decode_jpeg_into(data, geometry.box, buffer)[1]
        if rep:  # the first pass warms the caches
            walls.append((time.perf_counter() - wall) / len(datas))
            cpus.append((time.thread_time() - cpu) / len(datas))
    return statistics.median(walls), statistics.median(cpus)


def host_copy_bandwidth() -> float:
    """MEASURED single-core memcpy bandwidth here (B/s): the driver copies each crop into its
    DPU chunk and each output row into its batch slot. Median of 5 copies of 64 MB."""
    a, b = np.ones(64 << 20, np.uint8), np.empty(64 << 20, np.uint8)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - start)
    return a.nbytes / statistics.median(times)


def measure(pipeline: str, dtype: str, files: list[Path], backend: DpuDriver, repeats: int) -> dict:
    plan = lower(make_transform(pipeline, dtype))
    geometries, sources, (decode_wall, decode_cpu), (_, seekable_cpu) = decode_batch(
        files, plan, repeats)
    n = len(sources)
    out = torch.empty(n, 3, 224, 224, dtype=DTYPES[dtype])
    lut = K.normalize_lut(3, DTYPES[dtype], MEAN, STD)
    boxes = [(0, 0, *s.shape[:2]) for s in sources]
    kwargs = dict(hflip=[g.hflip for g in geometries], vflip=[g.vflip for g in geometries],
                  interpolation=geometries[0].interpolation.value, layout="NCHW",
                  windows=[(*g.resized, *g.window[:2]) for g in geometries])
    backend.reset_counters()
    start = time.perf_counter()
    backend.run(sources, boxes, (224, 224), out, lut=lut, **kwargs)
    emulated_s = time.perf_counter() - start
    packed, _ = K.pack_batch(sources, boxes, (224, 224), out_dtype=DTYPES[dtype], **kwargs)
    counters = [backend.counters(d) for d in range(backend.nr_dpus)]
    info = backend.run_info()
    run = cm.DpuRun.from_backend(backend, packed, counters, info)
    return {"pipeline": pipeline, "dtype": dtype, "images": n, "dpus": backend.nr_dpus,
            "tasklets": backend.nr_tasklets, "run": run,
            "decode_s_per_image": decode_wall, "decode_cpu_s_per_image": decode_cpu,
            "seekable_decode_cpu_s_per_image": seekable_cpu,
            "emulator_wall_s": emulated_s, "packed": packed, "boxes": [g.box for g in geometries]}


def summarise(entry: dict, copy_bw: float, host_cores: int, assumptions: cm.Assumptions) -> dict:
    run: cm.DpuRun = entry.pop("run")
    entry.pop("packed", None), entry.pop("boxes", None)
    per_image = run.per_image()
    host_copy_s = (run.in_real_bytes + run.out_real_bytes) / run.n_images / copy_bw
    # the host's work per image on one core: decode (this thread's CPU time, the steadier figure
    # on a shared machine) + packing the crop into its chunk and the output into its slot
    host_s = entry["decode_cpu_s_per_image"] + host_copy_s
    projections = []
    for p in cm.project_all(run, cm.SYSTEMS, assumptions):
        e2e = cm.end_to_end(p.images_per_s, host_s, host_cores)
        seekable = cm.end_to_end(p.images_per_s, host_s - entry["decode_cpu_s_per_image"] +
                                 entry["seekable_decode_cpu_s_per_image"], host_cores)
        projections.append({**p.as_dict(), "end_to_end": e2e, "end_to_end_seekable": seekable})
    what_if = []  # nominal case: the bound of a perfect split, which the driver cannot reach
    for system in cm.SYSTEMS:
        rates = {label: cm.project(r, system, assumptions, "nominal").images_per_s for label, r in
                 (("as is", run), ("balanced", cm.balanced(run)))}
        what_if.append({"system": system.name, "case": "nominal", "images_per_s": rates})
    work = {name: float(v) / run.n_images for name, v in
            zip(cm.WORK, sum(w.total for w in run.work))}
    return {**entry, "per_image": per_image, "host_copy_s_per_image": host_copy_s,
            "host_s_per_image": host_s, "work_per_image": work,
            "transfer": {"xfer_bytes": run.xfer_bytes, "out_xfer_bytes": run.out_xfer_bytes,
                         "in_real_bytes": run.in_real_bytes, "out_real_bytes": run.out_real_bytes,
                         "active_dpus": run.active_dpus},
            "images_per_dpu": run.images_per_dpu, "projections": projections, "what_if": what_if}


def run(args: argparse.Namespace) -> dict:
    root = make_imagenet_like(args.data, count=args.count, classes=args.classes, seed=args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    started = time.perf_counter()
    load_before = os.getloadavg()
    files = image_files(root, args.dpus * args.images_per_dpu)
    copy_bw = host_copy_bandwidth()
    assumptions = cm.Assumptions()
    entries = []
    with DpuDriver(args.dpus, args.tasklets) as backend:
        for pipeline, dtype in bar(PIPELINES, desc="dpu projection", unit="pipeline"):
            entry = measure(pipeline, dtype, files, backend, args.decode_repeats)
            entries.append(summarise(entry, copy_bw, args.host_cores, assumptions))
            print(f"  measured {pipeline} {dtype} ({time.perf_counter() - started:.0f} s)", flush=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k not in ("out", "quick")}
    return {"benchmark": "dpu_projection", "settings": settings,
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "note": ("every time and rate under 'projections' is PROJECTED by pimloader.costmodel "
                     "(no DPU hardware); counts come from pimloader's libdpu emulator; decode and "
                     "memcpy times are measured on this machine"),
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "cpus": os.cpu_count(), "machine": platform.machine(),
                            "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                            "wall_s": time.perf_counter() - started,
                            "host_memcpy_bytes_per_s": copy_bw},
            "assumptions": assumptions.table(),
            "systems": [{"name": s.name, "nr_dpus": s.nr_dpus, "clock_hz": s.clock_hz,
                         "ranks": s.ranks, "source": s.source} for s in cm.SYSTEMS],
            "pipelines": entries}


def format_counts(entries: list[dict]) -> str:
    head = (f"{'pipeline':<8} {'dtype':<8} {'img':>4} {'MRAM rd kB':>10} {'MRAM wr kB':>10} "
            f"{'least kB':>9} {'DMA/least':>9} {'H->D kB':>8} {'D->H kB':>8} {'xfer/least':>10} "
            f"{'decode ms':>9} {'dec CPU':>7} {'seek CPU':>8} {'copy ms':>7}")
    lines = [head, "-" * len(head)]
    for e in entries:
        p = e["per_image"]
        lines.append(
            f"{e['pipeline']:<8} {e['dtype']:<8} {e['images']:>4} {p['mram_read_bytes'] / 1e3:>10.0f} "
            f"{p['mram_write_bytes'] / 1e3:>10.0f} {(p['least_in_bytes'] + p['least_out_bytes']) / 1e3:>9.0f} "
            f"{p['dma_ratio']:>9.2f} {p['host_to_dpu_bytes'] / 1e3:>8.0f} {p['dpu_to_host_bytes'] / 1e3:>8.0f} "
            f"{p['transfer_ratio']:>10.2f} {e['decode_s_per_image'] * 1e3:>9.3f} "
            f"{e['decode_cpu_s_per_image'] * 1e3:>7.3f} "
            f"{e['seekable_decode_cpu_s_per_image'] * 1e3:>8.3f} "
            f"{e['host_copy_s_per_image'] * 1e3:>7.3f}")
    return "\n".join(lines)


def format_projections(entries: list[dict], host_cores: int) -> str:
    head = (f"{'pipeline':<13} {'system':<10} {'case':<7} {'H->D ms':>8} {'compute ms':>10} {'DMA ms':>7} "
            f"{'D->H ms':>8} {'launch ms':>9} {'img/launch':>10} {'DPU img/s':>10} {'bound':<18} "
            f"{'e2e img/s':>9} {'e2e bound':<11} {'e2e seek':>8}")
    lines = [f"ALL FIGURES BELOW ARE {LABEL.upper()} (cost model, no DPU hardware); "
             f"e2e = min(host decode + copy on {host_cores} cores (CPU time "
             f"measured here, scaled linearly), DPU path)", head, "-" * len(head)]
    for e in entries:
        for p in e["projections"]:
            lines.append(
                f"{e['pipeline'] + ' ' + e['dtype']:<13} {p['system']:<10} {p['case']:<7} "
                f"{p['t_in'] * 1e3:>8.1f} {p['t_compute'] * 1e3:>10.1f} {p['t_dma'] * 1e3:>7.1f} "
                f"{p['t_out'] * 1e3:>8.1f} {p['t_launch'] * 1e3:>9.1f} {p['images_per_launch']:>10.0f} "
                f"{p['images_per_s']:>10.0f} {p['bound']:<18} {p['end_to_end']['images_per_s']:>9.0f} "
                f"{p['end_to_end']['bound']:<11} "
                f"{p['end_to_end_seekable']['images_per_s']:>8.0f}")
    return "\n".join(lines)


def format_what_if(entries: list[dict]) -> str:
    labels = ("as is", "balanced")
    head = f"{'pipeline':<13} {'system':<10} " + " ".join(f"{label:>10}" for label in labels)
    lines = [f"What-if, {LABEL} DPU img/s (nominal case): 'balanced' = work spread perfectly evenly "
             "over DPUs and tasklets (a bound: the driver splits whole samples into contiguous runs "
             "by an estimate of work)", head, "-" * len(head)]
    for e in entries:
        for w in e["what_if"]:
            lines.append(f"{e['pipeline'] + ' ' + e['dtype']:<13} {w['system']:<10} " +
                         " ".join(f"{w['images_per_s'][label]:>10.0f}" for label in labels))
    return "\n".join(lines)


def report(results: dict) -> None:
    s, env = results["settings"], results["environment"]
    print(f"DPU projection: {s['dpus']} emulated DPUs x {s['tasklets']} tasklets, "
          f"{s['images_per_dpu']} images per DPU, {env['cpus']} CPUs, load "
          f"{env['loadavg_before'][0]:.1f} -> {env['loadavg_after'][0]:.1f}, {env['wall_s']:.0f} s")
    print("Counted by the emulator, per image (decode and copy: measured here, one core):")
    print(format_counts(results["pipelines"]))
    print(format_projections(results["pipelines"], s["host_cores"]))
    print(format_what_if(results["pipelines"]))
    print("cases: best/nominal/worst take every assumption at its optimistic/likely/pessimistic "
          "value (docs/cost_model.md); decode stays on the host CPU")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpu_projection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500, help="files in the ImageNet-like folder")
    parser.add_argument("--classes", type=int, default=10, help="class folders")
    parser.add_argument("--data", type=Path, help="dataset folder (default: results/data/"
                        "imagenet_like, or imagenet_like_quick with --quick; made if missing)")
    parser.add_argument("--dpus", type=int, default=64,
                        help="emulated DPUs, one rank by default (default: %(default)s)")
    parser.add_argument("--tasklets", type=int, default=16, help="NR_TASKLETS (default: %(default)s)")
    parser.add_argument("--images-per-dpu", type=int, default=4,
                        help="images per DPU and launch (default: %(default)s)")
    parser.add_argument("--decode-repeats", type=int, default=3,
                        help="timed decode passes, median (default: %(default)s)")
    parser.add_argument("--host-cores", type=int, default=os.cpu_count(),
                        help="host cores decoding, for the end-to-end figure; scaled linearly "
                             "from the one-core measurement (default: this machine's, %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the dataset and the draws")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/latest/"
                        "dpu_projection.json, or dpu_projection.quick.json with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"smoke-test settings: {QUICK}")
    args = settle(parser.parse_args(argv), "dpu_projection", QUICK, data="imagenet_like")
    if min(args.dpus, args.images_per_dpu, args.decode_repeats, args.host_cores) < 1:
        parser.error("--dpus, --images-per-dpu, --decode-repeats and --host-cores must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
