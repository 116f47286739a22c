"""COCO-style detection datasets read as encoded bytes + annotations.

`CocoDetection(root, annFile, transforms=None, target_keys=None)` has the samples of
`torchvision.tv_tensors.wrap_dataset_for_transforms_v2(torchvision.datasets.CocoDetection(
root, annFile), target_keys)`: a target dict with `boxes` (tv_tensors.BoundingBoxes, XYXY,
with the image's canvas_size), `labels`, `image_id` and, when asked for, `masks`
(tv_tensors.Mask) and COCO's own keys; an image without annotations gets
`{"image_id": id}` only, as there. Its image is a tv_tensors.Image decoded natively (what
`ToImage()` makes of torchvision's PIL image), so a pipeline that starts with `ToImage()`
gives torchvision's samples.

Annotations are parsed once, in the process that builds the dataset, into `CocoIndex`: a
few numpy arrays (image ids, file names in one buffer, each image's annotation list pickled
into one byte buffer with offsets). Why: a COCO JSON parsed into Python dicts is millions of
small objects; a forked worker that merely reads them writes their reference counts, which
copies every page they sit on into that worker (PyTorch's "copy-on-read" issue 13246), so
that each worker ends up with its own copy of the whole JSON. A numpy buffer's pages are
never written by readers and stay shared after fork; under spawn the arrays pickle as a few
contiguous buffers instead of an object graph. A sample unpickles only its own annotations
(the same dicts, numbers and strings pycocotools returns).
"""
from __future__ import annotations

import copy
import errno
import json
import os
import pickle
from collections import defaultdict
from typing import Any

import numpy as np
import torch
import torchvision.datasets as tv_datasets
from torchvision.datasets.vision import StandardTransform
from torchvision.tv_tensors._dataset_wrapper import VisionDatasetTVTensorWrapper

from pimloader.transforms.registry import flatten, op_of

from .index import Packed
from .source import EncodedSample, Source, read_file, register_source

# sets built as torchvision builds them, so that the keys of a target come in its order
AVAILABLE_KEYS = ("segmentation", "area", "iscrowd", "image_id", "bbox", "category_id",
                  "boxes", "masks", "labels")
DEFAULT_KEYS = ("image_id", "boxes", "labels")


class CocoIndex:
    """The images of a COCO instances file, in torchvision's order (sorted image ids), and
    each image's annotations in pycocotools' order (`loadAnns(getAnnIds(id))`)."""

    def __init__(self, ids, file_names: list[str], annotations: list[list[dict]]) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.names = Packed(os.fsencode(name) for name in file_names)
        self.pickled = Packed(pickle.dumps(anns, protocol=5) for anns in annotations)

    @classmethod
    def from_file(cls, ann_file) -> "CocoIndex":
        """Parse `ann_file` as pycocotools' COCO does, with errors that name the file."""
        try:
            with open(ann_file, encoding="utf-8") as file:
                document = json.load(file)
        except json.JSONDecodeError as error:
            raise ValueError(f"annFile {os.fspath(ann_file)!r} is not JSON: {error}") from error
        except UnicodeDecodeError as error:
            raise ValueError(f"annFile {os.fspath(ann_file)!r} is not JSON text: {error}") \
                from error
        if not isinstance(document, dict) or not isinstance(document.get("images"), list):
            raise ValueError(f"annFile {os.fspath(ann_file)!r} is not a COCO annotation file "
                             f"(no 'images' list at its top level)")
        try:
            images = {image["id"]: image for image in document["images"]}
            annotations = {ann["id"]: ann for ann in document.get("annotations", [])}
            by_image = defaultdict(list)
            for ann in document.get("annotations", []):
                by_image[ann["image_id"]].append(ann["id"])
            ids = sorted(images)
            return cls(ids, [images[i]["file_name"] for i in ids],
                       [[annotations[a] for a in by_image.get(i, [])] for i in ids])
        except (KeyError, TypeError) as error:
            raise ValueError(f"annFile {os.fspath(ann_file)!r} is not a COCO annotation file "
                             f"(an image or annotation lacks {error})") from error

    @classmethod
    def from_coco(cls, dataset: tv_datasets.CocoDetection) -> "CocoIndex":
        """The index of a torchvision CocoDetection (its `ids` and parsed `coco`)."""
        coco = dataset.coco
        ids = list(dataset.ids)
        return cls(ids, [coco.loadImgs(i)[0]["file_name"] for i in ids],
                   [coco.loadAnns(coco.getAnnIds(i)) for i in ids])

    def __len__(self) -> int:
        return len(self.ids)

    def file_name(self, index: int) -> str:
        return os.fsdecode(self.names[index])

    def annotations(self, index: int) -> list[dict]:
        return pickle.loads(self.pickled[index])


