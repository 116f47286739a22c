"""The loader's seek indexes (seek_index_bytes=, on by default): torchvision's batches over
tar shards and an image folder every epoch with them, 0 and 2 workers (fork and spawn);
an index made the second time a JPEG's crop is decoded and used from then on, by every
worker; a budget that holds a few; none for an IterableDataset's items or a pipeline that
does not crop first; a corrupt file raises naming it, or is skipped, as without them; the
argument checked.

Oracles: torch's DataLoader over torchvision's decode_image + the v2 steps, and the same
PIMDataLoader with seek_index_bytes=0 (itself checked against torchvision elsewhere)."""
from __future__ import annotations

import os

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import assert_same_batches
from _photo_shards import (epochs, folder_loader as plain_folder_loader, photos,  # noqa: F401
                           shard_loaders, shards, train_steps, worker_options)
from pimloader import PIMDataLoader
from pimloader import transforms as T
from pimloader.datasets import ImageFolder
from pimloader.decode import DecodeError, is_jpeg, seek_index


def indexable(root) -> int:
    """How many of the folder's files can have a seek index (the oracle of the counts)."""
    count = 0
    for path, _ in ImageFolder(root).samples:
        with open(path, "rb") as file:
            count += seek_index(file.read()) is not None
    return count


def folder_loader(root, **kw):
    return plain_folder_loader(root, reduced_dct=False, **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_tar_shards_give_torchvision_batches_every_epoch(photos, shards, workers):
    torchvision_loader, loader = shard_loaders(shards, workers)
    for epoch in range(4):   # none, then made, then used
        torch.manual_seed(100 + epoch)
        want = list(torchvision_loader)
        torch.manual_seed(100 + epoch)
        assert_same_batches(list(loader), want, f"epoch {epoch}'s batches")
    stats = loader.stats()
    assert stats[0].seek_indexes_made == stats[0].seek_index_decodes == 0
    made = sum(s.seek_indexes_made for s in stats)
    assert 0 < made <= indexable(photos)
    assert stats[3].seek_index_decodes >= made - stats[3].seek_indexes_made > 0
    loader.close()


@pytest.mark.parametrize("num_workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_an_image_folder_gives_the_loaders_batches_without_them(photos, num_workers, context):
    kw = worker_options(num_workers, context)
    want = epochs(folder_loader(photos, seek_index_bytes=0, **kw), 4)
    loader = folder_loader(photos, **kw)
    got = epochs(loader, 4)
    for epoch, (g, w) in enumerate(zip(got, want)):
        assert_same_batches(g, w, f"epoch {epoch}'s batches")
    stats = loader.stats()
    indexes = loader._pipeline.images.seek_indexes.store.cached()
    # every file looked at twice has an entry: an index, or empty (cannot have one)
    assert sum(length > 0 for length in indexes.values()) == sum(s.seek_indexes_made for s in stats)
    assert sum(s.seek_index_decodes for s in stats[2:]) > 0
    loader.close()


def test_indexes_are_made_once_and_shared_by_the_workers(photos):
    loader = folder_loader(photos, num_workers=2, persistent_workers=True, batch_size=4)
    for _ in range(5):
        list(loader)
    made = sum(s.seek_indexes_made for s in loader.stats())
    store = loader._pipeline.images.seek_indexes.store.cached()
    assert made == sum(length > 0 for length in store.values()) <= indexable(photos)
    assert made >= indexable(photos) - 3   # every JPEG cropped twice (but full-image crops)
    loader.close()


def test_a_budget_holds_what_fits(photos):
    small = folder_loader(photos, seek_index_bytes=40_000)
    want = epochs(folder_loader(photos, seek_index_bytes=0), 3)
    got = epochs(small, 3)
    for g, w in zip(got, want):
        assert_same_batches(g, w)
    assert 0 < small._pipeline.images.seek_indexes.store.filled_bytes() <= 40_000
    assert sum(s.seek_indexes_made for s in small.stats()) < indexable(photos)


def test_none_without_stable_indices_or_a_crop_first(photos, shards):
    import webdataset as wds
    items = wds.WebDataset(shards, shardshuffle=False).to_tuple("jpeg;jpg;png", "cls")
    iterated = PIMDataLoader(items, transform=T.Compose([T.Decode(), *train_steps()]),
                             batch_size=5)
    for _ in range(3):
        list(iterated)
    assert sum(s.seek_index_decodes for s in iterated.stats()) == 0
    resized = PIMDataLoader(ImageFolder(photos), batch_size=5, transform=v2.Compose(
        [v2.Resize(40), v2.CenterCrop(32), v2.ToDtype(torch.float32, scale=True)]))
    assert resized._pipeline.images.seek_indexes is None


def test_a_corrupt_file_raises_or_is_skipped_as_without_them(photos, tmp_path):
    import shutil
    root = tmp_path / "set"
    shutil.copytree(photos, root)
    jpegs = [path for path, _ in ImageFolder(root).samples
             if is_jpeg(open(path, "rb").read())]
    victim = jpegs[3]
    data = bytearray(open(victim, "rb").read())
    del data[len(data) // 2:]
    open(victim, "wb").write(bytes(data))
    for skip in (False, True):
        for budget in (0, 10 ** 7):
            loader = folder_loader(root, on_error="skip" if skip else "raise",
                                   seek_index_bytes=budget)
            for _ in range(3):
                if skip:
                    list(loader)
                else:
                    with pytest.raises(DecodeError, match=os.path.basename(victim)):
                        list(loader)
            if skip:
                assert [s.skipped_samples for s in loader.stats()] == [1, 1, 1]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "256M"])
def test_the_argument_is_checked(photos, bad):
    with pytest.raises(ValueError, match="seek_index_bytes"):
        folder_loader(photos, seek_index_bytes=bad)
