"""Sources (pimloader.datasets.source): each adapter against the dataset it adapts (same
bytes, targets and names as the dataset's own samples), the registry (most specific type
first, duplicates refused, a source registered from outside the package read by
PIMDataLoader), pickling, and an index that holds no per-sample Python objects.

Oracles: the datasets' own `samples` / pycocotools' annotations, the files' bytes as
open().read() gives them, and, for the user's source, the same files read as a list of
(path, target) pairs."""
from __future__ import annotations

import gc
import os
import pickle
import types
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as v2
from pycocotools.coco import COCO

from _coco import make_coco, torchvision_coco
from _helpers import assert_same_batches
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader
from pimloader.pipelines import classification
from pimloader.datasets import (AudioFolder, CocoDetection, EncodedSample,
                                FileSource, ImageFolder, PathIndex, Source, register_source,
                                source_of)
from pimloader.datasets.cache import CachedReader, SampleCache
from pimloader.datasets.index import Packed, Targets

TRANSFORM = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
                        v2.ToDtype(torch.float32, scale=True)])


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=12, classes=3)


def file_bytes(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def assert_reads_as(source, samples, target=lambda t: t):
    """`source` gives sample i of `samples` ((path, target) pairs): the file's bytes, the
    target (through `target`), the path as its name and key."""
    assert len(source) == len(samples)
    for i, (path, raw) in enumerate(samples):
        sample = source.read(i)
        assert isinstance(sample, EncodedSample)
        assert sample.data == file_bytes(path)
        assert sample.name == str(path) and isinstance(sample.name, str)
        assert sample.target == target(raw) and type(sample.target) is type(target(raw))
        assert source.metadata(i) == (sample.target, sample.name)
        assert source.key(i) == os.fsencode(path)
        assert source(i) == sample


# -- adapters against their datasets ---------------------------------------------------------

def test_image_folder_source_reads_torchvisions_samples(photos):
    for dataset in (ImageFolder(photos, transform=TRANSFORM),
                    torchvision.datasets.ImageFolder(photos)):
        source = source_of(dataset)
        assert isinstance(source, FileSource) and source.fields == {"image", "label"}
        assert source.transform is dataset.transform
        assert_reads_as(source, dataset.samples)
        assert source.index.targets.ints is not None   # class indices: one int64 array


def test_dataset_folder_with_target_transform(photos):
    names = ["zero", "one", "two"]
    dataset = torchvision.datasets.DatasetFolder(
        photos, loader=torchvision.datasets.folder.default_loader, extensions=(".jpeg",),
        target_transform=names.__getitem__)
    source = source_of(dataset)
    assert_reads_as(source, dataset.samples, names.__getitem__)
    assert [dataset[i][1] for i in range(len(dataset))] == [
        source.metadata(i)[0] for i in range(len(source))]


def test_a_folder_with_its_own_loader_is_not_taken(photos):
    dataset = torchvision.datasets.DatasetFolder(photos, loader=file_bytes,
                                                 extensions=(".jpeg",))
    assert source_of(dataset) is None and not classification.takes(dataset, None)


def test_pairs_with_int_targets_are_one_array(photos):
    pairs = [(Path(path), target) for path, target in ImageFolder(photos).samples]
    for dataset in (pairs, tuple(pairs)):
        source = source_of(dataset)
        assert source.fields == {"image", "label"} and source.transform is None
        assert source.index.targets.ints.dtype == np.int64
        assert_reads_as(source, pairs)


@pytest.mark.parametrize("targets", [
    [np.int64(3), np.int64(4)],                  # numpy ints stay numpy ints
    [True, False],                               # bools stay bools
    [2 ** 70, -1],                               # beyond int64
    ["cat", None],
    [(1, "a"), {"box": [1, 2]}],
    [torch.tensor([1.5]), torch.tensor([2, 3])],
])
def test_pairs_with_other_targets_keep_their_types(photos, targets):
    paths = [path for path, _ in ImageFolder(photos).samples][:2]
    pairs = list(zip(paths, targets))
    source = source_of(pairs)
    assert source.index.targets.ints is None
    for i, target in enumerate(targets):
        got = source.read(i).target
        assert type(got) is type(target)
        if isinstance(target, torch.Tensor):
            assert torch.equal(got, target)
        else:
            assert got == target


def test_odd_paths_round_trip(photos, tmp_path):
    original = ImageFolder(photos).samples[0][0]
    names = ["with space.jpg", "ünïcödé.jpg", os.fsdecode(b"latin1-\xe9.jpg"), "a'b\".jpg"]
    pairs = []
    for target, name in enumerate(names):
        os.link(original, tmp_path / name)
        pairs.append((str(tmp_path / name), target))
    source = FileSource.from_pairs(pairs)
    assert_reads_as(source, pairs)
    assert source.index.path(2) == os.fsencode(tmp_path) + b"/latin1-\xe9.jpg"


def test_a_pair_list_with_a_stray_item_is_refused_by_its_position(photos):
    pairs = ImageFolder(photos).samples[:3] + [("only a path",)]
    with pytest.raises(ValueError, match="item 3 .* not a \\(path, target\\) pair"):
        source_of(pairs)
    assert source_of([1, 2, 3]) is None and source_of([]) is None


def write_wav(path: Path, frames: int, rate: int = 8000) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.arange(frames, dtype="<i2").tobytes())


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    for label, count in (("no", 2), ("yes", 3)):
        (root / label).mkdir()
        for i in range(count):
            write_wav(root / label / f"{i}.wav", 100 + 10 * i)
    return root


