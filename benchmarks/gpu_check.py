"""The checks that need a GPU, as one short script (for a machine lent with CUDA).

1. Pinned slots: `PIMDataLoader(pin_memory=True)` with 0 and 2 workers gives batches that
   `is_pinned()`, equal to torch's DataLoader's, and their `non_blocking` copies to the GPU
   arrive intact. Checked, not timed.
2. Host-to-GPU copy bandwidth of a lent batch against a pageable copy of it (medians).
3. End-to-end training steps: a small convolutional network trained on the ImageNet-like
   photos (training pipeline, float16 input) fed by torch's DataLoader + torchvision and by
   PIMDataLoader, images/s of whole steps (load + copy + forward + backward + update).

Exits with status 1 if a check fails; prints a JSON summary last.

    python -m benchmarks.gpu_check [--count 256] [--steps 20]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.imagenet_pipeline import Group, make_loader
from benchmarks.make_dataset import DATA_DIR, make_imagenet_like
from pimloader import PIMDataLoader


def check_pinned(num_workers: int) -> dict:
    data = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    dataset = TensorDataset(data, torch.arange(64))
    options = dict(batch_size=16, num_workers=num_workers, pin_memory=True,
                   persistent_workers=num_workers > 0)
    if num_workers:
        options["multiprocessing_context"] = "fork"
    want = list(DataLoader(dataset, **options))
    got = list(PIMDataLoader(dataset, **options))
    pinned = all(images.is_pinned() for images, _ in got)
    equal = all(torch.equal(a, b) and torch.equal(la, lb)
                for (a, la), (b, lb) in zip(got, want))
    copies = [images.cuda(non_blocking=True) for images, _ in got]
    torch.cuda.synchronize()
    intact = all(torch.equal(copy.cpu(), images) for copy, (images, _) in zip(copies, got))
    return {"workers": num_workers, "pinned": pinned, "equal_to_torch": equal,
            "non_blocking_copies_intact": intact, "ok": pinned and equal and intact}


def copy_bandwidth(batch: torch.Tensor, repeats: int = 20) -> dict:
    """GB/s of copying `batch` to the GPU from where it lies, and from a pageable copy."""
    pageable = batch.clone()
    rates = {}
    for name, source in (("lent", batch), ("pageable", pageable)):
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            source.cuda(non_blocking=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        rates[name + "_GBps"] = batch.numel() * batch.element_size() / statistics.median(times) / 1e9
    return rates


def small_network() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 7, stride=4), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))


def training_rate(loader, steps: int) -> float:
    """Images/s of whole training steps, after two warm-up steps."""
    model = small_network().cuda().half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen, done, start = 0, 0, None
    while done < steps + 2:
        for images, labels in loader:
            images = images.cuda(non_blocking=True)
            labels = labels.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(images).float(), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done += 1
            if done == 2:
                torch.cuda.synchronize()
                start, seen = time.perf_counter(), 0
            elif done > 2:
                seen += images.shape[0]
            if done == steps + 2:
                break
    torch.cuda.synchronize()
    return seen / (time.perf_counter() - start)


def training_rates(count: int, steps: int, workers: int) -> dict:
    root = make_imagenet_like(DATA_DIR / "imagenet_like_gpu_check", count=count)
    group = Group("train", "float16", workers, persistent=workers > 0)
    rates = {name: training_rate(make_loader(name, root, group, 64, pin_memory=True), steps)
             for name in ("torchvision", "pimloader")}
    rates["ratio"] = rates["pimloader"] / rates["torchvision"]
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=256, help="photos to train on")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1
    summary = {"device": torch.cuda.get_device_name(),
               "pinned": [check_pinned(0), check_pinned(2)]}
    batch = next(iter(PIMDataLoader(
        TensorDataset(torch.zeros(512, 3, 224, 224, dtype=torch.uint8)), batch_size=256,
        pin_memory=True)))[0]
    summary["copy"] = copy_bandwidth(batch)
    summary["training"] = training_rates(args.count, args.steps, args.workers)
    print(json.dumps(summary, indent=1))
    return 0 if all(check["ok"] for check in summary["pinned"]) else 1


if __name__ == "__main__":
    sys.exit(main())
