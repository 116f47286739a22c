"""The viability table: per preprocessing operation, does it pay to run it on DPUs?

Generated, deterministically, from the JSON of the benchmarks (nothing is measured here):
op_costs (CPU ms of each operation, torchvision's step and pimloader's increment in its
fused kernel, one thread; without it, imagenet_pipeline's torchvision steps), imagenet_pipeline
(bytes of the files, torchvision's decode), kernel_speed (CPU ms of pimloader's fused
kernel) and dpu_projection (bytes the emulator COUNTED, the kernel's work per image,
pimloader's decode CPU time, the cost model's assumptions).
Per operation and image: bytes in and out, CPU ms measured, DPU cycles PROJECTED (the
cost model's instruction counts per unit of work x the work counted per image, best /
nominal / worst), host transfer ms and a verdict:

    host_s      = CPU time of the operation on the host: pimloader's where measured (its
                  increment in the fused kernel, its fused kernel), else torchvision's step
    transfer_s  = bytes_in / 6.7 GB/s + bytes_out / 4.7 GB/s: UPMEM transfers are copies the
                  host CPU makes (PrIM's per-rank rates; ASSUMED to cost one core)
    dpu_s       = DPU cycles (nominal) / 350 MHz
    verdict     = never, if transfer_s >= host_s (moving the bytes costs the host more than
                  the operation); else DPUs per host core freed = dpu_s / (host_s - transfer_s),
                  and the DIMM price below which those DPUs cost less than the cores they
                  free (provisioning.Prices: vCPU price, 3 years of use)

    python -m benchmarks.viability        # writes viability.md, its plot viability.png
                                          # and viability.json to results/latest/ (docs/
                                          # and results/ when refreshing, harness.py)
"""
from __future__ import annotations

import argparse
import json
import math
import re
import textwrap
from pathlib import Path

from pimloader.costmodel.provisioning import DPUS_PER_DIMM, Prices, break_even_dimm_price
from benchmarks.harness import (input_path, plots_dir, pyplot, results_path, run_dir,
                                save_figure)

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
    if dpus == 0:
        return {**result, "dpus_per_core": 0, "verdict": "no DPU work of its own"}
    dimm_usd = break_even_dimm_price(DPUS_PER_DIMM / dpus, 1, Prices())
    return {**result, "dpus_per_core": dpus, "break_even_usd_per_dimm": dimm_usd,
            "verdict": f"saves host CPU: {dpus} DPUs ({math.ceil(dpus / 64)} ranks) free one "
                       f"core; a DIMM pays below ${dimm_usd:,.0f}"}


def step_costs(pipeline: dict, op_costs: dict | None) -> dict:
    """{operation: (torchvision CPU ms, pimloader CPU ms or None)} per image: op_costs'
    like-for-like measurement when there is one, else imagenet_pipeline's torchvision steps
    (and pimloader's colour as the colour pipeline's extra kernel time)."""
    if op_costs is not None:
        tv, pim = op_costs["torchvision_cpu_ms"], op_costs["pimloader_cpu_ms"]
        return {op: (tv[op], pim[op]) for op in tv}
    steps = {(b["contender"], b["pipeline"]): b for b in pipeline["breakdown"]
             if b["dtype"] == "float32"}
    train = steps[("torchvision", "train")]["transform_steps"]
    colour_tv = steps.get(("torchvision", "colour"))
    colour_pim = steps.get(("pimloader", "colour"))
    return {"crop + resize": (train["RandomResizedCrop"], None),
            "flip": (train["RandomHorizontalFlip"], None),
            "convert": (train["ToDtype"], None), "normalise": (train["Normalize"], None),
            "colour": (colour_tv["transform_steps"]["ColorJitter"] if colour_tv else None,
                       colour_pim["collate_or_write"]
                       - steps[("pimloader", "train")]["collate_or_write"]
                       if colour_pim else None)}


