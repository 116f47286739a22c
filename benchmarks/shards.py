"""Shards and tables: images/s of the training pipeline over the same photos stored as
webdataset tar shards (local disk, and over HTTP from nginx at a rate limit) and as a
Hugging Face Arrow dataset, PIMDataLoader against each format's own loader.

The photos are the ImageNet-like set of make_dataset.py, written here as shards with
`webdataset.ShardWriter` (`--shard-size` samples each) and as a `datasets` Arrow dataset
(`Image(decode=False)`, `save_to_disk`). Every contender runs the training pipeline
(RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype(float32, scale=True), Normalize),
shuffled, `--workers` workers, the same batch size:

- "webdataset + torchvision": torch's DataLoader over `wds.WebDataset(urls,
  shardshuffle=...).shuffle(500).to_tuple("jpg;png", "cls")`, each sample decoded by
  torchvision's `decode_image` and transformed by the v2 pipeline (`.map_tuple`);
- "pimloader (webdataset pipeline)": PIMDataLoader over that same webdataset pipeline
  without the map, `transform=T.Compose([T.Decode(), <the v2 steps>])`;
- "pimloader TarShards": PIMDataLoader over `pimloader.TarShards(urls)` with a
  `ShardOrderSampler` (shards shuffled, each read forward), the same transform;
- "DALI webdataset" (local only; where nvidia-dali is installed): `fn.readers.webdataset`
  (random shuffle) then DALI's training steps of peer_dali.py, on the CPU;
- "datasets + torchvision": torch's DataLoader over the Arrow dataset `with_transform`
  decoding each row's bytes with `decode_image` and running the v2 pipeline;
- "pimloader ArrowColumns": PIMDataLoader over `ArrowColumns(dataset, "image", "label")`,
  shuffled, with `T.Decode()` first;
- "pimloader TarShards, seekable cache" and "pimloader ArrowColumns, seekable cache": the
  same with `cache_bytes` (the set's bytes and a quarter) and `cache_seekable=True`: the
  first epoch copies each JPEG into the cache with restart markers (the warm-up epoch:
  its rate is reported as "first epoch"), the others read the copies from shared memory
  and decode each crop from the intervals around it.

"local seekable" runs the local contenders again, every one over the same seekable copy of
the shards (`pimloader.datasets.make_seekable_shards`, made once under `--data`: JPEG
members rewritten losslessly with restart markers, the same pixels), so that the ratios
compare loaders on identical inputs; pimloader's decoder then decodes each crop from the
restart intervals around it. "http seekable" serves that copy as "http" serves the shards,
and "arrow seekable" does the same for the Arrow dataset
(`pimloader.datasets.make_seekable_arrow`). `--no-seekable` leaves these out.

Over HTTP the shards are served by nginx (Debian's package; `python -m http.server` where it
is absent) on a loopback port with `limit_rate` per connection (`--rate`, nginx's only
bandwidth limit: each worker's stream is limited, not their sum), files sent in 256 KB
pieces so that the limit holds (http_store.py).

Contenders of one storage run in one process, one epoch each in rotating order, after
`--warmup` epochs; figures are medians over `--epochs` epochs, with the load average, and
the CPU time per image of the benchmark process and all its children (workers, nginx;
benchmarks/cpu_time.py), the figure that load stretches least.

    python -m benchmarks.shards [--count 600] [--epochs 3] [--quick] [--no-seekable]
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from benchmarks.cpu_time import CpuClock
from benchmarks.harness import (RunWindow, close_loader, interleaved, local_date, machine,
                                run_benchmark, settle, warnings_once)
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.pipelines import decode_rgb, make_transform

warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities",
                        category=DeprecationWarning)

QUICK = {"count": 48, "classes": 4, "shard_size": 12, "epochs": 2, "warmup": 1,
         "batch_size": 16}
WDS_TORCHVISION = "webdataset + torchvision"
PIM_WDS = "pimloader (webdataset pipeline)"
PIM_SHARDS = "pimloader TarShards"
DALI_WDS = "DALI webdataset"
HF_TORCHVISION = "datasets + torchvision"
PIM_ARROW = "pimloader ArrowColumns"
PIM_SHARDS_CACHED = "pimloader TarShards, seekable cache"
PIM_ARROW_CACHED = "pimloader ArrowColumns, seekable cache"
PIM_SHARDS_UNINDEXED = "pimloader TarShards, no seek indexes"
PIM_ARROW_UNINDEXED = "pimloader ArrowColumns, no seek indexes"
UNINDEXED = {PIM_SHARDS_UNINDEXED: PIM_SHARDS, PIM_ARROW_UNINDEXED: PIM_ARROW}
LOCAL = [WDS_TORCHVISION, PIM_WDS, PIM_SHARDS, PIM_SHARDS_UNINDEXED, PIM_SHARDS_CACHED, DALI_WDS]
ARROW = [HF_TORCHVISION, PIM_ARROW, PIM_ARROW_UNINDEXED, PIM_ARROW_CACHED]
HTTP = [WDS_TORCHVISION, PIM_WDS, PIM_SHARDS, PIM_SHARDS_UNINDEXED, PIM_SHARDS_CACHED]
BASELINES = {"local": WDS_TORCHVISION, "local seekable": WDS_TORCHVISION,
             "http": WDS_TORCHVISION, "http seekable": WDS_TORCHVISION,
             "arrow": HF_TORCHVISION, "arrow seekable": HF_TORCHVISION}


# -- the data -----------------------------------------------------------------------------

def write_shards(photos: Path, out: Path, shard_size: int) -> list[str]:
    """The photos as webdataset shards (jpg or png + cls), written once."""
    from benchmarks import make_shards
    return make_shards.write_shards("images", make_shards.samples_of("images", photos), out,
                                    shard_size)


def write_seekable_shards(urls: list[str], out: Path) -> list[str]:
    """The shards' seekable copy (JPEG members with restart markers), written once."""
    from benchmarks import make_shards
    return make_shards.write_seekable_shards(urls, out)


