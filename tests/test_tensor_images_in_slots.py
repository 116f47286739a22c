"""In-memory images rendered by the kernel straight into the batch slot, against torch.

When every sample of a batch takes the fused kernel with one output shape and dtype (and
collate_fn is torch's default), the kernel writes each image into its row of the slot
instead of returning per-sample tensors for the slot path to stack. Oracle, as in
test_tensor_images.py: torch's DataLoader over a dataset applying the torchvision v2
pipeline itself, same seeds. `stats().direct_samples` says which batches took that path;
every batch that does not fit must still be torch's.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader
from torchvision import tv_tensors

import pimloader.loader.slots
from _helpers import assert_same_batches
from pimloader import PIMDataLoader
from test_tensor_images import (
    CIFAR, GREY, PHOTOS, Images, StreamOfImages, as_list, both_loaders, normalised)


def scaled_to(dtype):
    return [v2.ToDtype(dtype, scale=True)] if dtype is not torch.uint8 else []


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32])
def test_three_channel_batches_are_rendered_into_their_slots(dtype, num_workers):
    transform = v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(),
                            *scaled_to(dtype)])
    actual, expected, loader = both_loaders(Images, PHOTOS, transform, num_workers)
    assert_same_batches(actual, expected, str(dtype))
    assert actual[0][0].dtype == dtype
    stats = loader.stats()[-1]
    assert stats.direct_samples == stats.kernel_samples == len(PHOTOS)  # the tail batch too
    assert stats.shared_batches == len(actual)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_channel_batches_are_rendered_into_their_slots(num_workers):
    transform = normalised(v2.RandomResizedCrop(36), v2.RandomVerticalFlip(),
                           v2.ColorJitter(0.3, 0.3), channels=1)
    actual, expected, loader = both_loaders(Images, GREY, transform, num_workers)
    assert_same_batches(actual, expected)
    assert actual[0][0].shape[1] == 1
    assert loader.stats()[-1].direct_samples == len(GREY)


def test_padded_crops_and_iterable_datasets_are_rendered_into_their_slots():
    """Batches of 40 are rendered in two kernel calls (32 rows at most each)."""
    transform = v2.Compose([v2.RandomCrop(32, padding=4, padding_mode="reflect"),
                            v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)])
    images = CIFAR * 3
    for dataset_class in (Images, StreamOfImages):
        actual, expected, loader = both_loaders(dataset_class, images, transform, 0,
                                                batch_size=40)
        assert_same_batches(actual, expected, dataset_class.__name__)
        assert loader.stats()[-1].direct_samples == len(images)


class WithExtras(Images):
    """(image, label, a tensor, a numpy array, a dict, a string): the other fields are
    stacked into the same slot."""

    def __getitem__(self, index):
        image, label = super().__getitem__(index)
        return (image, label, torch.tensor([index, -index], dtype=torch.int16),
                np.full(3, index / 7), {"index": index, "half": torch.tensor(index / 2)},
                f"sample {index}")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_other_fields_of_a_sample_are_stacked_beside_the_images(num_workers):
    transform = normalised(v2.RandomResizedCrop(32), v2.RandomHorizontalFlip())
    actual, expected, loader = both_loaders(WithExtras, PHOTOS, transform, num_workers,
                                            batch_size=7)
    assert_same_batches(actual, expected)
    assert loader.stats()[-1].direct_samples == len(PHOTOS)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_kept_across_epochs_keep_their_values(num_workers):
    """Every batch of two epochs held at once: each slot is written once, never reused
    while the user holds it."""
    transform = normalised(v2.RandomResizedCrop(32), v2.RandomHorizontalFlip())
    options = dict(batch_size=6, shuffle=True, num_workers=num_workers,
                   persistent_workers=num_workers > 0)
    torch.manual_seed(7)
    oracle = DataLoader(Images(PHOTOS, transform), **options,
                        generator=torch.Generator().manual_seed(3))
    expected = [list(oracle), list(oracle)]
    torch.manual_seed(7)
    loader = PIMDataLoader(Images(PHOTOS), transform=transform, **options,
                           generator=torch.Generator().manual_seed(3))
    first = list(loader)
    second = list(loader)
    assert_same_batches(first, expected[0], "epoch 1")
    assert_same_batches(second, expected[1], "epoch 2")
    assert [stats.direct_samples for stats in loader.stats()] == [len(PHOTOS)] * 2
    loader.close()


def with_other_images(images: list, others: dict) -> list:
    return [others.get(index, image) for index, image in enumerate(images)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_with_a_python_transformed_image_takes_the_ordinary_path(num_workers):
    """A float image gets the transform as Python: its batch's outputs are stacked into
    a slot as before; the other batches are rendered into theirs."""
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.ToDtype(torch.float32, scale=True)])
    images = with_other_images(PHOTOS[:12], {8: PHOTOS[8].float() / 255})
    actual, expected, loader = both_loaders(Images, images, transform, num_workers,
                                            batch_size=4)
    assert_same_batches(actual, expected)
    stats = loader.stats()[-1]
    assert (stats.kernel_samples, stats.direct_samples) == (11, 8)
    assert stats.shared_batches == 3


def test_outputs_of_another_size_than_the_slots_take_the_ordinary_path():
    """Resize(24) keeps the aspect ratio: one-sample batches whose output is not the
    first batch's size are collated; those of its size are rendered into slots."""
    transform = v2.Compose([v2.Resize(24), v2.ToDtype(torch.float32, scale=True)])
    images = PHOTOS[:4] * 3
    actual, expected, loader = both_loaders(Images, images, transform, 0, batch_size=1)
    assert_same_batches(actual, expected)
    slot_shape = actual[0][0].shape
    fitting = sum(batch[0].shape == slot_shape for batch in actual)
    assert 3 <= fitting < len(images)
    stats = loader.stats()[-1]
    assert stats.direct_samples == stats.shared_batches == fitting
    assert stats.collated_batches == len(images) - fitting


