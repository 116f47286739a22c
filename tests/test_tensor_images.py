"""The native path for in-memory images, against torch's DataLoader + torchvision v2.

Oracle: torch's DataLoader over a dataset that applies the pipeline itself, with the same
global seed and generator. PIMDataLoader gets the same dataset without a transform and the
pipeline as `transform=`; uint8 CHW tensors then take the fused kernel, which computes
torchvision's uint8 tensor path, so every batch must be identical. The images are crops of
real photographs (scikit-image's, as the encoded-path tests use), some stored contiguous
and some as HWC-strided views (the kernel reads those without a copy).
"""
from __future__ import annotations

import collections
import os
import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torchvision import tv_tensors

from _helpers import assert_same_batches
from benchmarks.make_dataset import COLOUR_PHOTOS, GREY_PHOTOS, load_photo
from pimloader import PIMDataLoader
from pimloader.pipelines.in_memory import InMemoryImages, hwc_region
from pimloader.transforms.params import Geometry, Padding

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def photo_crops(count: int, size_range=(72, 180), grey=False, seed=0) -> list:
    """uint8 CHW crops of real photographs, of random sizes; every other one a CHW view of
    HWC memory, as a dataset built from numpy arrays would hold it."""
    rng = np.random.default_rng(seed)
    names = GREY_PHOTOS if grey else COLOUR_PHOTOS
    crops = []
    for i in range(count):
        photo = np.asarray(load_photo(names[i % len(names)]).convert("L" if grey else "RGB"))
        height, width = (int(v) for v in rng.integers(*size_range, size=2))
        top = int(rng.integers(0, photo.shape[0] - height))
        left = int(rng.integers(0, photo.shape[1] - width))
        hwc = np.ascontiguousarray(photo[top:top + height, left:left + width])
        chw = torch.from_numpy(hwc.reshape(height, width, -1)).permute(2, 0, 1)
        crops.append(chw if i % 2 else chw.contiguous())
    return crops


def small_photos(count: int, side: int = 32, seed=1) -> list:
    """CIFAR-like: side x side uint8 images, photographs scaled down with Pillow."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(count):
        photo = load_photo(COLOUR_PHOTOS[i % len(COLOUR_PHOTOS)]).convert("RGB")
        left, top = (int(v) for v in rng.integers(0, 64, size=2))
        box = (left, top, left + photo.width // 2, top + photo.height // 2)
        small = np.asarray(photo.resize((side, side), box=box))
        images.append(torch.from_numpy(small.copy()).permute(2, 0, 1).contiguous())
    return images


PHOTOS = photo_crops(20)
GREY = photo_crops(12, grey=True, seed=2)
CIFAR = small_photos(24)


class Images(Dataset):
    """(image, label) pairs; with a transform, the oracle's own pipeline."""

    def __init__(self, images, transform=None) -> None:
        self.images = images
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index):
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, index % 5


class StreamOfImages(IterableDataset):
    def __init__(self, images, transform=None) -> None:
        self.images = images
        self.transform = transform

    def __iter__(self):
        for index, image in enumerate(self.images):
            yield (self.transform(image) if self.transform else image), index


def as_list(batch):
    return batch


def normalised(*geometric, channels=3):
    mean, std = (MEAN, STD) if channels == 3 else ([0.45], [0.226])
    return v2.Compose([*geometric, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(mean, std)])


PIPELINES = {
    "train": lambda: normalised(v2.RandomResizedCrop(64), v2.RandomHorizontalFlip()),
    "validation": lambda: normalised(v2.Resize(72), v2.CenterCrop(64)),
    "colour": lambda: normalised(v2.RandomResizedCrop(56), v2.RandomHorizontalFlip(),
                                 v2.ColorJitter(0.4, 0.4, 0.4), v2.RandomGrayscale(0.3)),
    "uint8_bicubic": lambda: v2.Compose([
        v2.RandomResizedCrop(48, interpolation=v2.InterpolationMode.BICUBIC),
        v2.RandomVerticalFlip()]),
}


def both_loaders(dataset_class, images, transform, num_workers, batch_size=6, seed=0,
                 **options):
    """(PIMDataLoader's batches, torch's batches, the PIMDataLoader)."""
    torch.manual_seed(seed + 100)
    expected = list(DataLoader(dataset_class(images, transform), batch_size=batch_size,
                               num_workers=num_workers,
                               generator=torch.Generator().manual_seed(seed),
                               **_shuffle(dataset_class), **options.pop("torch", {})))
    torch.manual_seed(seed + 100)
    loader = PIMDataLoader(dataset_class(images), batch_size=batch_size,
                           num_workers=num_workers, transform=transform,
                           generator=torch.Generator().manual_seed(seed),
                           **_shuffle(dataset_class), **options)
    return list(loader), expected, loader