def write_arrow(photos: Path, out: Path) -> Path:
    """The photos as a Hugging Face Arrow dataset with their bytes embedded, written once."""
    from benchmarks import make_shards
    return make_shards.write_arrow("images", make_shards.samples_of("images", photos), out)


# -- the contenders -----------------------------------------------------------------------

def torchvision_sample(pipeline):
    def transformed(data):
        return pipeline(decode_rgb(bytearray(data)))
    return transformed


def wds_pipeline(urls: list[str], seed: int):
    import webdataset as wds
    return wds.WebDataset(urls, shardshuffle=len(urls), seed=seed,
                          empty_check=False).shuffle(500).to_tuple("jpg;png", "cls")


def pim_transform():
    from pimloader import transforms as T
    return T.Compose([T.Decode(), *make_transform("train", "float32").transforms])


def make_loader(name: str, store: dict, args) -> object:
    """The loader of contender `name` over the store's shards or table."""
    from pimloader import PIMDataLoader
    common = dict(batch_size=args.batch_size, num_workers=args.workers,
                  persistent_workers=args.workers > 0)
    if name in UNINDEXED:   # the same loader as written, its seek indexes turned off
        return make_loader(UNINDEXED[name], dict(store, seek_index_bytes=0), args)
    if name == WDS_TORCHVISION:
        steps = wds_pipeline(store["urls"], 0).map_tuple(
            torchvision_sample(make_transform("train", "float32")), int)
        return DataLoader(steps, **common)
    if name == PIM_WDS:
        return PIMDataLoader(wds_pipeline(store["urls"], 0), transform=pim_transform(),
                             **common)
    if name in (PIM_SHARDS, PIM_SHARDS_CACHED):
        from pimloader import ShardOrderSampler, TarShards
        shards = TarShards(store["urls"], keys=("jpg;png", "cls"))
        return PIMDataLoader(shards, sampler=ShardOrderSampler(shards, window=4, seed=0),
                             transform=pim_transform(), **common, **seek_indexes(store),
                             **seekable_cache(store, name == PIM_SHARDS_CACHED))
    if name == DALI_WDS:
        from benchmarks.peer_dali_shards import DaliShardLoader
        return DaliShardLoader(store["urls"], args.batch_size, max(1, args.workers), seed=0)
    if name == HF_TORCHVISION:
        return DataLoader(hf_table(store["arrow"]), shuffle=True, **common)
    if name in (PIM_ARROW, PIM_ARROW_CACHED):
        from pimloader.datasets import ArrowColumns
        return PIMDataLoader(ArrowColumns(hf_table(store["arrow"], raw=True), "image", "label"),
                             shuffle=True, transform=pim_transform(), **common,
                             **seek_indexes(store),
                             **seekable_cache(store, name == PIM_ARROW_CACHED))
    raise ValueError(f"unknown contender {name!r}")