def test_audio_folder_source(clips):
    dataset = AudioFolder(clips, transform=torch.nn.Identity(), target_transform=str,
                          sample_rate=16000)
    source = source_of(dataset)
    assert source.fields == {"audio", "label"} and source.transform is dataset.transform
    assert source.decoding is dataset.decoding
    assert_reads_as(source, dataset.samples, str)
    assert dataset.targets == [0, 0, 1, 1, 1] and len(dataset) == 5
    waveform, target = dataset[4]
    assert target == "1" and waveform.shape == (1, 240)   # 120 frames at 8 kHz -> 16 kHz
    assert not classification.takes(dataset, None)            # no images: not classification's


def test_an_audio_folder_that_makes_items_its_own_way_is_not_taken(clips):
    class Reversed(AudioFolder):
        def __getitem__(self, index):
            waveform, target = super().__getitem__(index)
            return waveform.flip(-1), target
    assert source_of(Reversed(clips)) is None


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return make_coco(tmp_path_factory.mktemp("coco"), count=4)


def test_coco_sources(coco):
    root, ann_file = coco
    api = COCO(ann_file)
    dataset = CocoDetection(root, ann_file)
    want = [(os.path.join(root, api.loadImgs(i)[0]["file_name"]),
             api.loadAnns(api.getAnnIds(imgIds=i))) for i in sorted(api.imgs)]
    flip = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])
    for dataset, enters_as in ((dataset, "image"),
                               (torchvision_coco(root, ann_file, flip), "image"),
                               (torchvision_coco(root, ann_file, wrapped=False), None)):
        source = source_of(dataset)
        assert source.fields == {"image", "coco"} and source.enters_as == enters_as
        assert_reads_as(source, want)
        assert not classification.takes(dataset, None)          # no labels: not classification's
    captions = torchvision.datasets.CocoCaptions(root, ann_file)   # a subclass: other items
    assert source_of(captions) is None


# -- the registry ----------------------------------------------------------------------------

class Shelf(torch.utils.data.Dataset):
    """A user's dataset: JPEG bytes held in memory, items (bytes, label)."""

    def __init__(self, blobs: list[bytes], labels: list[int]) -> None:
        self.blobs, self.labels = blobs, labels

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, index):
        return self.blobs[index], self.labels[index]


class ShelfSource(Source):
    fields = frozenset({"image", "label"})

    def __init__(self, shelf: Shelf) -> None:
        self.packed = Packed(shelf.blobs)      # compact too
        self.labels = Targets(shelf.labels)

    def __len__(self):
        return len(self.packed)

    def metadata(self, index):
        return self.labels[index], f"shelf item {index}"

    def read(self, index):
        return EncodedSample(self.packed[index], *self.metadata(index))


register_source(Shelf, ShelfSource)


