"""The encoded-sample cache keeping seekable copies (cache_bytes= with cache_seekable=True):
torchvision's batches over tar shards, and the plain loader's over an image folder, every
epoch (0 and 2 workers); what the cache holds (a JPEG as a copy with restart markers and
the original's pixels, anything else as it is); no transcode without room; a corrupt file
raises naming it, or is skipped, as without the copies; the argument checked.

The oracles are torch's DataLoader over torchvision's decode_image + v2 steps, and the same
PIMDataLoader without the cache (itself checked against torchvision elsewhere)."""
from __future__ import annotations

import os
import shutil

import pytest
import torch
from torchvision.io import ImageReadMode, decode_image

from _helpers import assert_same_batches
from _photo_shards import (epochs, folder_loader, photos, shard_loaders, shards,  # noqa: F401  (fixtures)
                           worker_options)
from pimloader import PIMDataLoader
from pimloader.datasets import ImageFolder
from pimloader.decode import DecodeError, add_restart_markers, is_jpeg, seek_info
from test_image_pipeline import photos_with_a_truncated_file  # noqa: F401  (fixture, over this file's photos)

BUDGET = 10 ** 8


def file_bytes(root):
    out = []
    for path, _ in ImageFolder(root).samples:
        with open(path, "rb") as file:
            out.append(file.read())
    return out


def cache_of(loader):
    return loader._pipeline.images.reader.cache


@pytest.mark.parametrize("workers", [0, 2])
def test_tar_shards_give_torchvision_batches_every_epoch(photos, shards, workers):
    torchvision_loader, cached = shard_loaders(shards, workers, cache_bytes=BUDGET,
                                               cache_seekable=True)
    for epoch in range(3):  # the first takes the copies, the others decode from them
        torch.manual_seed(100 + epoch)
        want = list(torchvision_loader)
        torch.manual_seed(100 + epoch)
        assert_same_batches(list(cached), want, f"epoch {epoch}'s batches")
    jpegs = sum(is_jpeg(data) for data in file_bytes(photos))
    stats = cached.stats()
    assert stats[0].cache_misses == 24 and stats[0].cache_seekable_copies == jpegs
    assert all(s.cache_hits == 24 and s.cache_seekable_copies == 0 for s in stats[1:])
    cached.close()


