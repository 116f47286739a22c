"""The cost table: what each loader needs to feed a GPU, from the naive sweep's JSON.

Deterministic in its inputs (no measurement here): the naive sweep's results
(benchmarks.naive_sweep), the DPU projection's (benchmarks.dpu_projection; optional) and
the prices and GPU rates of pimloader.costmodel.provisioning. For each GPU rate:

- CPU-only loaders: host cores = target img/s x CPU seconds per image MEASURED at the
  sweep's largest worker count ("cores by wall": target / img/s per worker, the same from
  wall time, which a loaded machine inflates);
- DPUs: the fused step moved to UPMEM DIMMs, decoding left on the host. Host cores =
  target x (the seekable loader's CPU per image without its kernel share, taken from
  stats() as write_s / (fetch_s + decode_s + write_s), + the driver's packing copy MEASURED
  by dpu_projection + the host's copies into and out of the DIMMs, ASSUMED one core at
  PrIM's per-rank transfer rates for the bytes the emulator counted); DIMMs = target / the
  PROJECTED img/s per DPU of the cost model's 2,560-DPU system (best / nominal / worst) /
  128 DPUs per DIMM, rounded up;
- $/hour: cores at a published vCPU price, DIMMs at an ASSUMED price amortised over 3 years,
  and the DIMM price at which the DPU configuration breaks even with the CPU-only one: the
  price at which its DIMMs cost per hour what the host cores it saves cost. "never" when it
  saves no host core; "n/a" when it saves fewer than the spread of the CPU-only figure over
  the sweep's epochs (max - min, times the rate): a saving the measurement cannot tell
  from zero has no meaningful break-even price. With one timed epoch (--quick) there is no
  spread: the price is shown, marked "(no spread)".
"""
from __future__ import annotations

from pathlib import Path

from pimloader.costmodel import CASES
from pimloader.costmodel.provisioning import (DPUS_PER_DIMM, GPU_RATES, Prices,
                                              break_even_dimm_price, dimms_for, gpu_rates_table,
                                              host_cores, hourly_cost)

from benchmarks.harness import pyplot, save_figure

DPU_SYSTEM = "2,560 DPUs"
DPU_HOST = "pimloader seekable"   # the host path the DPU configuration keeps (decode, read)
LABEL = "DPUs + host"


def kernel_share(stats: dict) -> float:
    """Share of a pimloader epoch's producing time spent in the fused kernel (write_s)."""
    busy = stats["fetch_s"] + stats["decode_s"] + stats["write_s"]
    return stats["write_s"] / busy if busy > 0 else 0.0


def dpu_basis(host: dict, projection: dict) -> dict:
    """Host CPU per image and PROJECTED img/s per DPU of the DPU configuration."""
    entry = next(e for e in projection["pipelines"]
                 if (e["pipeline"], e["dtype"]) == ("train", "float32"))
    system = next(s for s in projection["systems"] if s["name"] == DPU_SYSTEM)
    per_dpu = {p["case"]: p["images_per_s"] / system["nr_dpus"] for p in entry["projections"]
               if p["system"] == DPU_SYSTEM}
    share = kernel_share(host["median_epoch_stats"])
    transfer_s = host_transfer_s(entry["per_image"], projection["assumptions"])
    host_s = (host["cpu_ms_per_image"] / 1e3 * (1 - share) + entry["host_copy_s_per_image"]
              + transfer_s)
    return {"host_loader": DPU_HOST, "system": DPU_SYSTEM, "clock_hz": system["clock_hz"],
            "kernel_share": share, "host_copy_s_per_image": entry["host_copy_s_per_image"],
            "host_transfer_s_per_image": transfer_s,
            "host_cpu_s_per_image": host_s, "dpu_images_per_s_per_dpu": per_dpu,
            "projection_date": projection["date"]}


def host_transfer_s(per_image: dict, assumptions: list[dict]) -> float:
    """Host CPU seconds per image moving its bytes to and from the DPUs. UPMEM's transfers
    are copies the host CPU makes into the DIMMs (no DMA engine on the host side): ASSUMED to
    cost one core at PrIM's per-rank rates, an optimistic bound if those need more threads."""
    rate = {a["name"]: a["nominal"] for a in assumptions}
    return (per_image["host_to_dpu_bytes"] / rate["host_to_dpu_rank_bw"]
            + per_image["dpu_to_host_bytes"] / rate["dpu_to_host_rank_bw"])