def _shuffle(dataset_class) -> dict:
    return {} if issubclass(dataset_class, IterableDataset) else {"shuffle": True}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_photographs_match_torchvision_exactly(name, num_workers):
    transform = PIPELINES[name]()
    actual, expected, loader = both_loaders(Images, PHOTOS, transform, num_workers)
    assert_same_batches(actual, expected, name)
    stats = loader.stats()[-1]
    assert stats.kernel_samples == len(PHOTOS)
    assert stats.shared_batches == len(actual)  # the outputs still go into batch slots


@pytest.mark.parametrize("num_workers", [0, 2])
def test_cifar_style_padded_crops_match_exactly(num_workers):
    transform = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize([0.49, 0.48, 0.45], [0.25, 0.24, 0.26])])
    actual, expected, loader = both_loaders(Images, CIFAR, transform, num_workers, batch_size=8)
    assert_same_batches(actual, expected)
    assert loader.stats()[-1].kernel_samples == len(CIFAR)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_crops_reaching_into_or_beyond_the_padding_match_exactly(mode):
    """Crops smaller than the padding: boxes partly, or wholly, in the padded border."""
    images = [image[:, :16, :16] for image in CIFAR]
    fill = (7, 130, 250) if mode == "constant" else 0
    transform = v2.Compose([v2.RandomCrop(8, padding=10 if mode != "reflect" else 15,
                                          padding_mode=mode, fill=fill),
                            v2.RandomVerticalFlip()])
    actual, expected, loader = both_loaders(Images, images * 3, transform, 0, batch_size=9)
    assert_same_batches(actual, expected, mode)
    assert loader.stats()[-1].kernel_samples == len(images) * 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_channel_images_match_exactly(num_workers):
    transform = normalised(v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(),
                           v2.ColorJitter(0.3, 0.3, 0.3), channels=1)
    actual, expected, loader = both_loaders(Images, GREY, transform, num_workers)
    assert_same_batches(actual, expected)
    assert actual[0][0].shape[1] == 1
    assert loader.stats()[-1].kernel_samples == len(GREY)


def mixed_images() -> list:
    """Eligible and ineligible images, interleaved (all collate under `as_list`)."""
    photo, grey = PHOTOS[0], GREY[0]
    return [photo, v2.functional.to_pil_image(PHOTOS[1]), tv_tensors.Image(PHOTOS[2]),
            PHOTOS[3].float(), torch.cat([PHOTOS[4], PHOTOS[4][:1]]), grey,
            PHOTOS[6][None], PHOTOS[7], GREY[1]]


ELIGIBLE_IN_MIXED = 5  # PHOTOS[0], the Image, grey, PHOTOS[7], GREY[1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mixed_samples_keep_the_python_transform_where_not_eligible(num_workers):
    """PIL images, float, 4-channel and 4-D tensors get the transform as
    Python, between kernel samples, with the same draws and output types."""
    transform = v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True)])
    images = mixed_images()
    actual, expected, loader = both_loaders(Images, images * 2, transform, num_workers,
                                            batch_size=5, collate_fn=as_list,
                                            torch={"collate_fn": as_list})
    assert_same_batches(actual, expected)
    assert loader.stats()[-1].kernel_samples == 2 * ELIGIBLE_IN_MIXED


def test_to_image_in_the_pipeline_gives_images_like_torchvision():
    transform = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(32), v2.ToDtype(torch.float32)])
    images = [PHOTOS[0], tv_tensors.Image(PHOTOS[1]), PHOTOS[2]]
    actual, expected, loader = both_loaders(Images, images, transform, 0, batch_size=None)
    assert [type(image) for image, _ in actual] == [tv_tensors.Image] * 3
    assert_same_batches(actual, expected)
    assert loader.stats()[-1].kernel_samples == 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_python_tail_keeps_its_draws_in_sample_order(num_workers):
    """RandomErasing and a hue jitter do not lower: they run after the kernel, each
    sample's before the next sample's draws."""
    transform = normalised(v2.RandomResizedCrop(48), v2.RandomHorizontalFlip())
    transform.transforms += [v2.RandomErasing(p=0.5), v2.ColorJitter(hue=0.1)]
    with pytest.warns(UserWarning, match="RandomErasing, ColorJitter cannot be lowered"):
        actual, expected, loader = both_loaders(Images, PHOTOS, transform, num_workers)
    assert_same_batches(actual, expected)
    assert loader.stats()[-1].kernel_samples == len(PHOTOS)


def test_iterable_datasets_and_unbatched_loading_take_the_kernel():
    transform = PIPELINES["train"]()
    for options in ({}, {"batch_size": None}):
        for dataset_class in (StreamOfImages, Images):
            actual, expected, loader = both_loaders(dataset_class, PHOTOS[:8], transform, 0,
                                                    **options)
            assert_same_batches(actual, expected, f"{dataset_class.__name__} {options}")
            assert loader.stats()[-1].kernel_samples == 8


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", ["train", "colour"])
def test_emulated_dpus_give_the_cpu_backends_batches(name, num_workers):
    transform = PIPELINES[name]()
    cpu, _, _ = both_loaders(Images, PHOTOS[:12], transform, num_workers, backend="cpu")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "pimloader: the DPU kernel does not")
        emulated, expected, loader = both_loaders(Images, PHOTOS[:12], transform, num_workers,
                                                  backend="emulator", nr_dpus=3, nr_tasklets=5)
    assert_same_batches(emulated, cpu)
    assert_same_batches(emulated, expected)
    assert loader.stats()[-1].kernel_samples == 12


