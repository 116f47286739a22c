"""PROJECTION of the cluster cache to 8-256 nodes: the per-node img/s that fetching allows,
for no cache, a per-node cache and the partitioned cache, from the sample size measured by
cluster_cache.py and published storage and network figures. Not a measurement.

    python -m benchmarks.cluster_cache_projection [--ratios 2 16] [--measured JSON] [--quick]

The model (steady state, after the caches are filled; every node draws M/N samples an
epoch, uniformly at random, each of mean encoded size s; fetching overlaps preparation, so a
node's data rate is capped by the slower of its two links):

  storage per node   S_n = min(S_node, S_total / N)   (S_total: a store's aggregate cap)
  no cache           s / S_n seconds a sample
  per-node cache     holds 1/rho of the dataset (rho = dataset / one node's budget):
                     (1 - 1/rho) of its samples from storage
  partitioned        the N nodes hold H = min(1, N / rho) of it: (1 - H) from storage,
                     H (N - 1) / N from peers over the NIC (bandwidth W), in parallel:
                     max((1 - H) s / S_n, H (N - 1) / N x s / W) seconds a sample

Checked against the measurement: the storage fraction it predicts for N = 2 and 4 is set
beside the one measured after the first epoch. Not modelled: the exchange's CPU cost, its
all-gather of requests (O(N) a round per rank), congestion, and the per-node cache's filling
over several epochs (it caches only what its node drew). Sources of the figures:
docs/cluster_cache.md "Projection".
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from benchmarks.harness import input_path, run_benchmark, settle, utc_date

GBPS = 1e9 / 8   # bytes/s in one gigabit/s
# (name, storage bytes/s per node, aggregate cap of the store or None, source)
STORAGE = (
    ("object store, 10 Gbps egress cap per account", 1 * GBPS, 10 * GBPS,
     "Akamai Object Storage: model applications for 1 Gbps; default egress 10 Gbps per "
     "account and endpoint (E2/E3)"),
    ("S3 from a c5n.4xlarge", 2851e6, None,
     "dvassallo/s3-benchmark (2019): max S3 download 2,851 MB/s on c5n.4xlarge"),
)
NETWORK = (("10 Gbps NIC", 10 * GBPS), ("100 Gbps NIC", 100 * GBPS))   # Zhang et al. 2020
NODES = (8, 16, 32, 64, 128, 256)
NO_CACHE, PER_NODE, PARTITIONED = "no cache", "per node", "partitioned"
COLUMNS = (  # (column, mode, epoch)
    ("no cache", NO_CACHE, math.inf), ("per node, epoch 10", PER_NODE, 10),
    ("per node, filled", PER_NODE, math.inf), ("partitioned", PARTITIONED, math.inf))
QUICK = {"ratios": [2.0]}


def held_by_node(nodes: int, ratio: float, epoch: float) -> float:
    """The fraction of the dataset a per-node cache holds at the start of `epoch`: what its
    node drew in the epochs before (a random 1/N each), up to its budget's 1/rho."""
    drawn = 1.0 if math.isinf(epoch) else 1 - (1 - 1 / nodes) ** epoch
    return min(1 / ratio, drawn)


def storage_fraction(mode: str, nodes: int, ratio: float, epoch: float = math.inf) -> float:
    """The fraction of epoch `epoch`'s samples read from storage (epoch >= 1)."""
    if mode == NO_CACHE:
        return 1.0
    if mode == PER_NODE:
        return 1 - held_by_node(nodes, ratio, epoch)
    return max(0.0, 1 - nodes / ratio)


def per_sample_seconds(mode: str, nodes: int, ratio: float, epoch: float, size: float,
                       storage: float, network: float) -> float:
    """Seconds of fetching per sample on one node (0: nothing to fetch): storage and peers'
    bytes both cross the node's NIC; storage's also its share of the store."""
    from_storage = storage_fraction(mode, nodes, ratio, epoch)
    from_peers = 0.0 if mode != PARTITIONED else (1 - from_storage) * (nodes - 1) / nodes
    return max(from_storage * size / storage, (from_storage + from_peers) * size / network)


