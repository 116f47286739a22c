"""The partitioned cluster cache (cache_scope="cluster") against no cache and a per-node
cache, measured with 2 and 4 "nodes" on this machine over a rate-limited HTTP store; then
a PROJECTION to 8-256 nodes (cluster_cache_projection.py).

    python -m benchmarks.cluster_cache [--count 240] [--nodes 2 4] [--rate 2m] [--quick]

Storage: the photos of make_dataset.py as webdataset shards (`--shard-size` samples each),
served by nginx on loopback with `limit_rate` per connection (`--rate`, http_store.py),
read with `pimloader.TarShards` (Range requests; its index is built once by this process,
so the ranks find it in `--data`/index). Each "node" is one rank, launched by its own
torchrun agent (`--nnodes=N --nproc-per-node=1 --node-rank=i`, a static rendezvous on
127.0.0.1; `--launcher spawn`: torch.multiprocessing instead), gloo, one worker per rank, its cache a namespace of
its own (`ClusterScope(nodes=N, node=rank, local_ranks=1)`); a DistributedSampler
(shuffled, seed 0) and the training pipeline of shards.py (`T.Decode()`,
RandomResizedCrop(224), flip, ToDtype, Normalize). Three contenders, each `--epochs`
epochs, one after another in one job per N:

  no cache:      every sample from the store, every epoch;
  per node:      cache_bytes=budget, cache_scope="loader" (each node its own MinIO cache);
  partitioned:   cache_bytes=budget, cache_scope="cluster".

The budget is one node's: the dataset's encoded bytes over `--ratios` (0.5, 1, 2: the
dataset at half, once and twice one node's budget). Per epoch and contender: bytes read
from storage (summed over ranks: cache_miss_bytes + cluster_storage_bytes; without a cache,
the bytes of the samples the rank's sampler drew), bytes exchanged between nodes
(cluster_received_bytes summed) and img/s per node (a rank's samples over its epoch's
seconds, each epoch started at a barrier; mean and slowest over nodes). The machine's load
average is recorded around each job: on a shared machine the img/s are indicative, the byte
counts exact.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import RunWindow, local_date, machine, run_benchmark, settle

QUICK = {"count": 24, "classes": 3, "shard_size": 8, "epochs": 2, "nodes": [2],
         "ratios": [0.5, 2.0], "batch_size": 4}
NO_CACHE, PER_NODE, PARTITIONED = "no cache", "per node", "partitioned"
CONTENDERS = (NO_CACHE, PER_NODE, PARTITIONED)
JOB_TIMEOUT_S = 900


# -- one rank -------------------------------------------------------------------------------

def rank_main(rank: int, world: int, init_method: str, job: dict, out_dir: str) -> None:
    """One "node": every plan of the job, its epochs' counts to out_dir/rank{rank}.json.
    `init_method`: a tcp:// address (spawned ranks), or env:// (torchrun's environment)."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    try:
        rows = [run_plan(plan, rank, world, job) for plan in job["plans"]]
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(rows))
        dist.barrier()   # rank 0 hosts the store: it leaves last
    finally:
        dist.destroy_process_group()


def run_plan(plan: dict, rank: int, world: int, job: dict) -> dict:
    """The epochs of one contender at one budget on this rank."""
    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler
    from benchmarks.shards import pim_transform
    from pimloader import ClusterScope, PIMDataLoader, TarShards
    shards = TarShards(job["urls"], keys=("jpg;png", "cls"), cache_dir=job["index_dir"])
    sampler = DistributedSampler(shards, num_replicas=world, rank=rank, shuffle=True, seed=0)
    scope = {NO_CACHE: "loader", PER_NODE: "loader"}.get(plan["contender"]) or ClusterScope(
        nodes=world, node=rank, local_rank=0, local_ranks=1,
        staging_bytes=job["staging_bytes"], timeout_s=300)
    loader = PIMDataLoader(shards, batch_size=job["batch_size"], sampler=sampler,
                           num_workers=1, multiprocessing_context="fork",
                           persistent_workers=True, transform=pim_transform(),
                           cache_bytes=plan["budget"], cache_scope=scope)
    epochs = []
    try:
        for epoch in range(job["epochs"]):
            sampler.set_epoch(epoch)
            drawn = sum(job["sizes"][i] for i in sampler)
            dist.barrier()
            start, samples = time.perf_counter(), 0
            for images, labels in loader:
                samples += len(labels)
            epochs.append({"seconds": time.perf_counter() - start, "samples": samples,
                           "drawn_bytes": drawn})
    finally:
        loader.close()   # the last epoch's exchange ends: its counts are final
    for row, stats in zip(epochs, loader.stats()):
        row.update(storage_reads=stats.cache_misses + stats.cluster_storage_reads,
                   storage_bytes=stats.cache_miss_bytes + stats.cluster_storage_bytes,
                   received=stats.cluster_received, received_bytes=stats.cluster_received_bytes)
        if plan["contender"] == NO_CACHE:   # no cache counts nothing: all was drawn from storage
            row.update(storage_reads=row["samples"], storage_bytes=row["drawn_bytes"])
    return {**plan, "epochs": epochs}