@pytest.mark.parametrize("num_workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_an_image_folder_gives_the_plain_loaders_batches(photos, num_workers, context):
    kw = worker_options(num_workers, context)
    want = epochs(folder_loader(photos, **kw), 3)
    loader = folder_loader(photos, cache_bytes=BUDGET, cache_seekable=True, **kw)
    got = epochs(loader, 3)
    for epoch, (g, w) in enumerate(zip(got, want)):
        assert_same_batches(g, w, f"epoch {epoch}'s batches")
    originals = file_bytes(photos)
    jpegs = sum(is_jpeg(data) for data in originals)
    stats = loader.stats()
    assert stats[0].cache_seekable_copies == jpegs and stats[0].cache_misses == 24
    assert all(s.cache_hits == 24 and s.cache_seekable_copies == 0 for s in stats[1:])
    loader.close()


def test_the_cache_holds_seekable_copies_with_the_originals_pixels(photos):
    loader = folder_loader(photos, cache_bytes=BUDGET, cache_seekable=True, num_workers=2)
    list(loader)
    cache = cache_of(loader)
    originals = file_bytes(photos)
    assert len(cache.cached()) == 24
    kinds = set()
    for index, original in enumerate(originals):
        held = cache.get(index)
        if not is_jpeg(original):
            assert held == original
            kinds.add("other")
            continue
        kinds.add("jpeg")
        assert held != original and seek_info(held) is not None
        assert seek_info(original) is None
        want = decode_image(torch.frombuffer(bytearray(original), dtype=torch.uint8),
                            mode=ImageReadMode.UNCHANGED)
        got = decode_image(torch.frombuffer(bytearray(held), dtype=torch.uint8),
                           mode=ImageReadMode.UNCHANGED)
        assert torch.equal(got, want), f"sample {index}: the copy's pixels differ"
    assert kinds == {"jpeg", "other"}  # the set has a PNG among its JPEGs
    loader.close()


def test_a_jpeg_seekable_already_goes_in_as_it_is(photos, tmp_path):
    root = tmp_path / "set"
    shutil.copytree(photos, root)
    paths = [path for path, _ in ImageFolder(root).samples]
    seekable = [path for path in paths if is_jpeg(open(path, "rb").read())][:3]
    for path in seekable:
        with open(path, "rb") as file:
            copy = add_restart_markers(file.read())
        with open(path, "wb") as file:
            file.write(copy)
    loader = folder_loader(root, cache_bytes=BUDGET, cache_seekable=True)
    want = epochs(folder_loader(root), 2)
    for g, w in zip(epochs(loader, 2), want):
        assert_same_batches(g, w)
    originals = file_bytes(root)
    jpegs = sum(is_jpeg(data) for data in originals)
    assert loader.stats()[0].cache_seekable_copies == jpegs - len(seekable)
    for path in seekable:
        index = paths.index(path)
        assert cache_of(loader).get(index) == originals[index]
    loader.close()


def test_no_transcode_without_room(photos):
    originals = file_bytes(photos)
    smallest = min(len(data) for data in originals)
    loader = folder_loader(photos, cache_bytes=smallest - 1, cache_seekable=True)
    want = epochs(folder_loader(photos), 2)
    assert_same_batches(epochs(loader, 2)[1], want[1])
    assert [s.cache_seekable_copies for s in loader.stats()] == [0, 0]
    assert cache_of(loader).cached() == {}
    loader.close()


def test_a_partial_budget_holds_only_what_fits(photos):
    originals = file_bytes(photos)
    budget = sum(len(data) for data in originals) // 3
    loader = folder_loader(photos, cache_bytes=budget, cache_seekable=True, num_workers=2)
    want = epochs(folder_loader(photos, num_workers=2), 2)
    got = epochs(loader, 2)
    for g, w in zip(got, want):
        assert_same_batches(g, w)
    cache = cache_of(loader)
    held = cache.cached()
    assert 0 < len(held) < 24 and cache.filled_bytes() == sum(held.values()) <= budget
    copies = [index for index in held if is_jpeg(originals[index])]
    assert all(seek_info(cache.get(index)) is not None for index in copies)
    assert loader.stats()[0].cache_seekable_copies >= len(copies)
    loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_corrupt_file_raises_naming_it_every_epoch(photos_with_a_truncated_file,
                                                     num_workers):
    root, victim = photos_with_a_truncated_file
    loader = folder_loader(root, cache_bytes=BUDGET, cache_seekable=True,
                           num_workers=num_workers)
    for _ in range(2):  # the second time its bytes come from the cache, as they were
        with pytest.raises(DecodeError, match=victim.name):
            list(loader)
    index = [os.path.basename(path) for path, _ in ImageFolder(root).samples].index(victim.name)
    held = cache_of(loader).get(index)
    assert held is None or held == victim.read_bytes()
    loader.close()


def test_skip_counts_a_corrupt_file_as_without_the_copies(photos_with_a_truncated_file):
    root, _ = photos_with_a_truncated_file
    loader = folder_loader(root, cache_bytes=BUDGET, cache_seekable=True, num_workers=2,
                           on_error="skip")
    plain = folder_loader(root, num_workers=2, on_error="skip")
    got, want = epochs(loader, 2), epochs(plain, 2)
    for g, w in zip(got, want):
        assert_same_batches(g, w)
    assert [s.skipped_samples for s in loader.stats()] == [
        s.skipped_samples for s in plain.stats()]
    assert loader.stats()[1].skipped_samples >= 1
    loader.close()


def test_arguments_are_checked(photos):
    with pytest.raises(ValueError, match="cache_seekable=True .* cache_bytes"):
        folder_loader(photos, cache_seekable=True)
    for bad in (1, "yes", None):
        with pytest.raises(TypeError, match="cache_seekable must be True or False"):
            folder_loader(photos, cache_bytes=BUDGET, cache_seekable=bad)


def test_the_copies_are_decoded_on_the_dpus_where_the_originals_cannot_be(photos):
    """On the emulator with decode_on_dpu=True: JPEGs without restart markers (and
    progressive ones) fall back to the host; their seekable copies are decoded by the DPUs,
    from the first epoch on (the read that takes a copy decodes it), with the CPU
    backend's batches."""
    def run(**kw):
        loader = folder_loader(photos, reduced_dct=False, **kw)
        return epochs(loader, 2), loader.stats()
    want, _ = run(backend="cpu")
    plain, plain_stats = run(backend="emulator", nr_dpus=2, decode_on_dpu=True)
    cached, stats = run(backend="emulator", nr_dpus=2, decode_on_dpu=True,
                        cache_bytes=BUDGET, cache_seekable=True)
    for g, p, w in zip(cached, plain, want):
        assert_same_batches(g, w)
        assert_same_batches(p, w)
    assert all(s.dpu_decoded_samples == 0 for s in plain_stats)
    copies = stats[0].cache_seekable_copies
    assert copies > 0 and all(s.dpu_decoded_samples > 0 for s in stats)
    assert stats[0].dpu_decoded_samples == stats[1].dpu_decoded_samples <= copies