def test_a_users_source_is_read_by_the_loader(photos):
    pairs = ImageFolder(photos).samples
    shelf = Shelf([file_bytes(path) for path, _ in pairs], [target for _, target in pairs])
    assert isinstance(source_of(shelf), ShelfSource)
    assert source_of(shelf).key(3) == b"shelf item 3"   # the default key: the name

    def epoch(dataset, workers):
        loader = PIMDataLoader(dataset, batch_size=5, shuffle=True, num_workers=workers,
                               transform=TRANSFORM, generator=torch.Generator().manual_seed(1))
        torch.manual_seed(2)
        batches = [(images.clone(), labels.clone()) for images, labels in loader]
        assert loader.stats()[-1].decode_s > 0   # decoded natively (as Python: a TypeError)
        loader.close()
        return batches
    assert_same_batches(epoch(shelf, 2), epoch(pairs, 2))


def test_duplicates_are_refused_and_the_most_specific_type_wins(photos):
    with pytest.raises(ValueError, match="for Shelf is registered already"):
        register_source(Shelf, ShelfSource)
    with pytest.raises(ValueError, match="for list is registered already"):
        register_source(list, lambda dataset: None)
    with pytest.raises(TypeError, match="takes a dataset type"):
        register_source("Shelf", ShelfSource)

    class Mine(torchvision.datasets.ImageFolder):
        pass

    class Passing(torchvision.datasets.ImageFolder):
        pass

    marker = FileSource.from_pairs([("x.jpg", 0)])
    register_source(Mine, lambda dataset: marker)        # more specific than DatasetFolder
    register_source(Passing)(lambda dataset: None)       # as a decorator; passes
    assert source_of(Mine(photos)) is marker
    assert isinstance(source_of(Passing(photos)), FileSource)   # DatasetFolder's adapter

    class SubShelf(Shelf):
        pass
    assert isinstance(source_of(SubShelf([b"x"], [0])), ShelfSource)


# -- pickling and compactness ----------------------------------------------------------------

def test_sources_pickle_and_read_the_same(photos, clips, coco):
    sources = [source_of(ImageFolder(photos)), source_of(AudioFolder(clips)),
               source_of(CocoDetection(*coco))]
    for source in sources:
        copy = pickle.loads(pickle.dumps(source))
        assert type(copy) is type(source) and copy.fields == source.fields
        for i in range(len(source)):
            assert copy.read(i).data == source.read(i).data
            assert copy.metadata(i) == source.metadata(i) and copy.key(i) == source.key(i)
    cached = CachedReader(sources[0], SampleCache(1 << 20, len(sources[0])))
    assert (cached.fields, cached.transform, cached.key(2), len(cached)) == (
        sources[0].fields, sources[0].transform, sources[0].key(2), len(sources[0]))


def reachable(root) -> int:
    """How many objects `root` reaches (gc referents), functions, types and modules aside."""
    seen, stack = {id(root)}, [root]
    while stack:
        for referent in gc.get_referents(stack.pop()):
            if isinstance(referent, (type, types.ModuleType, types.FunctionType)):
                continue
            if id(referent) not in seen:
                seen.add(id(referent))
                stack.append(referent)
    return len(seen)


@pytest.mark.parametrize("targets", ["ints", "strings"])
def test_the_index_holds_no_per_sample_objects(targets):
    def source(count):
        label = (lambda i: i % 7) if targets == "ints" else (lambda i: f"class {i % 7}")
        return FileSource.from_pairs([(f"/data/train/n{i % 7:08d}/{i:07d}.JPEG", label(i))
                                      for i in range(count)])
    small, large = source(10), source(5000)
    assert reachable(small) == reachable(large)
    assert large.index.prefix == b"/data/train/n0000000"   # once, not 5000 times
    arrays = [large.index.rests.buffer, large.index.rests.offsets,
              large.index.targets.ints if targets == "ints"
              else large.index.targets.pickled.buffer]
    assert all(isinstance(array, np.ndarray) for array in arrays)
    assert large.index.nbytes < 5000 * (32 if targets == "ints" else 64)


def test_path_index_checks_its_lengths():
    with pytest.raises(ValueError, match="2 paths but 1 targets"):
        PathIndex(["a", "b"], [0])