class MainProcessGuard(Images):
    """Fails if the main process reads a sample (detection must not consume draws)."""

    main_pid = os.getpid()

    def __getitem__(self, index):
        if os.getpid() == self.main_pid:
            raise AssertionError("the main process read a sample")
        return super().__getitem__(index)


def test_the_main_process_reads_no_sample_with_workers():
    loader = PIMDataLoader(MainProcessGuard(PHOTOS), batch_size=4, num_workers=2,
                           transform=PIPELINES["train"]())
    assert sum(len(labels) for _, labels in loader) == len(PHOTOS)
    assert loader.stats()[-1].kernel_samples == len(PHOTOS)


def test_pipelines_that_refuse_tensors_or_lower_nothing_stay_python():
    import torchvision.transforms as v1
    assert not isinstance(PIMDataLoader(Images(PHOTOS), transform=v1.Compose(
        [v1.ToTensor(), v1.RandomResizedCrop(32)]))._pipeline, InMemoryImages)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing lowered: nothing to warn about
        plain = PIMDataLoader(Images(PHOTOS), transform=v2.RandomErasing())
    assert not isinstance(plain._pipeline, InMemoryImages)


def test_an_error_of_the_transform_names_the_sample():
    transform = v2.Compose([v2.RandomCrop(60), v2.ToDtype(torch.float32, scale=True)])
    images = [PHOTOS[0], PHOTOS[1], PHOTOS[2][:, :50]]
    with pytest.raises(ValueError, match="larger than input image") as raised:
        list(PIMDataLoader(Images(images), batch_size=3, transform=transform))
    assert "sample 2" in "".join(getattr(raised.value, "__notes__", []))


def test_only_the_padded_crop_box_is_copied():
    image = torch.arange(3 * 20 * 30, dtype=torch.int32).remainder(256).to(torch.uint8)
    image = image.view(3, 20, 30)
    padding = Padding(4, 4, 4, 4, "constant", (0, 0, 0))
    geometry = Geometry((2, 30, 8, 6), (8, 6), (0, 0, 8, 6), source=(20, 30), padding=padding)
    source, moved = hwc_region(image, geometry)
    assert source.shape == (6, 4, 3)  # rows 0..5 and columns 26..29 of the image
    assert np.array_equal(source, image[:, 0:6, 26:30].permute(1, 2, 0).numpy())
    assert moved.box == (0, 0, 8, 6)
    padded = moved.padding
    assert (padded.top, padded.left, padded.bottom, padded.right) == (2, 0, 0, 2)
    strided = image.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    view, _ = hwc_region(strided, Geometry((1, 2, 5, 7), (5, 7), (0, 0, 5, 7)))
    assert np.shares_memory(view, strided.numpy())  # interleaved already: no copy


class NoisyImages(Images):
    """A dataset that draws random numbers itself (a random label noise here): under torch,
    its draws and its transform's alternate sample by sample."""

    def __getitem__(self, index):
        noise = torch.rand(1).item()
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, noise


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("pipeline", ["native", "python"])
def test_the_datasets_own_draws_alternate_with_the_transforms(pipeline, num_workers):
    """The transform runs on each sample as soon as the dataset returns it (the kernel
    renders later, but the draws happen then), so a dataset drawing random numbers in
    __getitem__ sees the RNG exactly as with the transform inside it."""
    transform = PIPELINES["train"]() if pipeline == "native" else v2.Compose(
        [v2.RandomResizedCrop(24), v2.RandomErasing(p=0.5), v2.ToDtype(torch.float32)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual, expected, _ = both_loaders(NoisyImages, PHOTOS, transform, num_workers)
    assert_same_batches(actual, expected, pipeline)


class NamedImages(Images):
    """Samples as namedtuples, which the transform must leave namedtuples."""

    Sample = collections.namedtuple("Sample", "image label")

    def __getitem__(self, index):
        return self.Sample(*super().__getitem__(index))


@pytest.mark.parametrize("pipeline", ["native", "python"])
def test_namedtuple_samples_keep_their_type(pipeline):
    transform = PIPELINES["train"]() if pipeline == "native" else v2.Compose(
        [v2.RandomResizedCrop(24), v2.RandomErasing(p=0.5), v2.ToDtype(torch.float32)])
    if pipeline == "python":
        with pytest.warns(UserWarning, match="RandomErasing, ToDtype cannot be lowered"):
            actual, expected, _ = both_loaders(NamedImages, PHOTOS, transform, 0)
    else:
        actual, expected, _ = both_loaders(NamedImages, PHOTOS, transform, 0)
    assert type(actual[0]) is NamedImages.Sample
    assert_same_batches(actual, expected, pipeline)