def img_per_s(seconds: float) -> float | None:
    """The rate fetching allows; None where nothing is fetched (no I/O bound)."""
    return None if seconds == 0 else 1 / seconds


def project(size: float, ratios: list[float]) -> list[dict]:
    rows = []
    for name, per_node, aggregate, _ in STORAGE:
        for network_name, network in NETWORK:
            for ratio in ratios:
                for nodes in NODES:
                    storage = min(per_node, aggregate / nodes) if aggregate else per_node
                    rows.append({"storage": name, "network": network_name, "ratio": ratio,
                                 "nodes": nodes, "storage_per_node": storage, **{
                                     column: img_per_s(per_sample_seconds(
                                         mode, nodes, ratio, epoch, size, storage, network))
                                     for column, mode, epoch in COLUMNS},
                                 "partitioned_storage_fraction":
                                     storage_fraction(PARTITIONED, nodes, ratio)})
    return rows


def checks(measured: dict) -> list[dict]:
    """Per measured job and budget: the storage fraction after epoch 0, model and measured."""
    out = []
    for world, job in measured["jobs"].items():
        for row in job["rows"]:
            if row["epoch"] == 0 or row["ratio"] is None:
                continue
            out.append({"nodes": int(world), "contender": row["contender"],
                        "ratio": row["ratio"], "epoch": row["epoch"],
                        "model": storage_fraction(row["contender"], int(world), row["ratio"],
                                                  row["epoch"]),
                        "measured": row["storage_reads"] / row["samples"]})
    return out


def run(args: argparse.Namespace) -> dict:
    path = args.measured or input_path("cluster_cache", args.quick)
    measured = json.loads(Path(path).read_text())
    size = measured["dataset_bytes"] / measured["count"]
    return {"date": utc_date(), "label": "PROJECTION", "measured_from": str(path),
            "sample_bytes": size, "ratios": args.ratios,
            "sources": {name: source for name, _, _, source in STORAGE},
            "rows": project(size, args.ratios), "checks": checks(measured)}


def rate(value: float | None) -> str:
    return "no limit" if value is None else f"{value:,.0f}"


def tables(results: dict) -> list[str]:
    """The projection as markdown tables, one per storage and network."""
    lines = []
    for name, _, _, source in STORAGE:
        for network_name, _ in NETWORK:
            lines += ["", f"PROJECTION, {name}, {network_name} ({source}): I/O-bound img/s "
                      "per node", "",
                      "| nodes | dataset / budget | " + " | ".join(c for c, _, _ in COLUMNS)
                      + " | partitioned from storage |",
                      "|---|---|" + "---|" * (len(COLUMNS) + 1)]
            for row in results["rows"]:
                if (row["storage"], row["network"]) == (name, network_name):
                    lines.append(f"| {row['nodes']} | {row['ratio']:g}x | " + " | ".join(
                        rate(row[c]) for c, _, _ in COLUMNS)
                        + f" | {row['partitioned_storage_fraction']:.0%} |")
    return lines


def report(results: dict) -> None:
    print(f"\nPROJECTION (not measured), {results['sample_bytes'] / 1e3:.1f} KB a sample "
          "(the measured set's mean)")
    print("\n".join(tables(results)))
    print("\nmodel vs measured storage fraction after epoch 0:")
    for check in results["checks"]:
        print(f"  N {check['nodes']} {check['contender']:12s} rho {check['ratio']:g} "
              f"epoch {check['epoch']}: model {check['model']:.2f}, "
              f"measured {check['measured']:.2f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_cache_projection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--ratios", type=float, nargs="+", default=[2.0, 16.0],
                        help="the dataset's encoded bytes over one node's budget")
    parser.add_argument("--measured", type=Path, default=None,
                        help="cluster_cache.py's JSON (default: this run's, else the committed)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    return settle(parser.parse_args(argv), "cluster_cache_projection", QUICK)


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
