"""The viability table: per preprocessing operation, does it pay to run it on DPUs?

Generated, deterministically, from the JSON of three benchmarks (nothing is measured here):
imagenet_pipeline (bytes of the files, CPU ms of each torchvision step and of pimloader's
decode, one thread), kernel_speed (CPU ms of pimloader's fused kernel) and dpu_projection
(bytes the emulator COUNTED, the kernel's work per image, the cost model's assumptions).
Per operation and image: bytes in and out, CPU ms measured, DPU cycles PROJECTED (the
cost model's instruction counts per unit of work x the work counted per image, best /
nominal / worst), host transfer ms and a verdict:

    host_s      = CPU time of the operation on the host (torchvision's step, or pimloader's
                  fused kernel for the fused row)
    transfer_s  = bytes_in / 6.7 GB/s + bytes_out / 4.7 GB/s: UPMEM transfers are copies the
                  host CPU makes (PrIM's per-rank rates; ASSUMED to cost one core)
    dpu_s       = DPU cycles (nominal) / 350 MHz
    verdict     = never, if transfer_s >= host_s (moving the bytes costs the host more than
                  the operation); else DPUs per host core freed = dpu_s / (host_s - transfer_s)

    python -m benchmarks.viability        # writes docs/viability.md and results/viability.json
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DOCS = Path(__file__).resolve().parent.parent / "docs"
CLOCK_HZ = 350e6
OUT_PIXELS = 224 * 224 * 3
RESIZE_UNITS = ("h_mac", "h_out", "v_mac", "v_init", "v_finish", "row", "column", "sample_load")
EMIT_UNITS = ("emit",)
CASES = ("best", "nominal", "worst")
LATER = [("detection", "zoom-out, box ops (crop, flip, resize of boxes)"),
         ("audio", "framing, FFT, mel, log, masks")]


def dpu_cycles(work: dict, assumptions: dict, units: tuple[str, ...]) -> dict:
    """Instructions (= cycles with >= 11 busy tasklets) per image of `units`, per case."""
    return {case: sum(work[u] * assumptions[u][case] for u in units) for case in CASES}


def verdict(host_s: float, cycles: dict | None, bytes_in: float, bytes_out: float,
            rates: dict) -> dict:
    transfer_s = bytes_in / rates["host_to_dpu_rank_bw"] + bytes_out / rates["dpu_to_host_rank_bw"]
    result = {"transfer_ms": transfer_s * 1e3}
    if cycles is None:
        return {**result, "dpus_per_core": None, "verdict": "not on DPUs"}
    dpu_s = cycles["nominal"] / CLOCK_HZ
    result["dpu_ms_per_image"] = dpu_s * 1e3
    if transfer_s >= host_s:
        return {**result, "dpus_per_core": None,
                "verdict": f"never: moving its bytes costs {transfer_s * 1e3:.3f} ms of host "
                           f"CPU, the operation {host_s * 1e3:.3f} ms"}
    dpus = math.ceil(dpu_s / (host_s - transfer_s))
    return {**result, "dpus_per_core": dpus,
            "verdict": f"pays from {dpus} DPUs ({math.ceil(dpus / 64)} ranks) per host core freed"}


def build(pipeline: dict, kernel: dict, projection: dict) -> dict:
    """Rows of the table from the three benchmarks' results."""
    steps = {b["contender"] + " " + b["pipeline"] + ("16" if b["dtype"] == "float16" else ""): b
             for b in pipeline["breakdown"]}
    tv, tv_colour = steps["torchvision train"], steps.get("torchvision colour")
    pim, pim_colour = steps["pimloader train"], steps.get("pimloader colour")
    entry, entry16 = (next(e for e in projection["pipelines"]
                           if (e["pipeline"], e["dtype"]) == ("train", dtype))
                      for dtype in ("float32", "float16"))
    assumptions = {a["name"]: a for a in projection["assumptions"]}
    rates = {name: assumptions[name]["nominal"] for name in ("host_to_dpu_rank_bw",
                                                             "dpu_to_host_rank_bw")}
    work, per_image = entry["work_per_image"], entry["per_image"]
    crop_bytes = entry["transfer"]["in_real_bytes"] / entry["images"]
    out_float = OUT_PIXELS * 4
    resize, emit = dpu_cycles(work, assumptions, RESIZE_UNITS), dpu_cycles(work, assumptions,
                                                                            EMIT_UNITS)
    fused = dpu_cycles(work, assumptions, RESIZE_UNITS + EMIT_UNITS)
    t = tv["transform_steps"]
    rows = [
        _row("decode (JPEG -> RGB crop box)", pipeline["dataset"]["mean_bytes"], crop_bytes,
             tv["decode"], pim["decode"], None, rates,
             "not on DPUs: decoding stays on the host (PIM-JPEG is prior work); on DPUs it "
             f"would send {pipeline['dataset']['mean_bytes'] / 1e3:.0f} kB of JPEG instead of "
             f"{crop_bytes / 1e3:.0f} kB of pixels"),
        _row("crop + resize (RandomResizedCrop 224)", crop_bytes, OUT_PIXELS,
             t["RandomResizedCrop"], None, resize, rates),
        _row("flip (RandomHorizontalFlip)", OUT_PIXELS, OUT_PIXELS, t["RandomHorizontalFlip"],
             None, {case: 0.0 for case in CASES}, rates,
             "free inside the fused step: the store index of emit"),
        _row("colour (ColorJitter b/c/s 0.4)", OUT_PIXELS, OUT_PIXELS,
             tv_colour["transform_steps"]["ColorJitter"] if tv_colour else None,
             (pim_colour["collate_or_write"] - pim["collate_or_write"]) if pim_colour else None,
             None, rates, "not on DPUs: float blends per pixel, and a DPU has no FPU; samples "
             "that need colour run on the CPU kernel"),
        _row("convert + normalise (ToDtype float32, Normalize)", OUT_PIXELS, out_float,
             t["ToDtype"] + t["Normalize"], None, emit, rates),
        _row("fused crop + resize + flip + convert + normalise", per_image["host_to_dpu_bytes"],
             per_image["dpu_to_host_bytes"], tv["transform"],
             kernel["cpu_ms_per_image"]["pimloader kernel float32"], fused, rates,
             host_is_pimloader=True),
        _row("the same, float16 output", entry16["per_image"]["host_to_dpu_bytes"],
             entry16["per_image"]["dpu_to_host_bytes"], steps["torchvision train16"]["transform"]
             if "torchvision train16" in steps else None,
             kernel["cpu_ms_per_image"]["pimloader kernel float16"],
             dpu_cycles(entry16["work_per_image"], assumptions, RESIZE_UNITS + EMIT_UNITS),
             rates, host_is_pimloader=True),
    ]
    return {"benchmark": "viability", "rows": rows,
            "sources": {"imagenet_pipeline": pipeline["date"], "kernel_speed": kernel.get("date"),
                        "dpu_projection": projection["date"]},
            "clock_hz": CLOCK_HZ, "rates": rates, "later": LATER}