# -- one job of N nodes ---------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_job(world: int, job: dict, launcher: str = "torchrun") -> list[list[dict]]:
    """Launch `world` ranks for the job, one per "node": torchrun agents (one per node, a
    static rendezvous on 127.0.0.1) or spawned processes; per rank, its plans' rows. A rank
    that fails or hangs fails the job (its peers are ended, nothing left running)."""
    with tempfile.TemporaryDirectory(prefix="cluster_cache_bench_") as out_dir:
        if launcher == "torchrun":
            _torchrun_job(world, job, out_dir)
        else:
            _spawned_job(world, job, out_dir)
        return [json.loads(Path(out_dir, f"rank{rank}.json").read_text())
                for rank in range(world)]


def _torchrun_job(world: int, job: dict, out_dir: str) -> None:
    """`torchrun --nnodes=world --nproc-per-node=1 --node-rank=i` for each node i, on
    loopback, each running benchmarks.cluster_cache_rank over the job's file."""
    job_file = Path(out_dir, "job.json")
    job_file.write_text(json.dumps(job))
    port = free_port()
    repo = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [repo, *filter(None, [os.environ.get("PYTHONPATH")])])}
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", f"--nnodes={world}",
         "--nproc-per-node=1", f"--node-rank={node}", "--master-addr=127.0.0.1",
         f"--master-port={port}", "-m", "benchmarks.cluster_cache_rank", str(job_file),
         out_dir], cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for node in range(world)]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    errors = []
    for node, agent in enumerate(agents):
        try:
            _, stderr = agent.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            agent.kill()
            _, stderr = agent.communicate()
        if agent.returncode != 0:
            errors.append(f"node {node}: exit {agent.returncode}: "
                          f"{stderr.decode(errors='replace')[-2000:]}")
    if errors:
        raise RuntimeError(f"the {world}-node torchrun job failed: " + "; ".join(errors))


