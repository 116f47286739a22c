"""Shared by the detection tests: a small COCO set from the benchmark's maker, the oracle
(torchvision's CocoDetection, v2-wrapped, under torch's DataLoader) and comparisons."""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import tv_tensors

from _helpers import assert_same
from benchmarks.make_detection_dataset import make_detection_dataset
from pimloader import PIMDataLoader


def make_coco(root: Path, count: int = 10, empty: int = 1) -> tuple[str, str]:
    """(image folder, annotation file) of a small set; the last `empty` images have no
    annotation."""
    ann_file = make_detection_dataset(root, count=count, seed=3, empty=empty)
    return str(Path(root) / "images"), str(ann_file)


def edit_annotations(ann_file: str, out: Path, edit) -> str:
    """A copy of `ann_file` at `out` after `edit(document)`."""
    document = json.loads(Path(ann_file).read_text())
    edit(document)
    out.write_text(json.dumps(document))
    return str(out)


def torchvision_coco(root, ann_file, transforms=None, target_keys=None, wrapped=True):
    dataset = torchvision.datasets.CocoDetection(root, ann_file, transforms=transforms)
    if wrapped:
        dataset = torchvision.datasets.wrap_dataset_for_transforms_v2(dataset, target_keys)
    return dataset


def collate_list(batch):
    return tuple(zip(*batch))


def batches(loader_class, dataset, seed=7, **kwargs):
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    kwargs.setdefault("collate_fn", collate_list)
    loader = loader_class(dataset, generator=generator, **kwargs)
    got = list(loader)
    return got, loader


def assert_same_samples(got, want, what="samples"):
    """Same structure, types, values, and BoundingBoxes metadata."""
    assert_same(got, want, what)
    for a, b in zip(_leaves(got), _leaves(want)):
        if isinstance(b, tv_tensors.BoundingBoxes):
            assert (a.format, tuple(a.canvas_size)) == (b.format, tuple(b.canvas_size)), what


def _leaves(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def compare(dataset, oracle, **kwargs):
    """PIMDataLoader over `dataset` against torch's DataLoader over `oracle`; returns the
    PIMDataLoader's last epoch stats."""
    want, _ = batches(DataLoader, oracle, **kwargs)
    got, loader = batches(PIMDataLoader, dataset, **kwargs)
    assert_same_samples(got, want, "batches")
    stats = loader.stats()[-1]
    loader.close()
    return stats
