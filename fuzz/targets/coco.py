"""COCO annotations through the dataset: pimloader.datasets.CocoDetection on a mutated
instances file (its JSON read, its index, each sample's target with boxes, labels and
masks: pycocotools' polygon and RLE decoding, native code), over a folder of two small
JPEGs. target_keys is "all" (masks too), or the default when the file ends with a newline.

Documented errors: ValueError naming the file when it is not a COCO annotation file (at
construction). A sample must then behave as torchvision's
`wrap_dataset_for_transforms_v2(CocoDetection(...), target_keys)` on the same file: where
torchvision's raises, pimloader's raises too; where torchvision's returns, pimloader's
returns the same target. Two documented differences, where pycocotools would allocate without
bound: a polygon with points far outside its image (found here) and a compressed RLE whose
size is not its image's are ValueErrors in pimloader, and torchvision's is then not asked."""
from __future__ import annotations

import contextlib
import io
import os
import tempfile

import torch
from PIL import Image

from pimloader.datasets import CocoDetection

CORPUS = "coco"
MAX_LEN = 4096
SAMPLES = 4   # at most this many samples of a file are read
# pimloader.datasets.coco's refusals of masks that pycocotools would allocate without bound
REFUSED = ("has points outside its", "an RLE mask must have its image's")
_FOLDER = tempfile.TemporaryDirectory(prefix="pimloader-fuzz-coco-")


def _images() -> None:
    for name, size in (("a.jpg", (24, 16)), ("b.jpg", (16, 8))):
        Image.new("RGB", size, (90, 140, 200)).save(os.path.join(_FOLDER.name, name), quality=90)


_images()


def one_input(data: bytes) -> None:
    path = os.path.join(_FOLDER.name, "annotations.json")
    with open(path, "wb") as file:
        file.write(data)
    keys = None if data.endswith(b"\n") else "all"   # masks too, or torchvision's default keys
    try:
        ours = CocoDetection(_FOLDER.name, path, target_keys=keys)
    except ValueError as error:
        assert "annotations.json" in str(error), error
        return
    theirs = torchvisions(path, keys)
    for index in range(min(len(ours), SAMPLES)):
        compare(ours, theirs, index)


def torchvisions(path: str, keys):
    from torchvision import datasets
    with contextlib.redirect_stdout(io.StringIO()):   # pycocotools prints its progress
        try:
            return datasets.wrap_dataset_for_transforms_v2(datasets.CocoDetection(_FOLDER.name, path), keys)
        except Exception:
            return None


def compare(ours, theirs, index: int) -> None:
    try:
        _, target = ours[index]
    except ValueError as error:
        if any(refusal in str(error) for refusal in REFUSED):   # torchvision's would allocate for it
            return
        target = error
    except Exception as error:
        target = error
    if theirs is None:   # torchvision's cannot even be built on this file: nothing to compare
        return
    try:
        expected = theirs[index][1]
    except Exception as error:
        expected = error
    if isinstance(target, Exception) or isinstance(expected, Exception):
        assert isinstance(target, Exception) and isinstance(expected, Exception), \
            f"sample {index}: pimloader's gave {target!r}, torchvision's {expected!r}"
        return
    assert same(target, expected), f"sample {index}: {target} != torchvision's {expected}"


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        try:
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        except (AssertionError, TypeError, ValueError):
            return False
        return type(a) is type(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)
