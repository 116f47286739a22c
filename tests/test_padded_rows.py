"""Padded batches rendered straight into their corners: the CPU kernel writes strided
output rows bit-identically to contiguous ones, and PIMDataLoader's padded batches equal
torchvision's images padded by hand (CPU and emulated DPUs, with and without workers),
with no image rendered first and copied after on the CPU backend."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from _coco import assert_same_samples, batches, collate_list, make_coco, torchvision_coco
from pimloader import PaddedBatch, PIMDataLoader
from pimloader.backends import kernels as K
from pimloader.backends.base import IMAGES
from pimloader.backends.cpu import CpuBackend, CpuImageKernel
from pimloader.backends.dpu.backend import DpuImageKernel
from pimloader.backends.registry import register_kernel
from pimloader.datasets import CocoDetection

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def odd_sizes():   # Faster R-CNN's recipe at sizes whose sides are odd
    return v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.Resize(61, max_size=97),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def some_replayed():   # a zoom-out after a crop does not fuse: those samples run as Python
    return v2.Compose([v2.ToImage(), v2.RandomIoUCrop(), v2.RandomZoomOut(p=0.5),
                       v2.Resize((45, 53)), v2.SanitizeBoundingBoxes()])


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return make_coco(tmp_path_factory.mktemp("coco"), count=7, empty=0)


def padded_by_hand(images, divisibility: int, fill: float) -> torch.Tensor:
    height = math.ceil(max(image.shape[1] for image in images) / divisibility) * divisibility
    width = math.ceil(max(image.shape[2] for image in images) / divisibility) * divisibility
    out = torch.full((len(images), images[0].shape[0], height, width), fill,
                     dtype=images[0].dtype)
    for row, image in zip(out, images):
        row[:, :image.shape[1], :image.shape[2]] = image
    return out


def torchvisions_padded(coco, make, divisibility, fill, **kwargs):
    root, ann_file = coco
    want, _ = batches(DataLoader, torchvision_coco(root, ann_file, make()), **kwargs)
    return [(padded_by_hand(images, divisibility, fill), [tuple(i.shape[1:]) for i in images],
             list(targets)) for images, targets in want]


def assert_equal_batches(got, want):
    assert len(got) == len(want)
    for index, ((ours, targets), (tensors, sizes, their_targets)) in enumerate(zip(got, want)):
        assert ours.image_sizes == sizes, index
        assert ours.tensors.dtype == tensors.dtype and ours.tensors.shape == tensors.shape
        assert torch.equal(ours.tensors, tensors), f"batch {index}"
        assert_same_samples(targets, their_targets, f"batch {index}'s targets")


@pytest.mark.parametrize("backend, workers, divisibility, fill", [
    ("cpu", 0, 32, -1.0), ("cpu", 2, 5, 0), ("emulator", 0, 32, 0), ("emulator", 2, 1, 2.5)])
def test_padded_batches_equal_torchvisions_padded_by_hand(coco, backend, workers,
                                                          divisibility, fill):
    common = dict(batch_size=3, shuffle=True, num_workers=workers)
    want = torchvisions_padded(coco, odd_sizes, divisibility, fill, collate_fn=collate_list,
                               **common)
    dataset = CocoDetection(*coco, transforms=odd_sizes())
    got, loader = batches(PIMDataLoader, dataset, backend=backend, nr_dpus=3, nr_tasklets=4,
                          collate_fn=PaddedBatch(divisibility, fill), **common)
    assert loader.stats()[-1].kernel_samples == len(dataset)
    loader.close()
    assert_equal_batches(got, want)


def runs_seen(monkeypatch, kernel_class) -> list:
    """Records, for each run `kernel_class` is handed, whether its rows are contiguous."""
    seen, submit = [], kernel_class.submit

    def recording(self, run):
        seen.append(run.out.is_contiguous())
        return submit(self, run)
    monkeypatch.setattr(kernel_class, "submit", recording)
    return seen


def test_the_cpu_kernel_renders_into_the_corners_without_a_copy(coco, monkeypatch):
    seen = runs_seen(monkeypatch, CpuImageKernel)
    padded = PaddedBatch(32)
    got, _ = batches(PIMDataLoader, CocoDetection(*coco, transforms=odd_sizes()),
                     batch_size=3, collate_fn=padded)
    assert seen and not any(seen)      # every run's rows: strided views of the batch
    assert padded.copies == 0          # and no image copied into its corner afterwards
    assert_equal_batches(got, torchvisions_padded(coco, odd_sizes, 32, 0, batch_size=3,
                                                  collate_fn=collate_list))


def test_a_backend_without_strided_rows_renders_runs_of_its_own(coco, monkeypatch):
    seen = runs_seen(monkeypatch, DpuImageKernel)
    padded = PaddedBatch(32)
    got, loader = batches(PIMDataLoader, CocoDetection(*coco, transforms=odd_sizes()),
                          batch_size=3, collate_fn=padded, backend="emulator",
                          nr_dpus=3, nr_tasklets=4)
    loader.close()
    assert seen and all(seen)          # DpuImageKernel.writes_strided_out is False
    assert padded.copies == len(loader.dataset)   # its images copied into their corners
    assert_equal_batches(got, torchvisions_padded(coco, odd_sizes, 32, 0, batch_size=3,
                                                  collate_fn=collate_list))


def test_samples_made_as_python_are_copied_into_their_corners(coco):
    padded = PaddedBatch(16, fill=3)
    got, loader = batches(PIMDataLoader, CocoDetection(*coco, transforms=some_replayed()),
                          batch_size=3, collate_fn=padded)
    python_samples = len(loader.dataset) - loader.stats()[-1].kernel_samples
    assert 0 < python_samples < len(loader.dataset) and padded.copies == python_samples
    assert_equal_batches(got, torchvisions_padded(coco, some_replayed, 16, 3, batch_size=3,
                                                  collate_fn=collate_list))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("extras", [{}, {"paddings": [(3, 4, 5, 6, "constant", (1, 2, 3))] * 2,
                                         "colours": [[("brightness", 1.3)]] * 2}],
                         ids=["plain", "padded-coloured"])
def test_strided_rows_are_the_contiguous_rows_and_nothing_else_is_written(layout, dtype,
                                                                           extras):
    image = np.random.default_rng(0).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    arguments = dict(hflip=[True, False], vflip=[False, True], layout=layout, **extras)
    if dtype != torch.uint8:
        arguments["lut"] = K.normalize_lut(3, dtype, MEAN, STD)
    size, canvas = (33, 41), (64, 64)
    shape = (2, 3, *size) if layout == "NCHW" else (2, *size, 3)
    contiguous = K.resized_crop_batch([image, image], [(1, 2, 40, 60)] * 2, size,
                                      torch.empty(shape, dtype=dtype), **arguments)
    sentinel = 7
    whole = torch.full((2, 3, *canvas) if layout == "NCHW" else (2, *canvas, 3), sentinel,
                       dtype=dtype)
    corners = whole[:, :, :size[0], :size[1]] if layout == "NCHW" else whole[:, :size[0], :size[1]]
    assert not corners.is_contiguous()
    K.resized_crop_batch([image, image], [(1, 2, 40, 60)] * 2, size, corners, **arguments)
    assert torch.equal(corners, contiguous)
    outside = torch.ones_like(whole, dtype=torch.bool)
    (outside[:, :, :size[0], :size[1]] if layout == "NCHW"
     else outside[:, :size[0], :size[1]]).fill_(False)
    assert (whole[outside] == sentinel).all()


def test_rows_that_are_not_runs_of_pixels_are_refused():
    image = np.zeros((20, 20, 3), np.uint8)
    columns = torch.empty(1, 3, 8, 16, dtype=torch.uint8)[..., ::2]   # every other pixel
    with pytest.raises(ValueError, match="last stride 1"):
        K.resized_crop_batch([image], [(0, 0, 20, 20)], (8, 8), columns)


class ContiguousOnly(CpuBackend):
    """The CPU backend with an image kernel that takes contiguous rows only."""


@register_kernel(IMAGES, ContiguousOnly)
class ContiguousOnlyKernel(CpuImageKernel):
    writes_strided_out = False


def test_the_run_batcher_stages_strided_rows_for_a_backend_without_them():
    from pimloader.backends.select import Router
    from pimloader.pipelines.runs import RunBatcher
    from pimloader.transforms.params import Geometry
    image = np.random.default_rng(1).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    backend = ContiguousOnly()
    seen = []
    kernel = backend.kernel_for(IMAGES)
    submit = kernel.submit
    kernel.submit = lambda run: seen.append(run.out.is_contiguous()) or submit(run)
    whole = torch.full((2, 3, 32, 32), 9, dtype=torch.uint8)
    geometry = Geometry.identity(30, 40).resize(17, 23, "bilinear", True)
    corners = whole[:, :, :17, :23]
    runs = RunBatcher(Router([backend]), 2)
    for row in range(2):
        runs.add(corners, row, image, (0, 0, 30, 40), geometry)
    runs.flush()
    want = K.resized_crop_batch([image, image], [(0, 0, 30, 40)] * 2, (17, 23),
                                torch.empty(2, 3, 17, 23, dtype=torch.uint8))
    assert seen == [True] and torch.equal(whole[:, :, :17, :23], want)
    assert (whole[:, :, 17:] == 9).all() and (whole[:, :, :, 23:] == 9).all()