def parse_target_keys(target_keys) -> set:
    """torchvision's reading of `target_keys` for CocoDetection (None, "all" or names)."""
    if target_keys is None:
        return _like_torchvisions(DEFAULT_KEYS)
    if target_keys == "all":
        return _like_torchvisions(AVAILABLE_KEYS)
    keys = set(target_keys)
    extra = keys - set(AVAILABLE_KEYS)
    if extra:
        raise ValueError(f"Target keys {sorted(extra)} are not available")
    return keys


def _like_torchvisions(keys: tuple) -> set:
    """The set `keys`, built as torchvision's wrapper builds its own from a set literal, so
    that a target's extra keys (iterated from it) come in torchvision's order. A string
    set's order depends on the process's hash seed and, where hashes collide, on insertion
    order; CPython builds a constant set literal by updating an empty set from a frozenset
    constant of the function's code, so the same update from that very constant gives the
    same table. Without it (another torchvision), the keys are inserted in `keys`' order."""
    from torchvision.tv_tensors import _dataset_wrapper
    factory = getattr(_dataset_wrapper, "coco_dectection_wrapper_factory", None)
    constants = getattr(getattr(factory, "__code__", None), "co_consts", ())
    source = next((c for c in constants if isinstance(c, frozenset) and c == set(keys)), keys)
    built = set()
    built.update(source)
    return built


def wrap_target(image_id: int, annotations: list[dict], canvas_size: tuple[int, int],
                target_keys: set) -> dict:
    """torchvision's v2 wrapper of a COCO target: boxes XYXY, labels, masks, COCO's keys."""
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F
    if not annotations:
        return dict(image_id=image_id)
    batched = defaultdict(list)
    for annotation in annotations:
        for key, value in annotation.items():
            batched[key].append(value)
    batched = dict(batched)  # a key that no annotation has is a KeyError, as in torchvision's
    target: dict[str, Any] = {}
    if "image_id" in target_keys:
        target["image_id"] = image_id
    if "boxes" in target_keys:
        target["boxes"] = F.convert_bounding_box_format(
            tv_tensors.BoundingBoxes(batched["bbox"], format=tv_tensors.BoundingBoxFormat.XYWH,
                                     canvas_size=canvas_size),
            new_format=tv_tensors.BoundingBoxFormat.XYXY)
    if "masks" in target_keys:
        target["masks"] = tv_tensors.Mask(torch.stack([
            segmentation_to_mask(segmentation, canvas_size)
            for segmentation in batched["segmentation"]]))
    if "labels" in target_keys:
        target["labels"] = torch.tensor(batched["category_id"])
    for key in target_keys - {"image_id", "boxes", "masks", "labels"}:
        target[key] = batched[key]
    return target


def segmentation_to_mask(segmentation, canvas_size: tuple[int, int]) -> torch.Tensor:
    """A COCO polygon list or RLE as a (height, width) uint8 mask, by pycocotools."""
    try:
        from pycocotools import mask
    except ImportError as error:
        raise ImportError("target_keys with 'masks' needs pycocotools (pip install "
                          "pycocotools), as torchvision's wrapper does") from error
    if isinstance(segmentation, dict):
        if not isinstance(segmentation["counts"], str):  # uncompressed RLE
            segmentation = mask.frPyObjects(segmentation, *canvas_size)
        else:
            _check_rle_size(segmentation, canvas_size)
    elif isinstance(segmentation, list):
        _check_polygons(segmentation, canvas_size)
        segmentation = mask.merge(mask.frPyObjects(segmentation, *canvas_size))
    else:
        raise ValueError(f"COCO segmentation expected to be a dict or a list, "
                         f"got {type(segmentation)}")
    return torch.from_numpy(mask.decode(segmentation))