def decode_rows(decode: dict, rates: dict) -> list[dict]:
    """JPEG decode on DPUs (benchmarks.decode_projection, training float32): the host saves its
    decode but still parses the file's header, finds and packs the box's restart intervals
    and pushes them; "as built" with the host side measured (csrc/jpeg_layout.c and its Python
    wrapper), "at the floor" with only the push (the parse and packing taken as free: ASSUMED)."""
    entry = next(e for e in decode["pipelines"] if (e["pipeline"], e["dtype"]) == ("train", "float32"))
    cycles = {r["case"]: r["chain"]["decode_instructions_per_image"] for r in entry["projections"]
              if r["system"] == entry["projections"][0]["system"]}
    parts = entry["host_chain_parts_s"]
    host_side = parts["parse_s"] + parts["select_s"] + parts["pack_s"]
    decode_ms = entry["host_decode_cpu_s_per_image"] * 1e3
    chunk = entry["decode_mram_per_image"]["chunk_bytes"]
    rows = []
    for label, extra_s in (("as built: host parse + packing measured", host_side),
                           ("host side at its floor", 0.0)):
        row = _row(f"decode on DPUs (restart intervals -> RGB box left in MRAM), {label}", chunk, 32,
                   None, decode_ms, cycles, rates)
        saved_s = decode_ms / 1e3 - row["transfer_ms"] / 1e3 - extra_s
        row["host_extra_ms"] = extra_s * 1e3   # host CPU the DPU path adds per image
        if saved_s <= 0:
            row.update(dpus_per_core=None, verdict=f"never: the host's parse and packing ({host_side * 1e3:.3f} ms, "
                       f"as built) cost more than the decode it saves ({decode_ms:.3f} ms)")
        else:
            dpus = math.ceil(row["dpu_ms_per_image"] / 1e3 / saved_s)
            price = break_even_dimm_price(DPUS_PER_DIMM / dpus, 1, Prices())
            row.update(dpus_per_core=dpus, break_even_usd_per_dimm=price,
                       verdict=f"saves host CPU: {dpus} DPUs ({math.ceil(dpus / 64)} ranks) free one core; "
                               f"a DIMM pays below ${price:,.0f} (PROJECTED, decode_projection)")
        rows.append(row)
    return rows


def detection_rows(detection: dict, assumptions: dict, rates: dict) -> list[dict]:
    """The detection pipelines' own operations (detection_projection's JSON): the zoom-out
    canvas, the box ops, and the Faster R-CNN-style fused step with its large outputs."""
    entries = {entry["pipeline"]: entry for entry in detection["pipelines"]}
    ssd, frcnn = entries["ssd-geometry"], entries["faster-rcnn"]
    canvas = ssd["padded_bytes_per_image"]
    out_bytes = 300 * 300 * 3 * 4
    rows = [
        _row("detection: zoom-out canvas (RandomZoomOut, then IoU crop, flip, resize 300, "
             "float32)", canvas["source"], out_bytes, None,
             ssd["cpu_kernel_s_per_padded_image"] * 1e3, None, rates,
             "not on DPUs: the DPU kernel does not pad; a DPU would be sent "
             f"{canvas['canvas'] / 1e3:.0f} kB of canvas filled by the host instead of "
             f"{canvas['source'] / 1e3:.0f} kB of source pixels (CPU ms: the whole fused "
             "kernel of such a sample)"),
        _row("detection: box ops (IoU crop's draws, boxes cropped, flipped, resized, "
             "sanitised)", 0, 0, None, ssd["probe_cpu_s_per_image"] * 1e3, None, rates,
             "on the host: torchvision's own box functions in the probe run, a few dozen "
             "numbers per image and no pixels"),
    ]
    launches = frcnn["launches"]
    share = sum(launch["share"] for launch in launches)
    mean = lambda f: sum(launch["share"] * f(launch) for launch in launches) / share  # noqa: E731
    work = {unit: mean(lambda launch: launch["work_per_image"][unit])
            for unit in launches[0]["work_per_image"]}
    rows.append(_row(
        "detection: fused flip + resize (shortest side 800) + float32 normalise "
        "(Faster R-CNN-style)", mean(lambda launch: launch["per_image"]["host_to_dpu_bytes"]),
        mean(lambda launch: launch["per_image"]["dpu_to_host_bytes"]), None,
        frcnn["cpu_kernel_s_per_unpadded_image"] * 1e3,
        dpu_cycles(work, assumptions, RESIZE_UNITS + EMIT_UNITS), rates))
    return rows


AUDIO_STAGES = (("framing, Hann window, block scaling", ("sample", "scale", "peak", "frame")),
                ("FFT (mixed radix, Q15 products)", ("bf2", "bf4", "odd_term", "mul_q15")),
                ("power", ("square", "power_bin")),
                ("mel filter bank", ("mel_mac",)),
                ("log / dB by table, top_db clamp", ("mel_value", "clamp_value")),
                ("SpecAugment masks", ("mask_value",)))