@pytest.mark.parametrize("num_workers", [0, 2])
def test_images_of_different_channel_counts_raise_torchs_collate_error(num_workers):
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.ToDtype(torch.float32, scale=True)])
    images = [PHOTOS[0], GREY[0], PHOTOS[1]]
    errors = []
    for loader in (DataLoader(Images(images, transform), batch_size=3, num_workers=num_workers),
                   PIMDataLoader(Images(images), batch_size=3, num_workers=num_workers,
                                 transform=transform)):
        with pytest.raises(RuntimeError) as raised:
            list(loader)
        errors.append(str(raised.value).strip().splitlines()[-1])
    assert errors[0] == errors[1]  # default_collate's own error, in the worker or not


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_python_tail_a_custom_collate_and_image_outputs_are_not_rendered_into_slots(
        num_workers):
    tail = normalised(v2.RandomResizedCrop(32))
    tail.transforms.append(v2.RandomErasing(p=0.5))
    with pytest.warns(UserWarning, match="RandomErasing cannot be lowered"):
        cases = {
            "a python tail": both_loaders(Images, PHOTOS, tail, num_workers),
            "collate_fn": both_loaders(Images, PHOTOS, normalised(v2.RandomResizedCrop(32)),
                                       num_workers, collate_fn=as_list,
                                       torch={"collate_fn": as_list}),
            "image outputs": both_loaders(
                Images, [tv_tensors.Image(image) for image in PHOTOS],
                v2.Compose([v2.RandomResizedCrop(32), v2.ToDtype(torch.float32)]),
                num_workers),
        }
    for what, (actual, expected, loader) in cases.items():
        assert_same_batches(actual, expected, what)
        stats = loader.stats()[-1]
        assert (stats.kernel_samples, stats.direct_samples) == (len(PHOTOS), 0), what


def test_without_a_free_slot_batches_are_collated_as_torch_collates(monkeypatch):
    monkeypatch.setattr(pimloader.loader.slots, "MAX_SLOTS_PER_PRODUCER", 2)
    transform = normalised(v2.RandomResizedCrop(32), v2.RandomHorizontalFlip())
    actual, expected, loader = both_loaders(Images, PHOTOS, transform, 0, batch_size=4)
    assert_same_batches(actual, expected)  # all five batches held: two slots, then none
    stats = loader.stats()[-1]
    assert (stats.shared_batches, stats.collated_batches) == (2, 3)
    assert (stats.kernel_samples, stats.direct_samples) == (len(PHOTOS), 8)