def build(sweep: dict, projection: dict | None, prices: Prices = Prices()) -> dict:
    top = max(sweep["rows"], key=lambda row: row["workers"])
    loaders = top["loaders"]
    spread_s = cpu_spread_s_per_image(loaders.get(DPU_HOST, {}), top.get("images"))
    dpu = dpu_basis(loaders[DPU_HOST], projection) if projection and DPU_HOST in loaders else None
    rows = []
    for gpu in GPU_RATES:
        target = gpu.at()
        row = {"gpu": gpu.name, "target_img_s": target, "loaders": {}}
        for name, entry in loaders.items():
            cores = host_cores(target, entry["cpu_ms_per_image"] / 1e3)
            row["loaders"][name] = {"cores": cores,
                                    "cores_by_wall": target / entry["img_s_per_worker"],
                                    "usd_per_hour": hourly_cost(cores, 0, prices)}
        if dpu is not None:
            row[LABEL] = dpu_row(target, dpu, row["loaders"][DPU_HOST]["cores"],
                                 None if spread_s is None else target * spread_s, prices)
        rows.append(row)
    return {"workers": top["workers"], "sweep_date": sweep["date"], "dpu": dpu, "rows": rows,
            "gpu_rates": gpu_rates_table(), "prices": prices.table(),
            "note": ("host cores: MEASURED CPU time per image x target rate (linear); DIMMs and "
                     "the DPU rate are PROJECTED (cost model, no DPU hardware); prices and GPU "
                     "rates are ASSUMPTIONS with their sources")}


def cpu_spread_s_per_image(entry: dict, images: int | None) -> float | None:
    """max - min of a loader's CPU seconds per image over the sweep's timed epochs (None
    when the entry does not list them, or lists one: no spread was measured)."""
    per_epoch = entry.get("epoch_cpu_s") or []
    if not images or len(per_epoch) < 2:
        return None
    return (max(per_epoch) - min(per_epoch)) / images


def dpu_row(target: float, dpu: dict, cpu_only_cores: float, spread_cores: float | None,
            prices: Prices) -> dict:
    cores = host_cores(target, dpu["host_cpu_s_per_image"])
    dimms = {case: dimms_for(target, dpu["dpu_images_per_s_per_dpu"][case]) for case in CASES}
    return {"cores": cores, "dimms": dimms,
            "dpus": {case: count * DPUS_PER_DIMM for case, count in dimms.items()},
            "usd_per_hour": {case: hourly_cost(cores, dimms[case], prices, case) for case in CASES},
            **break_even(cpu_only_cores, cores, spread_cores, dimms["nominal"], prices)}


def break_even(cpu_only_cores: float, dpu_cores: float, spread_cores: float | None,
               dimms: int, prices: Prices) -> dict:
    """The DIMM price at which `dimms` cost per hour what the host cores the DPU
    configuration saves cost; None, with the reason, when it saves none or fewer than
    `spread_cores` (the CPU-only figure's spread over epochs, in cores at this rate; None
    when not measured: a price is then given for any saving)."""
    saved = cpu_only_cores - dpu_cores
    entry = {"cores_saved": saved, "saving_spread_cores": spread_cores,
             "break_even_usd_per_dimm": None, "break_even_why_none": None}
    if saved <= 0:
        entry["break_even_why_none"] = f"never: needs {-saved:.2f} more host cores"
    elif spread_cores is not None and saved <= spread_cores:
        entry["break_even_why_none"] = (f"n/a: saves {saved:.2f} cores, within the CPU "
                                        f"measurement's spread ({spread_cores:.2f})")
    else:
        entry["break_even_usd_per_dimm"] = break_even_dimm_price(saved, dimms, prices)
    return entry


def format_break_even(entry: dict) -> str:
    """The table's cell: the price, or "never" / "n/a" with the cores saved."""
    usd = entry["break_even_usd_per_dimm"]
    if usd is not None:
        unmeasured = entry["saving_spread_cores"] is None
        return f"${usd:,.0f}" + (" (no spread)" if unmeasured else "")
    saved = entry["cores_saved"]
    if saved <= 0:
        return f"never ({saved:+.2f} c)"
    return f"n/a ({saved:+.2f} c, spread {entry['saving_spread_cores']:.2f})"