def audio_rows(audio: dict, projection: dict, rates: dict) -> list[dict]:
    """The keyword pipeline's operations per clip: its waveform steps (benchmarks.audio's
    stage times) and the fused log-mel step (the CPU kernel measured by benchmarks.audio,
    the fixed-point DPU kernel projected by benchmarks.audio_dpu_projection with counted
    instructions), then each stage's share of the DPU step's instructions."""
    stages = audio["ms_per_clip_by_stage"]
    setting = next(v for k, v in projection["results"].items() if k.startswith("n_mels=40"))
    first = setting["projections"][0]["system"]
    instructions = {p["case"]: p["instructions_per_clip"] for p in setting["projections"]
                    if p["system"] == first}
    share = next(p["share"] for p in setting["projections"]
                 if p["system"] == first and p["case"] == "nominal")
    per_clip = projection["clips_per_dpu"]
    clip_bytes = 16000 * 4
    rows = [
        _row("audio: waveform steps (crop/pad 1 s, shift, gain, noise mix)", clip_bytes, clip_bytes,
             stages["waveform augmentations (torch, per clip)"],
             stages["waveform augmentations (native: draws, one call)"], None, rates,
             "on the host: the DPU kernel takes the finished clip; these steps are a few "
             "operations per sample, and their random draws are the host's"),
        _row("audio: fused log-mel features (framing, FFT 400, power, 40 mels, dB, masks)",
             setting["dma_per_clip"]["push_bytes_per_dpu"] / per_clip,
             setting["dma_per_clip"]["gather_bytes_per_dpu"] / per_clip,
             stages["features (torchaudio, per clip)"],
             stages["features (fused kernel: masks drawn, one call)"], instructions, rates),
    ]
    for stage, units in AUDIO_STAGES:
        part = sum(share.get(unit, 0.0) for unit in units)
        rows.append(_row(f"audio: - {stage}", 0, 0, None, None,
                         {case: part * n for case, n in instructions.items()}, rates,
                         f"part of the fused step: {part:.1%} of its DPU instructions"))
    return rows