def seek_indexes(store: dict) -> dict:
    """seek_index_bytes=0 for an "no seek indexes" contender; the default otherwise."""
    return {"seek_index_bytes": 0} if store.get("seek_index_bytes") == 0 else {}


def seekable_cache(store: dict, cached: bool) -> dict:
    """The cache arguments of a "seekable cache" contender: room for the whole set."""
    if not cached:
        return {}
    return {"cache_bytes": store["set_bytes"] * 5 // 4 + (1 << 20), "cache_seekable": True}


def hf_table(path: Path, raw: bool = False):
    """The Arrow dataset; unless `raw`, with datasets' with_transform decoding and
    transforming each row as torchvision does (the map-style peer)."""
    import datasets
    table = datasets.load_from_disk(str(path))
    if raw:
        return table
    sample = torchvision_sample(make_transform("train", "float32"))

    def rows(batch):
        return {"image": [sample(cell["bytes"]) for cell in batch["image"]],
                "label": batch["label"]}
    return _Rows(table.with_transform(rows))


class _Rows(torch.utils.data.Dataset):
    """A `datasets` table's rows as (image, label) pairs, as a training loop takes them."""

    def __init__(self, table):
        self.table = table

    def __len__(self):
        return len(self.table)

    def __getitem__(self, index):
        row = self.table[index]
        return row["image"], row["label"]


def missing(name: str) -> str | None:
    """Why contender `name` cannot run here (None: it can)."""
    needs = {DALI_WDS: "nvidia.dali", HF_TORCHVISION: "datasets", PIM_ARROW: "datasets",
             PIM_ARROW_CACHED: "datasets", PIM_ARROW_UNINDEXED: "datasets"}
    module = needs.get(name, "webdataset")
    try:
        __import__(module)
    except ImportError as error:
        return f"{module} not installed ({error})"
    return None


# -- measuring ----------------------------------------------------------------------------

def run_epoch(loader) -> tuple[float, int]:
    """(seconds, samples) of one epoch, every batch touched as a training step would."""
    start, samples = time.perf_counter(), 0
    for images, labels in loader:
        samples += len(labels)
        images.sum().item()
    return time.perf_counter() - start, samples


def measure(names: list[str], store: dict, args) -> list[dict]:
    """Images/s of each contender, epochs interleaved, medians after the warm-up."""
    loaders = {name: make_loader(name, store, args) for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, float] = {}
    counts: dict[str, int] = {}
    try:
        for round_index in range(args.warmup + args.epochs):
            for name in interleaved(names, round_index):
                clock = CpuClock().start()
                elapsed, counts[name] = run_epoch(loaders[name])
                used = clock.elapsed()
                first.setdefault(name, elapsed)
                if round_index >= args.warmup:
                    seconds[name].append(elapsed)
                    cpu[name].append(used)
    finally:
        for loader in loaders.values():
            close_loader(loader)
    return [{"contender": name, "samples": counts[name], "epoch_s": seconds[name],
             "images_per_s": counts[name] / statistics.median(seconds[name]),
             "cpu_ms_per_image": 1e3 * statistics.median(cpu[name]) / counts[name],
             "first_epoch_images_per_s": counts[name] / first[name]}
            for name in names]


def with_ratios(rows: list[dict], baseline: str) -> list[dict]:
    base = next((row["images_per_s"] for row in rows if row["contender"] == baseline), None)
    for row in rows:
        row["vs_baseline"] = None if base is None else row["images_per_s"] / base
    return rows


def storage_runs(args, photos: Path) -> dict:
    """{storage: its contenders' rows (or why a contender is missing)}."""
    urls = write_shards(photos, args.data / "shards", args.shard_size)
    runs = {}
    plans = {"local": LOCAL, "local seekable": as_seekable(LOCAL) if args.seekable else None,
             "arrow": ARROW, "arrow seekable": as_seekable(ARROW) if args.seekable else None}
    for storage, names in plans.items():
        if names is None:
            continue
        runs[storage] = run_storage(storage, names, _store(storage, urls, args, photos), args)
    served = {"http": urls}
    if args.seekable:
        served["http seekable"] = write_seekable_shards(urls, args.data / "shards-seekable")
    for storage, shard_paths in served.items():
        runs[storage] = http_run(storage, shard_paths, args)
    return runs


def as_seekable(names: list[str]) -> list[str]:
    """The contenders over a seekable copy: seek indexes change nothing there (its JPEGs
    have restart markers), so no "no seek indexes" twin."""
    return [name for name in names if name not in UNINDEXED]


def http_run(storage: str, shard_paths: list[str], args) -> dict:
    """The HTTP contenders over `shard_paths` served by nginx (or http.server) at the rate."""
    from benchmarks.http_store import static_server
    shard_root = Path(shard_paths[0]).parent
    with static_server(shard_root, args.data / f"nginx-{shard_root.name}",
                       limit_rate=args.rate) as server:
        http_urls = [f"{server.url}/{Path(url).name}" for url in shard_paths]
        kind = server.kind + (f" limit_rate {args.rate}" if server.kind == "nginx" else
                              " (no rate limit)")
        names = HTTP if storage == "http" else as_seekable(HTTP)
        return run_storage(storage, names, {"urls": http_urls, "server": kind,
                                           "set_bytes": files_bytes(shard_paths)}, args)


def _store(storage: str, urls: list[str], args, photos: Path) -> dict:
    if storage == "local seekable":
        urls = write_seekable_shards(urls, args.data / "shards-seekable")
    if storage.startswith("arrow"):
        if missing(HF_TORCHVISION) is not None:
            return {}
        arrow = write_arrow(photos, args.data / "arrow")
        if storage == "arrow seekable":
            from benchmarks import make_shards
            arrow = make_shards.write_seekable_arrow(arrow, args.data / "arrow-seekable")
        return {"arrow": arrow, "set_bytes": files_bytes(urls)}
    return {"urls": urls, "set_bytes": files_bytes(urls)}


def files_bytes(paths: list[str]) -> int:
    """The bytes of these files (the shards: the set's encoded bytes, and their headers)."""
    return sum(Path(path).stat().st_size for path in paths)


def run_storage(storage: str, names: list[str], store: dict, args) -> dict:
    absent = {name: why for name in names if (why := missing(name)) is not None}
    present = [name for name in names if name not in absent]
    window = RunWindow()
    print(f"-- {storage}: {', '.join(present)}", flush=True)
    rows = with_ratios(measure(present, store, args), BASELINES[storage]) if present else []
    return {"rows": rows, "missing": absent, "server": store.get("server"),
            **window.load_and_wall()}


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(1)
    photos = make_imagenet_like(args.data / "photos", count=args.count, classes=args.classes)
    with warnings_once():
        runs = storage_runs(args, photos)
    return {"date": local_date(), "machine": machine(), "count": args.count,
            "shard_size": args.shard_size, "workers": args.workers,
            "batch_size": args.batch_size, "epochs": args.epochs, "warmup": args.warmup,
            "rate_per_connection": args.rate, "runs": runs}


def report(results: dict) -> None:
    for storage, run_ in results["runs"].items():
        load = run_["loadavg_before"][0], run_["loadavg_after"][0]
        print(f"\n{storage} (load {load[0]:.1f} -> {load[1]:.1f}"
              f"{', ' + run_['server'] if run_.get('server') else ''})")
        for row in run_["rows"]:
            ratio = "" if row["vs_baseline"] is None else f"  {row['vs_baseline']:.2f}x"
            print(f"  {row['contender']:38s} {row['images_per_s']:8.1f} img/s{ratio}"
                  f"  ({row['cpu_ms_per_image']:.2f} ms CPU per image; first epoch "
                  f"{row['first_epoch_images_per_s']:.0f} img/s)")
        for name, why in run_["missing"].items():
            print(f"  {name:38s} not run: {why}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shards",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=600, help="photos in the set")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--shard-size", type=int, default=100, help="samples per shard")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per contender")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rate", default="100m",
                        help="nginx limit_rate per connection over HTTP (default 100m: 100 MB/s)")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-seekable", dest="seekable", action="store_false",
                        help="leave out the local contenders over the shards' seekable copy")
    parser.add_argument("--quick", action="store_true")
    return settle(parser.parse_args(argv), "shards", QUICK, data="shards")


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(parse_args(argv), run, report)


if __name__ == "__main__":
    main()
