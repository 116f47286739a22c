"""ArrowColumns in loaders: torch's DataLoader with torchvision's decode_image and v2
transforms over the wrapper gives the batches it gives over the original files (0 and 2
workers, the same seed); DistributedSampler over 2 ranks sees every row once; PIMDataLoader
batches the wrapper's items as torch's DataLoader does, and resumes mid-epoch.

Oracles: torch's DataLoader over a dataset that reads the photo files themselves; the set
of the dataset's rows; torch's DataLoader over the wrapper."""
from __future__ import annotations

import io
from collections import Counter

import pytest
import soundfile
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torchvision.io import ImageReadMode, decode_image

from _arrow_data import file_bytes, in_memory, make_clips, make_photos, saved
from _helpers import assert_same, assert_same_batches, compare_with_torch
from pimloader import PIMDataLoader
from pimloader.datasets import ArrowColumns

hf = pytest.importorskip("datasets")
hf.disable_progress_bars()

TRANSFORM = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(),
                        v2.ToDtype(torch.float32, scale=True),
                        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def table(photos, tmp_path_factory):
    """The photos saved to disk and loaded (memory-mapped, bytes in the cells)."""
    return saved(hf, in_memory(hf, *photos), tmp_path_factory.mktemp("table") / "saved")


class Files(Dataset):
    """The oracle: the photo files' bytes read by path, items (bytes, label)."""

    def __init__(self, paths, labels):
        self.paths, self.labels = paths, labels

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return file_bytes(self.paths[index]), self.labels[index]


class Decoded(Dataset):
    """Items (bytes, target) of `items` decoded by torchvision and transformed."""

    def __init__(self, items, transform=TRANSFORM):
        self.items, self.transform = items, transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        data, target = self.items[index]
        image = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                             mode=ImageReadMode.RGB)
        return self.transform(image), target


class Clips(Dataset):
    """Items (bytes, target) as libsndfile's waveform (float32) and the target."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        data, target = self.items[index]
        samples, _ = soundfile.read(io.BytesIO(data), dtype="float32")
        return torch.from_numpy(samples), target


def epoch(dataset, num_workers, seed=3, loader=DataLoader, **options):
    torch.manual_seed(seed)
    options.setdefault("batch_size", 8)
    made = loader(dataset, shuffle=True, num_workers=num_workers,
                  generator=torch.Generator().manual_seed(seed), **options)
    batches = list(made)
    if hasattr(made, "close"):
        made.close()
    return batches


@pytest.mark.parametrize("num_workers", [0, 2])
def test_decode_image_and_v2_over_the_wrapper_equal_the_same_over_the_files(
        num_workers, table, photos):
    paths, labels = photos
    rotated = [*range(9, len(paths)), *range(9)]   # through an indices mapping
    for dataset, order in ((table, range(len(paths))), (table.select(rotated), rotated)):
        want = epoch(Decoded(Files([paths[n] for n in order], [labels[n] for n in order])),
                     num_workers)
        got = epoch(Decoded(ArrowColumns(dataset)), num_workers)
        assert_same_batches(got, want)


def test_clips_through_libsndfile_equal_the_files(tmp_path):
    paths, labels = make_clips(tmp_path / "clips")
    dataset = saved(hf, in_memory(hf, paths, labels, "audio", hf.Audio(decode=False)),
                    tmp_path / "saved")
    collate = list   # clips of several lengths: a list of (waveform, target)
    want = epoch(Clips(Files(paths, labels)), 2, batch_size=3, collate_fn=collate)
    got = epoch(Clips(ArrowColumns(dataset)), 2, batch_size=3, collate_fn=collate)
    assert_same_batches(got, want)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_distributed_sampler_over_two_ranks_sees_every_row_once(num_workers, table):
    wrapper = ArrowColumns(table.shuffle(seed=8))
    seen = Counter()
    for rank in range(2):
        sampler = DistributedSampler(wrapper, num_replicas=2, rank=rank, shuffle=True, seed=11)
        sampler.set_epoch(1)
        loader = DataLoader(wrapper, batch_size=5, sampler=sampler, num_workers=num_workers)
        for data, labels in loader:
            seen.update(zip(data, labels.tolist()))
    assert seen == Counter(wrapper[i] for i in range(len(wrapper)))
    assert set(seen.values()) == {1} and len(seen) == len(table)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pimloader_batches_the_items_as_torch_does(num_workers, table):
    compare_with_torch(ArrowColumns(table.shuffle(seed=2)), epochs=2, gen_seed=5,
                       batch_size=6, shuffle=True, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pimloader_resumes_mid_epoch(num_workers, table):
    wrapper = ArrowColumns(table)

    def loader(seed):
        return PIMDataLoader(wrapper, batch_size=4, shuffle=True, num_workers=num_workers,
                             generator=torch.Generator().manual_seed(seed))
    first = loader(7)
    batches, state = [], None
    for batch in first:
        batches.append(batch)
        if len(batches) == 3:
            state = first.state_dict()
    first.close()
    resumed = loader(99)
    resumed.load_state_dict(state)
    rest = list(resumed)
    resumed.close()
    assert len(rest) == len(batches) - 3 > 0
    for i, (got, want) in enumerate(zip(rest, batches[3:])):
        assert_same(got, want, f"resumed[{i}]")
    seen = Counter(data for datas, _ in batches for data in datas)
    assert seen == Counter(wrapper[i][0] for i in range(len(wrapper)))