def build(pipeline: dict, kernel: dict, projection: dict, op_costs: dict | None = None,
          decode: dict | None = None, detection: dict | None = None, audio: dict | None = None,
          audio_projection: dict | None = None) -> dict:
    """Rows of the table from the benchmarks' results (op_costs, decode_projection,
    detection_projection, and audio with audio_dpu_projection optional)."""
    entry, entry16 = (next(e for e in projection["pipelines"]
                           if (e["pipeline"], e["dtype"]) == ("train", dtype))
                      for dtype in ("float32", "float16"))
    assumptions = {a["name"]: a for a in projection["assumptions"]}
    rates = {name: assumptions[name]["nominal"] for name in ("host_to_dpu_rank_bw",
                                                             "dpu_to_host_rank_bw")}
    tv_transform = {b["dtype"]: b["transform"] for b in pipeline["breakdown"]
                    if (b["contender"], b["pipeline"]) == ("torchvision", "train")}
    tv_decode = next(b["decode"] for b in pipeline["breakdown"]
                     if (b["contender"], b["pipeline"], b["dtype"]) ==
                     ("torchvision", "train", "float32"))
    cost = step_costs(pipeline, op_costs)
    per_image = entry["per_image"]
    crop_bytes = entry["transfer"]["in_real_bytes"] / entry["images"]
    jpeg_bytes = pipeline["dataset"]["mean_bytes"]

    def cycles(units, of=entry):
        return dpu_cycles(of["work_per_image"], assumptions, units)

    def both(*ops):
        tv = sum(cost[op][0] for op in ops)
        pim = None if any(cost[op][1] is None for op in ops) else sum(cost[op][1] for op in ops)
        return tv, pim

    rows = [
        _row("decode (JPEG -> RGB crop box)", jpeg_bytes, crop_bytes, tv_decode,
             entry["decode_cpu_s_per_image"] * 1e3, None, rates,
             "on the host (today); on DPUs it sends the restart intervals of the crop instead of "
             f"{crop_bytes / 1e3:.0f} kB of pixels: the rows below"),
        _row("crop + resize (RandomResizedCrop 224)", crop_bytes, OUT_PIXELS,
             *both("crop + resize"), cycles(RESIZE_UNITS), rates),
        _row("flip (RandomHorizontalFlip)", OUT_PIXELS, OUT_PIXELS, *both("flip"),
             {case: 0.0 for case in CASES}, rates,
             "free inside the fused step: the store index of emit"),
        _row("colour (ColorJitter brightness, contrast, saturation)", OUT_PIXELS, OUT_PIXELS,
             *both("colour"), None, rates, "not on DPUs: float blends per pixel, and a DPU "
             "has no FPU; samples that need colour run on the CPU kernel"),
        _row("convert + normalise (ToDtype float32, Normalize)", OUT_PIXELS, OUT_PIXELS * 4,
             *both("convert", "normalise"), cycles(EMIT_UNITS), rates),
        *(decode_rows(decode, rates) if decode else []),
        _row("fused crop + resize + flip + convert + normalise", per_image["host_to_dpu_bytes"],
             per_image["dpu_to_host_bytes"], tv_transform.get("float32"),
             kernel["cpu_ms_per_image"]["pimloader kernel float32"],
             cycles(RESIZE_UNITS + EMIT_UNITS), rates),
        _row("the same, float16 output", entry16["per_image"]["host_to_dpu_bytes"],
             entry16["per_image"]["dpu_to_host_bytes"], tv_transform.get("float16"),
             kernel["cpu_ms_per_image"]["pimloader kernel float16"],
             cycles(RESIZE_UNITS + EMIT_UNITS, entry16), rates),
        *(detection_rows(detection, assumptions, rates) if detection else []),
        *(audio_rows(audio, audio_projection, rates) if audio and audio_projection else []),
    ]
    landed = {"detection": bool(detection), "audio": bool(audio and audio_projection)}
    later = [(task, ops) for task, ops in LATER if not landed[task]]
    return {"benchmark": "viability", "rows": rows,
            "sources": {"imagenet_pipeline": pipeline["date"], "kernel_speed": kernel.get("date"),
                        "dpu_projection": projection["date"],
                        "op_costs": op_costs["date"] if op_costs else None,
                        "decode_projection": decode["date"] if decode else None,
                        "detection_projection": detection["date"] if detection else None,
                        "audio": audio["date"] if audio else None,
                        "audio_dpu_projection": (audio_projection.get("date", "undated")
                                                 if audio_projection else None)},
            "op_costs_load": ([op_costs["loadavg_before"][0], op_costs["loadavg_after"][0]]
                              if op_costs and "loadavg_before" in op_costs else None),
            "clock_hz": CLOCK_HZ, "rates": rates, "later": later}


def _row(op: str, bytes_in: float, bytes_out: float, torchvision_ms: float | None,
         pimloader_ms: float | None, cycles: dict | None, rates: dict, note: str = "") -> dict:
    """One operation; the host's cost is pimloader's where measured, else torchvision's."""
    reference = "pimloader" if pimloader_ms is not None else "torchvision"
    host_ms = pimloader_ms if pimloader_ms is not None else torchvision_ms
    row = {"op": op, "bytes_in": bytes_in, "bytes_out": bytes_out,
           "torchvision_cpu_ms": torchvision_ms, "pimloader_cpu_ms": pimloader_ms,
           "dpu_cycles": cycles, "host_reference": reference}
    row.update(verdict((host_ms or 0.0) / 1e3, cycles, bytes_in, bytes_out, rates))
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


def _load_note(table: dict) -> str:
    load = table.get("op_costs_load")
    if load is None:
        return ""
    return (f"The load average was {load[0]:.1f} -> {load[1]:.1f} during op_costs (above the "
            "machine's CPU count, other jobs shared its cores and caches, which inflates "
            "memory-bound steps most).")


