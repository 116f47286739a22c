"""Padded batches of images of different sizes: one tensor plus each image's size.

`PaddedBatch(size_divisibility=32, fill=0)` is a collate_fn for (image, target) samples, as
Detectron2's `ImageList.from_tensors` and DETR's `nested_tensor_from_tensor_list` batch
images: every image is copied into the top-left corner of one (N, C, H, W) tensor whose H
and W are the largest height and width of the batch rounded up to `size_divisibility`,
the rest holding `fill`. It returns `(PaddedImages(tensors, image_sizes), [targets])`.

It works under torch's DataLoader and PIMDataLoader alike. The batch tensor is the
loader's `output_tensor`: in a PIMDataLoader worker, memory of its output arena, reused
batch after batch (loader/arena.py); in torch's workers, shared memory from the start, so
that the batch goes to the main process as one handle, not a copy per image.

A pipeline that renders the images itself (pipelines/detection.py) asks for the batch
tensor first, with `reserve(shapes, dtype)`: the padding of each image is filled then, and
the pipeline renders image i straight into its corner `tensors[i, :, :h, :w]` (the kernel
writes rows with the batch's row pitch). The next call finds its images already there and
copies only those that are not (the samples made as Python).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from pimloader.loader.arena import output_tensor


class PaddedImages(NamedTuple):
    tensors: torch.Tensor              # (N, C, H, W), images in the top-left corners
    image_sizes: list[tuple[int, int]]  # (height, width) of each image


class PaddedBatch:
    """collate_fn: (image, target) samples -> (PaddedImages, list of targets)."""

    def __init__(self, size_divisibility: int = 32, fill: float = 0) -> None:
        if isinstance(size_divisibility, bool) or not isinstance(size_divisibility, int) \
                or size_divisibility < 1:
            raise ValueError(f"size_divisibility must be an int >= 1, got {size_divisibility!r}")
        if isinstance(fill, bool) or not isinstance(fill, (int, float)):
            raise ValueError(f"fill must be a number, got {fill!r}")
        self.size_divisibility = size_divisibility
        self.fill = fill
        self._reserved: torch.Tensor | None = None   # the batch tensor `reserve` made
        self.copies = 0                              # images copied into a batch tensor

    def reserve(self, shapes: list[tuple[int, int, int]] | None,
                dtype: torch.dtype) -> torch.Tensor | None:
        """The batch tensor of the next call, for images of (C, H, W) `shapes` and `dtype`
        (None: nothing reserved, e.g. a batch whose samples are not all images): padding
        filled, corners left for the caller to write image i into `out[i, :, :h, :w]`."""
        self._reserved = None
        if not shapes or any(shape[0] != shapes[0][0] for shape in shapes):
            return None
        out = self._batch_tensor(shapes, dtype)
        for row, (_, height, width) in zip(out, shapes):
            row[:, height:, :].fill_(self.fill)
            row[:, :height, width:].fill_(self.fill)
        self._reserved = out
        return out

    def __call__(self, batch):
        images, targets = _split(batch)
        first = images[0]
        for position, image in enumerate(images):
            if (image.dim() != 3 or image.shape[0] != first.shape[0]
                    or image.dtype != first.dtype):
                raise ValueError(
                    f"PaddedBatch: sample {position} of the batch has an image of shape "
                    f"{tuple(image.shape)} and dtype {image.dtype}; every image must be "
                    f"(C, H, W) with C={first.shape[0]} and dtype {first.dtype}")
        shapes = [tuple(image.shape) for image in images]
        out, self._reserved = self._reserved, None
        if out is None or out.shape != self._batch_shape(shapes) or out.dtype != first.dtype:
            out = self._batch_tensor(shapes, first.dtype).fill_(self.fill)
        for row, image in zip(out, images):
            corner = row[:, :image.shape[1], :image.shape[2]]
            if not _is_view(image, corner):
                corner.copy_(image)
                self.copies += 1
        sizes = [(int(image.shape[1]), int(image.shape[2])) for image in images]
        return PaddedImages(out, sizes), list(targets)

    def _batch_shape(self, shapes) -> tuple:
        height = self._rounded(max(shape[1] for shape in shapes))
        width = self._rounded(max(shape[2] for shape in shapes))
        return (len(shapes), shapes[0][0], height, width)

    def _batch_tensor(self, shapes, dtype: torch.dtype) -> torch.Tensor:
        return output_tensor(self._batch_shape(shapes), dtype)

    def _rounded(self, extent: int) -> int:
        return math.ceil(extent / self.size_divisibility) * self.size_divisibility

    def __repr__(self) -> str:
        return f"PaddedBatch(size_divisibility={self.size_divisibility}, fill={self.fill})"


def _is_view(image: torch.Tensor, corner: torch.Tensor) -> bool:
    """Whether `image` is the memory of `corner` already (rendered there)."""
    return (image.data_ptr() == corner.data_ptr() and image.stride() == corner.stride()
            and image.shape == corner.shape and image.dtype == corner.dtype)


def _split(batch):
    if not batch:
        raise ValueError("PaddedBatch: an empty batch")
    for position, sample in enumerate(batch):
        if not (isinstance(sample, (tuple, list)) and len(sample) == 2
                and isinstance(sample[0], torch.Tensor)):
            raise ValueError(f"PaddedBatch: sample {position} of the batch is not an "
                             f"(image tensor, target) pair but a {type(sample).__name__}")
    images, targets = zip(*batch)
    return images, targets
