"""The error contract (README "Bad samples") where a batch is not fetched one index at a time:
an IterableDataset whose items the loader's transform decodes, and a dataset read through its
`__getitems__`. A bad sample is named; on_error="skip" drops and counts it and keeps the
others in order; a batch of bad samples only is one DecodeError.

Oracle: torch's DataLoader over the same data with the bad items removed, batch by batch
(a map-style dataset of the same samples, its batch_sampler the loader's batches without
the bad indices), same seeds, 0 and 2 workers."""
from __future__ import annotations

import pytest
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from _helpers import assert_same_batches
from pimloader import DecodeError, PIMDataLoader
from test_error_contract import PYTHON, make_folder

BATCH = 3


class DecodePath:
    """The loader's transform over (path, label) items: Pillow decodes the file, then
    PYTHON (which does not lower: the transform runs as Python)."""

    def __call__(self, path):
        with Image.open(path) as image:
            return PYTHON(image.convert("RGB"))


class Paths(IterableDataset):
    """The (path, label) items of `files`, each worker taking every other batch of BATCH
    items (worker w the batches w, w + workers, ...), so that the loader yields them in
    order."""

    def __init__(self, files, decode=None) -> None:
        self.files, self.decode = files, decode

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for position, path in enumerate(self.files):
            if (position // BATCH) % workers == worker:
                yield (self.decode(path) if self.decode else str(path)), position


class Decoded(Dataset):
    """The oracle's map-style dataset: DecodePath()(files[i]), i."""

    def __init__(self, files) -> None:
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        return DecodePath()(self.files[index]), index


class Batched(Decoded):
    """A dataset that decodes a whole batch in one `__getitems__` call (as Hugging Face's
    datasets do): one bad file fails the call."""

    def __getitems__(self, indices):
        return [self[index] for index in indices]


def batches_without(count: int, bad: set) -> list:
    indices = list(range(count))
    return [[i for i in indices[start:start + BATCH] if i not in bad]
            for start in range(0, count, BATCH)]


def torch_without(files, bad: set, num_workers: int) -> list:
    torch.manual_seed(3)
    return list(DataLoader(Decoded(files), batch_sampler=batches_without(len(files), bad),
                           num_workers=num_workers, generator=torch.Generator().manual_seed(5)))


def pim(dataset, num_workers: int, **kwargs) -> PIMDataLoader:
    torch.manual_seed(3)
    return PIMDataLoader(dataset, batch_size=BATCH, num_workers=num_workers, on_error="skip",
                         generator=torch.Generator().manual_seed(5), **kwargs)


@pytest.fixture
def photos(tmp_path):
    """Eight JPEG files in order, a/1.jpg (the second) truncated."""
    paths = make_folder(tmp_path, {"a/1.jpg": "half"})
    return [paths[name] for name in sorted(paths)], 1


# -- an IterableDataset ---------------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_transform_that_finds_a_bad_item_skips_and_counts_it(photos, num_workers):
    files, bad = photos
    loader = pim(Paths(files), num_workers, transform=DecodePath())
    assert_same_batches(list(loader), torch_without(files, {bad}, num_workers))
    assert loader.stats()[-1].skipped_samples == 1
    loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_iterable_transform_that_finds_a_bad_item_names_it(photos, num_workers):
    files, bad = photos
    with pytest.raises(OSError) as expected:   # what torch raises for it
        Decoded(files)[bad]
    loader = PIMDataLoader(Paths(files), batch_size=BATCH, num_workers=num_workers,
                           transform=DecodePath())
    with pytest.raises(DecodeError, match=f"sample {bad} of this iterator") as raised:
        list(loader)
    assert isinstance(raised.value, OSError) and str(expected.value) in str(raised.value)


def test_iterable_batch_of_bad_items_only_is_one_decode_error(tmp_path):
    paths = make_folder(tmp_path, {"a/3.jpg": "junk", "b/0.jpg": "half", "b/1.jpg": "junk"})
    files = [paths[name] for name in sorted(paths)]
    loader = pim(Paths(files), 0, transform=DecodePath())
    batches = iter(loader)
    assert next(batches)[1].tolist() == [0, 1, 2]
    with pytest.raises(DecodeError, match=r"every sample of the batch \[3, 4, 5\] of this "
                                          r"iterator") as raised:
        next(batches)
    assert "sample 5 of this iterator" in str(raised.value)


def test_iterator_that_raises_a_bad_sample_is_named_not_skipped(photos):
    """An iterator that raised cannot go on (torch's DataLoader ends there too): the bad
    sample its own __next__ raises is named, on_error="skip" or not."""
    files, bad = photos
    loader = pim(Paths(files, decode=DecodePath()), 0)
    with pytest.raises(DecodeError, match=f"sample {bad} of this iterator"):
        list(loader)


# -- a dataset's __getitems__ ---------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_batch_with_a_bad_sample_is_fetched_one_by_one_and_skips_it(photos,
                                                                               num_workers):
    """The dataset draws its random crops itself: the samples kept get torch's draws."""
    files, bad = photos
    loader = pim(Batched(files), num_workers)
    assert_same_batches(list(loader), torch_without(files, {bad}, num_workers))
    assert loader.stats()[-1].skipped_samples == 1
    loader.close()


def test_getitems_bad_sample_is_named_by_its_path(tmp_path):
    paths = make_folder(tmp_path, {"b/2.jpg": "half"})
    dataset = torchvision.datasets.ImageFolder(tmp_path, transform=PYTHON)
    dataset.__getitems__ = lambda indices: [dataset[index] for index in indices]
    with pytest.raises(DecodeError, match=str(paths["b/2.jpg"])):
        list(PIMDataLoader(dataset, batch_size=BATCH))


def test_getitems_batch_of_bad_samples_only_is_one_decode_error(tmp_path):
    paths = make_folder(tmp_path, {"a/0.jpg": "junk", "a/1.jpg": "half", "a/2.jpg": "junk"})
    files = [paths[name] for name in sorted(paths)]
    with pytest.raises(DecodeError, match=r"every sample of the batch \[0, 1, 2\]"):
        list(pim(Batched(files), 0))
    kept = pim(Batched(files), 0, sampler=[2, 3, 4, 5])
    assert [labels.tolist() for _, labels in kept] == [[3, 4], [5]]
    assert kept.stats()[-1].skipped_samples == 1