def _row(op: str, bytes_in: float, bytes_out: float, torchvision_ms: float | None,
         pimloader_ms: float | None, cycles: dict | None, rates: dict, note: str = "",
         host_is_pimloader: bool = False) -> dict:
    host_ms = pimloader_ms if host_is_pimloader else torchvision_ms
    row = {"op": op, "bytes_in": bytes_in, "bytes_out": bytes_out,
           "torchvision_cpu_ms": torchvision_ms, "pimloader_cpu_ms": pimloader_ms,
           "dpu_cycles": cycles, "host_reference": "pimloader" if host_is_pimloader else
           "torchvision"}
    row.update(verdict(host_ms / 1e3 if host_ms else 0.0, cycles, bytes_in, bytes_out, rates))
    if note:
        row["verdict"] = note
    return row


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _cycles(cycles: dict | None) -> str:
    if cycles is None:
        return "-"
    return (f"{cycles['nominal'] / 1e6:.2f} M [{cycles['best'] / 1e6:.2f}-"
            f"{cycles['worst'] / 1e6:.2f}]")


def format_markdown(table: dict) -> str:
    rows = ["| operation | bytes in | bytes out | CPU ms torchvision | CPU ms pimloader | "
            "DPU cycles (PROJECTED) | DPU ms/img/DPU | host transfer ms | verdict |",
            "|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in table["rows"]:
        rows.append(f"| {r['op']} | {r['bytes_in'] / 1e3:.0f} kB | {r['bytes_out'] / 1e3:.0f} kB"
                    f" | {_ms(r['torchvision_cpu_ms'])} | {_ms(r['pimloader_cpu_ms'])} | "
                    f"{_cycles(r['dpu_cycles'])} | {_ms(r.get('dpu_ms_per_image'))} | "
                    f"{r['transfer_ms']:.3f} | {r['verdict']} |")
    for task, ops in table["later"]:
        rows.append(f"| {task}: {ops} | | | | | | | | to be filled as the {task} pipeline lands |")
    return "\n".join(rows)


def write_doc(table: dict, path: Path) -> None:
    src = table["sources"]
    text = f"""# Viability: which preprocessing operations pay on DPUs

Generated by `python -m benchmarks.viability` from `benchmarks/results/*.json`
(imagenet_pipeline of {src['imagenet_pipeline']}, kernel_speed, dpu_projection of
{src['dpu_projection']}); do not edit by hand. Per training image (500x375-ish photo,
RandomResizedCrop to 224x224, float32 output). **DPU figures are PROJECTED** by the cost
model ([cost_model.md](cost_model.md)): instructions per unit of work (assumed, best /
nominal / worst) x the work counted from real batches, one instruction per cycle per DPU
at {table['clock_hz'] / 1e6:.0f} MHz. No DPU hardware was used. CPU times are MEASURED on
one thread of the project's shared machine (torchvision: its step alone; pimloader: its
native decode, its fused kernel); the machine was loaded, so they are high and noisy.

- **host transfer**: bytes in / {table['rates']['host_to_dpu_rank_bw'] / 1e9:.1f} GB/s +
  bytes out / {table['rates']['dpu_to_host_rank_bw'] / 1e9:.1f} GB/s (PrIM's per-rank rates).
  UPMEM transfers are copies made by the host CPU, so this is host CPU time (ASSUMED: one
  core at those rates).
- **verdict**: "never" when the transfer costs the host at least as much as the operation;
  otherwise the DPUs it takes to free one host core: DPU time per image / (host time per
  image - transfer time per image), rounded up, in ranks of 64 DPUs. The per-operation rows
  take torchvision's step as the host's cost (the naive host); the fused row takes
  pimloader's fused kernel, the host's best.
- DPU cycles count the kernel's arithmetic and bookkeeping per image (the cost model's
  work units; the few instructions per DMA call are left out), not its DMA, which overlaps
  them and is about ten times smaller (cost_model.md).
- the fused rows' bytes are the padded transfer lengths the emulator counted (one common
  length per DPU), larger than the real crop and output bytes of the other rows.

{format_markdown(table)}

Reading it: every operation of the training transform is cheap on a host core next to the
bytes it produces; float32 output is four bytes per pixel that must cross back to the host,
at a cost of host CPU that rivals the fused kernel's own. What would pay is moving the
operations that shrink data (decode: about 44 kB of JPEG in, the decoded crop out) to the
DPUs, and producing compact output (uint8 or float16). See [cost_model.md](cost_model.md) for
the model and [results.md](results.md) for the measurements.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.viability",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="read the *.quick.json results; write results/viability.quick.md")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="folder of the benchmarks' JSON (default: %(default)s)")
    parser.add_argument("--doc", type=Path, help="markdown to write (default: docs/viability.md,"
                        " or results/viability.quick.md with --quick)")
    parser.add_argument("--out", type=Path, help="JSON of the table (default: "
                        "results/viability.json, or viability.quick.json with --quick)")
    args = parser.parse_args(argv)
    suffix = ".quick.json" if args.quick else ".json"
    inputs = [json.loads((args.results / f"{name}{suffix}").read_text())
              for name in ("imagenet_pipeline", "kernel_speed", "dpu_projection")]
    table = build(*inputs)
    doc = args.doc or (RESULTS_DIR / "viability.quick.md" if args.quick
                       else DOCS / "viability.md")
    write_doc(table, doc)
    out = args.out or RESULTS_DIR / f"viability{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(format_markdown(table))
    print(f"wrote {doc}")
    return table


if __name__ == "__main__":
    main()