def write_doc(table: dict, path: Path, plot_name: str | None = None) -> None:
    """The markdown page; with `plot_name`, it shows that PNG (next to it) below the table."""
    src = table["sources"]
    figure = (f"\n\n![host CPU per image: the operation vs moving its bytes]({plot_name})"
              if plot_name else "")
    text = f"""# Viability: which preprocessing operations pay on DPUs

Generated by `python -m benchmarks.viability` from `benchmarks/results/*.json`
(op_costs of {src['op_costs'] or '- (not run: torchvision steps from imagenet_pipeline)'},
imagenet_pipeline of {src['imagenet_pipeline']}, kernel_speed, dpu_projection of
{src['dpu_projection']}, decode_projection of {src.get('decode_projection') or '- (not run)'},
detection_projection of {src.get('detection_projection') or '- (not run)'}, audio of
{src.get('audio') or '- (not run)'}, audio_dpu_projection); do not edit by hand. Per training image (500x375-ish photo,
RandomResizedCrop to 224x224, float32 output). **DPU figures are PROJECTED** by the cost
model ([cost_model.md](cost_model.md)): instructions per unit of work (assumed, best /
nominal / worst) x the work counted from real batches, one instruction per cycle per DPU
at {table['clock_hz'] / 1e6:.0f} MHz. No DPU hardware was used. CPU times are MEASURED, one
thread's CPU time on the project's shared machine: torchvision's step alone, pimloader's
increment in its fused kernel when the operation is added to it (`benchmarks/op_costs.py`),
its native decode, its whole fused kernel. {_load_note(table)} An increment near zero is
within the noise (it can come out negative).

- **host transfer**: bytes in / {table['rates']['host_to_dpu_rank_bw'] / 1e9:.1f} GB/s +
  bytes out / {table['rates']['dpu_to_host_rank_bw'] / 1e9:.1f} GB/s (PrIM's per-rank rates).
  UPMEM transfers are copies made by the host CPU, so this is host CPU time (ASSUMED: one
  core at those rates).
- **verdict**: "never" when the transfer costs the host at least as much as the operation;
  otherwise the DPUs it takes to free one host core: DPU time per image / (host time per
  image - transfer time per image), rounded up, in ranks of 64 DPUs, and the DIMM price
  below which a DIMM's 128 DPUs cost less than the host cores they free (at
  ${Prices().vcpu_hour.nominal} per vCPU-hour over {Prices().amortisation_hours.nominal / 8760:.0f}
  years, `pimloader/costmodel/provisioning.py`; UPMEM publishes no DIMM price). The host's
  cost is pimloader's (the host's best) where it was measured, else torchvision's step.
  The model scales DPUs weakly (each DPU's rate is the same in any system), so the answer
  is a ratio of DPUs to host cores rather than a system size; a system that is too small
  for the target rate only needs more of the same.
- DPU cycles count the kernel's arithmetic and bookkeeping per image (the cost model's
  work units; the few instructions per DMA call are left out), not its DMA, which overlaps
  them and is about ten times smaller (cost_model.md).
- the fused rows' bytes are the padded transfer lengths the emulator counted (one common
  length per DPU), larger than the real crop and output bytes of the other rows.
- the detection rows (when `benchmarks/detection_projection.py` ran) are per image of the
  offline COCO-format set (640x480-ish photos): the SSD-style geometry's zoom-out samples
  and box ops, and the Faster R-CNN-style fused step (shortest side 800, max 1333, float32:
  about 10 MB out per image), its bytes and work averaged over its output sizes.
- the audio rows (when `benchmarks/audio.py` and `audio_dpu_projection.py` ran) are per
  clip of the keyword pipeline (1 s at 16 kHz): CPU ms are in-process wall times per clip
  of each stage (`ms_per_clip_by_stage`, torchaudio's transforms against pimloader's native
  steps and fused kernel), DPU instructions are the fixed-point kernel's, counted on the
  RV32 proxy per unit of work (cost_model.md); the stage rows split them by the nominal
  case's shares.

{format_markdown(table)}{figure}

Reading it: every operation of the training transform is cheap on a host core next to the
bytes it produces; float32 output is four bytes per pixel that must cross back to the host,
at a cost of host CPU that rivals the fused kernel's own. Decode is the operation that
shrinks data: on DPUs (the "decode on DPUs" rows, `benchmarks/decode_projection.py`) only
the restart intervals of the crop travel and the decoded box stays in MRAM for the next
stage. It frees host CPU only if the host's own share (reading each file's header, finding
and packing the crop's intervals) costs less than the decode it replaces: measured, that
share cost about twice the decode when it was Python, and about two thirds of it since the
parse and packing moved to C (csrc/jpeg_layout.c); at its floor (only the push), decode is
the operation whose DPUs free a host core most cheaply. The host work
the DPU path adds enters those verdicts beside the transfer (`host_extra_ms` in
viability.json). See [cost_model.md](cost_model.md#decode-on-dpus-projected) for the model and
[results.md](results.md) for the measurements.

The detection rows: a zoom-out canvas cannot go to DPUs as the kernel stands (it does not
pad, and a canvas filled by the host would multiply the bytes sent), and the box ops are a
few numbers per image, done by torchvision's own functions on the host; the Faster
R-CNN-style fused step has far more work per image than the classification one, and its
float32 output is the largest transfer of all (cost_model.md, "Detection pipelines").

The audio rows: the fixed-point FFT is where a DPU's lack of a 32-bit multiplier shows
(its Q15 products and butterflies are most of the instructions), so the DPU time per clip
is large next to the quarter of a millisecond the host's vectorised float kernel
takes; the bytes are small (a 32 kB int16 clip in, 16 kB of features out), so the verdict
is a ratio of DPUs to host cores, not a transfer bound ([audio.md](audio.md)). The host
figure of the fused step includes drawing the masks, which stays on the host with the DPU
path too, so its verdict leans slightly towards the DPUs.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def plot(table: dict, path: Path) -> None:
    """Per operation, the verdict's two host costs per image: the operation on the host (its
    reference: pimloader's where measured) and moving its bytes to and from the DPUs (plus
    host work the DPU path adds), with the verdict's DPUs per host core freed."""
    plt = pyplot(path)
    if plt is None:
        return

    rows = table["rows"]
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(rows) + 1.8), dpi=110)
    for y, row in enumerate(rows):
        host = row[f"{row['host_reference']}_cpu_ms"] or 0.0
        dpu_path = row["transfer_ms"] + row.get("host_extra_ms", 0.0)
        ax.barh(y - 0.2, host, 0.4, color="#4c72b0",
                label="the operation on the host" if y == 0 else None)
        ax.barh(y + 0.2, dpu_path, 0.4, color="#dd8452",
                label="moving its bytes (+ host work the DPU path adds)" if y == 0 else None)
        verdict_text = (f"{row['dpus_per_core']} DPUs free a core" if row["dpus_per_core"]
                        else re.split("[:;]", row["verdict"])[0])
        ax.text(max(host, dpu_path), y, "  " + verdict_text, va="center", fontsize=7.5)
    ax.set_yticks(range(len(rows)), [textwrap.fill(row["op"], 46) for row in rows],
                  fontsize=7)
    ax.invert_yaxis()
    ax.margins(x=0.35)
    ax.set_xlabel("host CPU ms per image (MEASURED; transfers ASSUMED one core at PrIM's rates)")
    ax.set_title("Viability: an operation can pay on DPUs only where it costs the host more "
                 "than moving its bytes (DPU figures PROJECTED)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.viability",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="read the *.quick.json results; write viability.quick.md")
    parser.add_argument("--results", type=Path,
                        help="folder of the benchmarks' JSON (default: the run's, "
                             "results/latest/, and the committed results/ for what it lacks)")
    parser.add_argument("--doc", type=Path, help="markdown to write (default: "
                        "results/latest/viability.md, docs/ when refreshing; "
                        "viability.quick.md beside the JSON with --quick)")
    parser.add_argument("--out", type=Path, help="JSON of the table (default: results/latest/"
                        "viability.json, or viability.quick.json with --quick)")
    parser.add_argument("--plot", type=Path, help="PNG, shown by the page when next to it "
                        "(default: viability.png beside the default --doc; else none)")
    args = parser.parse_args(argv)
    suffix = ".quick.json" if args.quick else ".json"

    def source(name: str) -> Path:
        return args.results / f"{name}{suffix}" if args.results else input_path(name, args.quick)
    inputs = [json.loads(source(name).read_text())
              for name in ("imagenet_pipeline", "kernel_speed", "dpu_projection")]
    optional = [source(name) for name in (
        "op_costs", "decode_projection", "detection_projection", "audio", "audio_dpu_projection")]
    table = build(*inputs, *(json.loads(path.read_text()) if path.exists() else None
                             for path in optional))
    if args.plot is None and args.doc is None and not args.quick:
        args.plot = plots_dir() / "viability.png"
    doc = args.doc or (run_dir() / "viability.quick.md" if args.quick
                       else plots_dir() / "viability.md")
    if args.plot is not None:
        plot(table, args.plot)
    shown = args.plot.name if args.plot is not None and args.plot.parent == doc.parent else None
    write_doc(table, doc, shown)
    out = args.out or results_path("viability", args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(format_markdown(table))
    print(f"wrote {doc}")
    return table


if __name__ == "__main__":
    main()
