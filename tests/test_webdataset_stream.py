"""webdataset's own pipeline, as written, handed to PIMDataLoader with T.Decode() first.

`wds.WebDataset(urls).to_tuple("jpg;png", "cls")` yields the members' raw bytes; the loader
pulls a batch of them from each worker's iterator and decodes them natively. Oracle: torch's
DataLoader over the same webdataset pipeline with `decode_image` + the same v2 steps as
Python, under the same seeds (webdataset splits the shards over the workers alike).
"""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import assert_same_batches
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader
from pimloader import transforms as T
from pimloader.datasets import ImageFolder

wds = pytest.importorskip("webdataset")

STEPS = [v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32,
                                                                         scale=True)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    photos = make_imagenet_like(root / "photos", count=20, classes=2)
    pattern = str(root / "shard-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=5, verbose=0) as writer:
        for number, (path, label) in enumerate(ImageFolder(photos).samples):
            suffix = path.rsplit(".", 1)[1].lower().replace("jpeg", "jpg")
            with open(path, "rb") as file:
                writer.write({"__key__": f"{number:05d}", suffix: file.read(),
                              "cls": str(label).encode()})
    return sorted(str(path) for path in root.glob("shard-*.tar"))


def decoded(sample):
    data, label = sample
    return v2.Compose(STEPS)(T.Decode()(data)), label


@pytest.mark.parametrize("workers", [0, 2])
def test_webdataset_as_written(shards, workers):
    def stream():
        return wds.WebDataset(shards, shardshuffle=False, empty_check=False).to_tuple(
            "jpg;png", "cls")
    torch.manual_seed(5)
    want = list(torch.utils.data.DataLoader(stream().map(decoded), batch_size=4,
                                            num_workers=workers))
    torch.manual_seed(5)
    loader = PIMDataLoader(stream(), transform=T.Compose([T.Decode(), *STEPS]), batch_size=4,
                           num_workers=workers, reduced_dct=False)
    got = list(loader)
    assert_same_batches(want, got)
    assert sum(len(labels) for _, labels in got) == 20
    assert loader.stats()[-1].backend == "cpu"
