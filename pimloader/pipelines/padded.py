"""Padded batches of images of different sizes: one tensor plus each image's size.

`PaddedBatch(size_divisibility=32, fill=0)` is a collate_fn for (image, target) samples, as
Detectron2's `ImageList.from_tensors` and DETR's `nested_tensor_from_tensor_list` batch
images: every image is copied into the top-left corner of one (N, C, H, W) tensor whose H
and W are the largest height and width of the batch rounded up to `size_divisibility`,
the rest holding `fill`. It returns `(PaddedImages(tensors, image_sizes), [targets])`.

It works under torch's DataLoader and PIMDataLoader alike. The batch tensor is the
loader's `output_tensor`: in a PIMDataLoader worker, memory of its output arena, reused
batch after batch (loader/_arena.py); in torch's workers, shared memory from the start, so
that the batch goes to the main process as one handle, not a copy per image.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from pimloader.loader._arena import output_tensor


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
        height = self._rounded(max(image.shape[1] for image in images))
        width = self._rounded(max(image.shape[2] for image in images))
        out = output_tensor((len(images), first.shape[0], height, width), first.dtype)
        out.fill_(self.fill)
        for row, image in zip(out, images):
            row[:, :image.shape[1], :image.shape[2]].copy_(image)
        sizes = [(int(image.shape[1]), int(image.shape[2])) for image in images]
        return PaddedImages(out, sizes), list(targets)

    def _rounded(self, extent: int) -> int:
        return math.ceil(extent / self.size_divisibility) * self.size_divisibility

    def __repr__(self) -> str:
        return f"PaddedBatch(size_divisibility={self.size_divisibility}, fill={self.fill})"


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