def format_table(table: dict) -> str:
    names = list(table["rows"][0]["loaders"]) if table["rows"] else []
    lines = [f"Cost table: host cores = target x CPU time per image MEASURED here at "
             f"num_workers={table['workers']}; DIMMs PROJECTED (cost model, {DPU_SYSTEM}, nominal "
             "[best-worst]); prices and GPU rates are ASSUMPTIONS (sources in the JSON)"]
    header = f"{'GPU':<9} {'img/s':>6} " + " ".join(f"{name[:18]:>18}" for name in names)
    if table["dpu"]:
        header += (f" {'DPUs + host: cores':>19} {'DIMMs':>11} {'$/h':>17}"
                   f" {'break-even $/DIMM (cores saved)':>31}")
    lines += [header, "-" * len(header)]
    for row in table["rows"]:
        line = f"{row['gpu']:<9} {row['target_img_s']:6.0f} " + " ".join(
            f"{row['loaders'][n]['cores']:6.1f} c ${row['loaders'][n]['usd_per_hour']:7.2f}/h"
            for n in names)
        dpu = row.get(LABEL)
        if dpu:
            d, usd = dpu["dimms"], dpu["usd_per_hour"]
            line += (f" {dpu['cores']:19.1f} {d['nominal']:>3} [{d['best']}-{d['worst']}]"
                     f" {usd['nominal']:5.2f} [{usd['best']:.2f}-{usd['worst']:.2f}]"
                     f" {format_break_even(dpu):>31}")
        lines.append(line)
    if table["dpu"]:
        dpu = table["dpu"]
        lines.append(f"DPUs + host: host keeps reading and decoding ({dpu['host_loader']}, "
                     f"{dpu['host_cpu_s_per_image'] * 1e3:.3f} ms CPU/img: its "
                     f"{(1 - dpu['kernel_share']) * 100:.0f}% outside the kernel + "
                     f"{dpu['host_copy_s_per_image'] * 1e3:.3f} ms packing + "
                     f"{dpu['host_transfer_s_per_image'] * 1e3:.3f} ms moving bytes to/from the "
                     "DIMMs, ASSUMED one core at PrIM's per-rank rates); PROJECTED img/s "
                     "per DPU " + ", ".join(f"{case} {rate:.1f}" for case, rate in
                                            dpu["dpu_images_per_s_per_dpu"].items()))
        lines.append("break-even: the DIMM price at which the DIMMs cost per hour what the host "
                     "cores saved cost; never: no core saved; n/a: fewer saved than the spread "
                     f"of {DPU_HOST}'s CPU time per image over the sweep's epochs (max - min); "
                     "(no spread): one timed epoch, so no spread to compare with")
    else:
        lines.append("no DPU rows: run python -m benchmarks.dpu_projection first")
    for gpu in table["gpu_rates"]:
        lines.append(f"  {gpu['name']}: {gpu['images_per_s']:.0f} {gpu['unit']} ({gpu['source']})")
    for price in table["prices"]:
        lines.append(f"  {price['name']}: {price['nominal']:g} {price['unit']} "
                     f"[{price['best']:g}-{price['worst']:g}] ({price['source']})")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    """Left: img/s against workers per loader (dashed: linear from 1 worker). Right: host
    cores per GPU rate for each loader, with the DPU configuration's host cores and DIMMs."""
    plt = pyplot(path)
    if plt is None:
        return

    rows, table = results["rows"], results["cost_table"]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.6), dpi=110)
    workers = [row["workers"] for row in rows]
    for name in rows[0]["loaders"]:
        rates = [row["loaders"][name]["median_img_s"] for row in rows]
        line, = left.plot(workers, rates, marker="o", label=name)
        left.plot(workers, [rates[0] * w / workers[0] for w in workers], ls="--",
                  color=line.get_color(), alpha=0.4)
        middle.plot(workers, [row["loaders"][name]["cpu_ms_per_image"] for row in rows],
                    marker="o", label=name)
    middle.set_xlabel("num_workers")
    middle.set_ylabel("CPU ms per image (this process + workers)")
    middle.set_xticks(workers)
    middle.set_ylim(bottom=0)
    middle.set_title("CPU time per image: the steadier figure on a loaded machine", fontsize=9)
    middle.grid(alpha=0.3)
    left.set_xlabel("num_workers")
    left.set_ylabel("images/s (median epoch)")
    left.set_xticks(workers)
    left.set_title(f"Naive sweep, training pipeline, batch 64 (dashed: linear)\n"
                   f"{results['date']}, load {results['environment']['loadavg_before'][0]:.1f}",
                   fontsize=9)
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    names = list(table["rows"][0]["loaders"]) + ([LABEL] if table["dpu"] else [])
    width = 0.8 / len(names)
    for slot, name in enumerate(names):
        xs = [i + (slot - (len(names) - 1) / 2) * width for i in range(len(table["rows"]))]
        cores = [(row[LABEL] if name == LABEL else row["loaders"][name])["cores"]
                 for row in table["rows"]]
        right.bar(xs, cores, width, label=name + (" (PROJECTED DIMMs)" if name == LABEL else ""))
        if name == LABEL:
            for x, row, height in zip(xs, table["rows"], cores):
                right.text(x, height, f"+{row[LABEL]['dimms']['nominal']} DIMMs", ha="center",
                           va="bottom", fontsize=7)
    right.set_xticks(range(len(table["rows"])),
                     [f"{row['gpu']}\n{row['target_img_s']:.0f} img/s" for row in table["rows"]],
                     fontsize=8)
    right.set_ylabel("host cores (CPU time per image x rate)")
    right.set_title("Host cores to feed one GPU (GPU rates: published/assumed)", fontsize=9)
    right.legend(fontsize=8)
    right.grid(axis="y", alpha=0.3)
    save_figure(fig, path)