def _check_polygons(polygons: list, canvas_size: tuple[int, int]) -> None:
    """Refuse polygon points that are not finite or lie outside the canvas widened by its own
    size on each side. pycocotools walks every edge in fifth-pixel steps before it clips to
    the canvas, so one far point makes it allocate for the whole way (a 100-byte annotation
    asked for 16 GB when fuzzed; past the int range its arithmetic is undefined). Points that
    are not numbers are left to pycocotools' own errors."""
    height, width = canvas_size
    for polygon in polygons:
        try:
            points = np.asarray(polygon, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            continue
        x, y = points[0::2], points[1::2]
        inside = (np.isfinite(points).all() and (np.abs(x - width / 2) <= 1.5 * width).all()
                  and (np.abs(y - height / 2) <= 1.5 * height).all())
        if not inside:
            shown = points[:8].tolist() + (["..."] if len(points) > 8 else [])
            raise ValueError(f"COCO polygon {shown} has points outside its {height}x{width} image widened by its "
                             f"size on each side (x in [-{width}, {2 * width}], y in [-{height}, {2 * height}])")


def _check_rle_size(rle: dict, canvas_size: tuple[int, int]) -> None:
    """Refuse a compressed RLE whose size is not its image's: pycocotools allocates the mask
    at the size the RLE states, unchecked (a size of 100000 x 100000 takes 10 GB, or crashes
    it where the allocation fails)."""
    size = rle.get("size")
    if not isinstance(size, (list, tuple)) or [*size] != [*canvas_size]:
        raise ValueError(f"COCO RLE of size {size!r} on a {canvas_size[0]}x{canvas_size[1]} image: an RLE mask "
                         "must have its image's [height, width]")


class CocoDetection(torch.utils.data.Dataset):
    """torchvision's v2-wrapped CocoDetection, read natively (see the module's doc).

    `transforms` takes and returns `(image, target)`, as torchvision's `transforms`."""

    def __init__(self, root, annFile, transforms=None, target_keys=None) -> None:  # noqa: N803
        self.root = root
        self.annFile = annFile
        self.target_keys = parse_target_keys(target_keys)
        self.transforms = transforms
        self.reader = CocoSource(root, CocoIndex.from_file(annFile), self.target_keys)

    @property
    def ids(self) -> list[int]:
        return self.reader.index.ids.tolist()

    def __len__(self) -> int:
        return len(self.reader)

    def target(self, index: int, annotations: list[dict], canvas_size) -> dict:
        return wrap_target(self.reader.image_id(index), annotations, canvas_size,
                           self.target_keys)

    def __getitem__(self, index: int):
        if not isinstance(index, int):
            raise ValueError(f"Index must be of type integer, got {type(index)} instead.")
        from pimloader.decode import decode_image
        from torchvision import tv_tensors
        sample = self.reader(index)
        pixels = torch.from_numpy(decode_image(sample.data, name=sample.name))
        image = tv_tensors.Image(pixels.permute(2, 0, 1))
        target = self.target(index, sample.target, tuple(pixels.shape[:2]))
        if self.transforms is not None:
            image, target = self.transforms(image, target)
        return image, target

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(root={self.root!r}, annFile={self.annFile!r}, "
                f"{len(self)} images, target_keys={sorted(self.target_keys)})")


class CocoSource(Source):
    """A COCO detection set's images as a source: `root` and the compact `CocoIndex`; a
    sample's target is its annotation list (pycocotools' dicts), which `target(...)` turns
    into the dataset's own target (torchvision's v2 wrapper's dict, or the list itself when
    `target_keys` is None: an unwrapped torchvision CocoDetection). `transform`: the (image,
    target) transforms the dataset carried. `pil`: the dataset yields PIL images (a
    torchvision CocoDetection), which the decoded image stands for only where the
    transforms start by making a tensor of it. `enters_as`: what type the decoded image
    enters the transforms as ("image": tv_tensors.Image, what ToImage() makes; "tensor": a
    plain tensor, what PILToTensor() makes; None: the transforms keep a PIL image)."""

    fields = frozenset({"image", "coco"})

    def __init__(self, root, index: CocoIndex, target_keys: set | None = None,
                 transform: Any = None, *, pil: bool = False) -> None:
        check_image_folder(root)
        self.root = root
        self.index = index
        self.target_keys = target_keys
        self.transform = transform
        self.pil = pil

    @property
    def enters_as(self) -> str | None:
        return image_entry(self.transform) if self.pil else "image"

    @property
    def transforms(self) -> Any:
        return self.transform

    @property
    def reader(self) -> "CocoSource":
        """The source itself, read as index -> EncodedSample (the pipelines' name)."""
        return self

    def __len__(self) -> int:
        return len(self.index)

    def image_id(self, index: int) -> int:
        return int(self.index.ids[index])

    def path(self, index: int) -> str:
        return os.path.join(self.root, self.index.file_name(index))

    def metadata(self, index: int) -> tuple:
        """(annotations, name) of a sample, without reading its file."""
        return self.index.annotations(index), self.path(index)

    def read(self, index: int) -> EncodedSample:
        annotations, path = self.metadata(index)
        return EncodedSample(read_file(path), annotations, path)

    def key(self, index: int) -> bytes:
        return os.fsencode(self.path(index))

    def target(self, index: int, annotations: list[dict], canvas_size) -> Any:
        if self.target_keys is None:
            return annotations
        return wrap_target(self.image_id(index), annotations, canvas_size, self.target_keys)

    def taking(self, transforms) -> "CocoSource | None":
        """This source with the loader's `transforms` standing for the dataset's (which
        must then have none); None when the image would enter them as PIL."""
        if self.transform is not None and transforms is not None:
            raise ValueError("the transforms are given twice, to the dataset and to "
                             "PIMDataLoader; give them to one of them")
        return self.with_transforms(transforms if transforms is not None else self.transform)

    def with_transforms(self, transforms) -> "CocoSource | None":
        """This source with `transforms` as its (image, target) transforms; None when the
        image would enter them as PIL (they do not start by making a tensor of it)."""
        taken = copy.copy(self)
        taken.transform = transforms
        return taken if taken.enters_as is not None else None

    @classmethod
    def detect(cls, dataset, transforms=None) -> "CocoSource | None":
        """The source of a pimloader CocoDetection, or of a torchvision CocoDetection
        (v2-wrapped or not) whose transforms start by turning the PIL image into a tensor
        (the decoded image then takes the PIL image's place; any other torchvision
        CocoDetection yields PIL images, and stays on torch's path). `transforms` (the
        loader's) stand for the dataset's, which must then have none."""
        source = coco_source(dataset)
        return None if source is None else source.taking(transforms)

    def __repr__(self) -> str:
        return (f"CocoSource(root={self.root!r}, {len(self)} images, "
                f"target_keys={self.target_keys!r}, enters_as={self.enters_as!r})")


@register_source(CocoDetection)
@register_source(tv_datasets.CocoDetection)
@register_source(VisionDatasetTVTensorWrapper)
def coco_source(dataset) -> CocoSource | None:
    """The source of a COCO detection set: pimloader's CocoDetection, torchvision's
    (exactly that class: its subclasses, such as CocoCaptions, make other items), v2-wrapped
    or not; None for any other dataset."""
    if isinstance(dataset, CocoDetection):
        return CocoSource(dataset.root, dataset.reader.index, dataset.target_keys,
                          dataset.transforms)
    wrapped = _unwrapped_coco(dataset)
    if wrapped is None and type(dataset) is not tv_datasets.CocoDetection:
        return None
    coco = dataset if wrapped is None else wrapped
    keys = None if wrapped is None else parse_target_keys(dataset._target_keys)
    return CocoSource(coco.root, CocoIndex.from_coco(coco), keys, dataset.transforms,
                      pil=True)


def check_image_folder(root) -> None:
    """Refuses a COCO set whose image folder is not there, as its dataset (or the loader
    that takes it over) is made: torchvision's CocoDetection finds it at the first sample."""
    if not os.path.exists(root):
        raise FileNotFoundError(errno.ENOENT, "the COCO set's image folder (root) is not "
                                "there", os.fspath(root))
    if not os.path.isdir(root):
        raise NotADirectoryError(errno.ENOTDIR, "the COCO set's image folder (root) is not "
                                 "a folder", os.fspath(root))


def _unwrapped_coco(dataset):
    """The torchvision CocoDetection inside a v2 wrapper, else None."""
    if isinstance(dataset, VisionDatasetTVTensorWrapper):
        inner = object.__getattribute__(dataset, "_dataset")
        if type(inner) is tv_datasets.CocoDetection:
            return inner
    return None


def image_entry(transforms) -> str | None:
    """What the first step that sees a PIL image makes of it (its registered `from_pil`):
    "image" (v2.ToImage), "tensor" (v2.PILToTensor), None (anything else, or none)."""
    if isinstance(transforms, StandardTransform):   # a dataset's transform=, on the image
        transforms = transforms.transform
    steps = flatten(transforms, samples=True)
    op = op_of(steps[0]) if steps else None
    return op.from_pil if op is not None else None
