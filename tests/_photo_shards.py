"""Shared by the tests of what a loader keeps across epochs (test_sample_cache_seekable.py,
test_loader_seek_indexes.py): a small set of photos (varied sizes, greyscale and
progressive JPEGs and a PNG among them) as a folder and as tar shards, the training steps,
and the loaders both compare: torch's DataLoader over torchvision's decode + v2 steps, and
PIMDataLoader over the same shards or folder."""
from __future__ import annotations

import os

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import DecodedItems
from _shard_data import Folder, write_wds_shards
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader, TarShards
from pimloader import transforms as T
from pimloader.datasets import ImageFolder

COUNT = 24
KEYS = ("jpeg;jpg;png", "cls")   # make_imagenet_like names its files .JPEG
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_steps(size=48):
    return [v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=COUNT, classes=3)


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    samples = ImageFolder(photos).samples
    keys = [os.path.splitext(os.path.relpath(path, photos))[0] for path, _ in samples]
    return write_wds_shards(Folder(str(photos), samples, keys),
                            tmp_path_factory.mktemp("shards"), per_shard=7)


def shard_loaders(shards, workers: int, **pim_options):
    """(torch's loader, PIMDataLoader) over the shards, shuffled alike, batches of 5."""
    common = dict(batch_size=5, shuffle=True, num_workers=workers,
                  persistent_workers=workers > 0)
    torchvision_loader = torch.utils.data.DataLoader(
        DecodedItems(TarShards(shards, keys=KEYS), train_steps()),
        generator=torch.Generator().manual_seed(0), **common)
    loader = PIMDataLoader(TarShards(shards, keys=KEYS),
                           transform=T.Compose([T.Decode(), *train_steps()]),
                           generator=torch.Generator().manual_seed(0), reduced_dct=False,
                           **common, **pim_options)
    return torchvision_loader, loader


def folder_loader(root, **kw):
    kw.setdefault("batch_size", 5)
    return PIMDataLoader(ImageFolder(root), transform=v2.Compose(train_steps()), shuffle=True,
                         generator=torch.Generator().manual_seed(3), **kw)


def worker_options(num_workers: int, context) -> dict:
    """A loader's worker arguments: none, or `num_workers` persistent ones started by
    `context` ("fork", "spawn")."""
    if not num_workers:
        return dict(num_workers=0)
    return dict(num_workers=num_workers, multiprocessing_context=context,
                persistent_workers=True)


def epochs(loader, count):
    torch.manual_seed(7)
    return [[(images.clone(), labels.clone()) for images, labels in loader]
            for _ in range(count)]