def _spawned_job(world: int, job: dict, out_dir: str) -> None:
    import torch.multiprocessing as tmp
    context = tmp.start_processes(
        rank_main, args=(world, f"tcp://127.0.0.1:{free_port()}", job, out_dir),
        nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + JOB_TIMEOUT_S
    for process in context.processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in context.processes:
        if process.is_alive():
            process.kill()
            process.join()
    codes = [process.exitcode for process in context.processes]
    if any(code != 0 for code in codes):
        raise RuntimeError(f"the {world}-node job failed: exit codes {codes}")


def summarize(per_rank: list[list[dict]]) -> list[dict]:
    """Per plan and epoch: storage and exchange bytes summed over nodes, img/s per node."""
    rows = []
    for plan_rows in zip(*per_rank):
        plan = {key: plan_rows[0][key] for key in ("contender", "ratio", "budget")}
        for epoch, ranks in enumerate(zip(*(row["epochs"] for row in plan_rows))):
            rates = [r["samples"] / r["seconds"] for r in ranks]
            rows.append({**plan, "epoch": epoch,
                         "samples": sum(r["samples"] for r in ranks),
                         "storage_reads": sum(r["storage_reads"] for r in ranks),
                         "storage_bytes": sum(r["storage_bytes"] for r in ranks),
                         "exchanged": sum(r["received"] for r in ranks),
                         "exchanged_bytes": sum(r["received_bytes"] for r in ranks),
                         "img_per_s_per_node": sum(rates) / len(rates),
                         "img_per_s_slowest_node": min(rates)})
    return rows


def plans(dataset_bytes: int, ratios: list[float]) -> list[dict]:
    """No cache once, then each cache at each budget (the dataset at `ratio` x budget)."""
    out = [{"contender": NO_CACHE, "ratio": None, "budget": 0}]
    for contender in (PER_NODE, PARTITIONED):
        out += [{"contender": contender, "ratio": ratio, "budget": int(dataset_bytes / ratio)}
                for ratio in ratios]
    return out


# -- the run --------------------------------------------------------------------------------

def dataset(args) -> tuple[list[str], list[int]]:
    """The shards' paths and each sample's encoded image bytes (the index built here once)."""
    from benchmarks.make_dataset import make_imagenet_like
    from benchmarks.shards import write_shards
    from pimloader import TarShards
    photos = make_imagenet_like(args.data / "photos", count=args.count, classes=args.classes)
    paths = write_shards(photos, args.data / "shards", args.shard_size)
    with TarShards(paths, keys=("jpg;png", "cls")) as shards:
        sizes = [shards.index.member(i, 0)[1] for i in range(len(shards))]
    return paths, sizes


def run(args: argparse.Namespace) -> dict:
    from benchmarks.http_store import static_server
    from pimloader import TarShards
    paths, sizes = dataset(args)
    dataset_bytes = sum(sizes)
    jobs = {}
    with static_server(Path(paths[0]).parent, args.data / "nginx",
                       limit_rate=args.rate) as server:
        urls = [f"{server.url}/{Path(path).name}" for path in paths]
        TarShards(urls, keys=("jpg;png", "cls"), cache_dir=str(args.data / "index")).close()
        job = {"urls": urls, "index_dir": str(args.data / "index"), "sizes": sizes,
               "epochs": args.epochs, "batch_size": args.batch_size,
               "staging_bytes": args.staging_mib << 20,
               "plans": plans(dataset_bytes, args.ratios)}
        for world in args.nodes:
            window = RunWindow()
            print(f"-- {world} nodes", flush=True)
            jobs[str(world)] = {"rows": summarize(run_job(world, job, args.launcher)),
                                **window.load_and_wall()}
        kind = server.kind
    return {"date": local_date(), "machine": machine(), "count": args.count,
            "dataset_bytes": dataset_bytes, "shard_size": args.shard_size,
            "epochs": args.epochs, "batch_size": args.batch_size, "workers_per_rank": 1,
            "launcher": args.launcher,
            "store": kind + (f" limit_rate {args.rate}" if kind == "nginx"
                             else " (no rate limit)"),
            "ratios": args.ratios, "jobs": jobs}


def table(job: dict) -> list[str]:
    """The job's rows as a markdown table."""
    lines = ["| contender | dataset / budget | epoch | storage reads | storage MB | "
             "exchanged | exchanged MB | img/s per node (slowest) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in job["rows"]:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:g}x"
        lines.append(f"| {row['contender']} | {ratio} | {row['epoch']} | "
                     f"{row['storage_reads']} | {row['storage_bytes'] / 1e6:.2f} | "
                     f"{row['exchanged']} | {row['exchanged_bytes'] / 1e6:.2f} | "
                     f"{row['img_per_s_per_node']:.1f} ({row['img_per_s_slowest_node']:.1f}) |")
    return lines


def report(results: dict) -> None:
    print(f"\n{results['count']} photos, {results['dataset_bytes'] / 1e6:.2f} MB encoded, "
          f"{results['store']}")
    for world, job in results["jobs"].items():
        load = job["loadavg_before"][0], job["loadavg_after"][0]
        print(f"\n{world} nodes (under load {load[0]:.1f} -> {load[1]:.1f}, "
              f"{job['wall_s']:.0f} s)")
        print("\n".join(table(job)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_cache",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=240, help="photos in the set")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--shard-size", type=int, default=40, help="samples per shard")
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5, 1.0, 2.0],
                        help="the dataset's encoded bytes over one node's budget")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--staging-mib", type=int, default=16,
                        help="each rank's staging ring (ClusterScope.staging_bytes)")
    parser.add_argument("--rate", default="2m",
                        help="nginx limit_rate per connection (default 2m: 2 MB/s, below "
                             "what one worker here decodes, so that storage binds)")
    parser.add_argument("--launcher", choices=("torchrun", "spawn"), default="torchrun",
                        help="how the ranks start: a torchrun agent per node (static "
                             "rendezvous on loopback), or torch.multiprocessing spawn")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    return settle(parser.parse_args(argv), "cluster_cache", QUICK, data="cluster_cache")


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
