"""COCO detection data: the offline maker, pimloader's CocoDetection against torchvision's
v2-wrapped one, the takeover of torchvision's datasets, and errors that name the file."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from pycocotools.coco import COCO
from pycocotools import mask as coco_mask
from torchvision.transforms import v2

from torch.utils.data import DataLoader

from _coco import (assert_same_samples, batches, compare, edit_annotations, make_coco,
                   torchvision_coco)
from benchmarks.make_detection_dataset import make_detection_dataset
from pimloader import DecodeError, PIMDataLoader
from pimloader.datasets import CocoDetection
from pimloader.datasets.coco import CocoSource
from pimloader.datasets.index import Packed


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return make_coco(tmp_path_factory.mktemp("coco"), count=8, empty=1)


# -- the maker --------------------------------------------------------------------------

def test_maker_writes_what_pycocotools_reads(coco):
    root, ann_file = coco
    api = COCO(ann_file)
    assert len(api.imgs) == 9 and api.cats
    counts = [len(api.getAnnIds(imgIds=i)) for i in sorted(api.imgs)]
    assert all(1 <= count <= 15 for count in counts[:-1]) and counts[-1] == 0
    modes = set()
    for info in api.imgs.values():
        with Image.open(Path(root) / info["file_name"]) as image:
            assert image.size == (info["width"], info["height"])
            modes.add(image.mode)
        for ann in api.loadAnns(api.getAnnIds(imgIds=info["id"])):
            mask = api.annToMask(ann)
            x, y, w, h = ann["bbox"]
            assert 0 <= x and 0 <= y and x + w <= info["width"] and y + h <= info["height"]
            if ann["iscrowd"]:   # RLE: the mask is exactly the annotated pixels
                assert mask.sum() == ann["area"] == coco_mask.area(ann["segmentation"])
            else:                # polygons traced around the mask: close to its area
                assert abs(int(mask.sum()) - ann["area"]) <= 0.25 * ann["area"] + 40
    assert {"RGB", "L", "CMYK"} <= modes


def test_maker_is_reproducible_from_its_seed(tmp_path):
    first = make_detection_dataset(tmp_path / "a", count=3, seed=5)
    again = make_detection_dataset(tmp_path / "b", count=3, seed=5)
    other = make_detection_dataset(tmp_path / "c", count=3, seed=6)
    assert first.read_bytes() != other.read_bytes()
    assert first.read_text().replace(str(tmp_path / "a"), "") == again.read_text().replace(
        str(tmp_path / "b"), "")
    for name in ("000000.jpg", "000002.jpg"):
        assert (tmp_path / "a/images" / name).read_bytes() == \
            (tmp_path / "b/images" / name).read_bytes()


# -- samples ----------------------------------------------------------------------------

@pytest.mark.parametrize("target_keys", [None, ["masks", "boxes", "labels"], "all"])
def test_samples_are_torchvisions_wrapped_ones(coco, target_keys):
    root, ann_file = coco
    ours = CocoDetection(root, ann_file, target_keys=target_keys)
    theirs = torchvision_coco(root, ann_file, v2.ToImage(), target_keys)
    assert len(ours) == len(theirs) and ours.ids == theirs.ids
    for index in range(len(ours)):
        assert_same_samples(ours[index], theirs[index], f"sample {index}")
    assert ours[len(ours) - 1][1] == {"image_id": ours.ids[-1]}   # no annotations


@pytest.mark.parametrize("target_keys", [None, "all"])
def test_a_key_no_annotation_of_an_image_has_is_a_key_error_as_in_torchvision(coco, tmp_path,
                                                                             target_keys):
    """Found by fuzz/targets/coco.py: an image whose only annotation lacks "bbox" got a
    target with an empty "boxes" (and, with "all", a "bbox" key that its annotations do not
    have) where torchvision's wrapper raises KeyError('bbox')."""
    root, ann_file = coco

    def drop_bbox(document):
        first = document["annotations"][0]["image_id"]
        for annotation in document["annotations"]:
            if annotation["image_id"] == first:
                annotation["bobx"] = annotation.pop("bbox")

    edited = edit_annotations(ann_file, tmp_path / "no_bbox.json", drop_bbox)
    ours = CocoDetection(root, edited, target_keys=target_keys)
    theirs = torchvision_coco(root, edited, v2.ToImage(), target_keys)
    first = json.loads(Path(edited).read_text())["annotations"][0]["image_id"]
    index = ours.ids.index(first)
    with pytest.raises(KeyError, match="bbox"):
        theirs[index]
    with pytest.raises(KeyError, match="bbox"):
        ours[index]


def test_a_polygon_far_outside_its_image_is_refused_before_pycocotools_rasterises_it(coco, tmp_path):
    """Found by fuzz/targets/coco.py: a polygon point at y = 6.7e15 made pycocotools allocate
    16 GB (it walks every edge in fifth-pixel steps before clipping to the canvas; past the
    int range its arithmetic is undefined). A point at 1e6 costs it 40 MB here, and is
    refused now as every point outside the image widened by its size on each side is."""
    root, ann_file = coco
    first = json.loads(Path(ann_file).read_text())["annotations"][0]["image_id"]

    def move_a_point(far):
        def edit(document):
            for annotation in document["annotations"]:
                if annotation["image_id"] == first and isinstance(annotation["segmentation"], list):
                    annotation["segmentation"][0][1] = far
                    return
            raise AssertionError("the set's first image has no polygon")
        return edit

    for far in (1e6, float("nan")):
        edited = edit_annotations(ann_file, tmp_path / "far.json", move_a_point(far))
        ours = CocoDetection(root, edited, target_keys=["masks"])
        with pytest.raises(ValueError, match="COCO polygon .* has points outside its"):
            ours[ours.ids.index(first)]
    inside = edit_annotations(ann_file, tmp_path / "inside.json", move_a_point(-3.5))   # just outside: clipped
    ours, theirs = (CocoDetection(root, inside, target_keys=["masks"]),
                    torchvision_coco(root, inside, v2.ToImage(), ["masks"]))
    index = ours.ids.index(first)
    assert_same_samples(ours[index], theirs[index])


def test_a_compressed_rle_of_another_size_than_its_image_is_refused(coco, tmp_path):
    """pycocotools decodes a compressed RLE at the size it states, unchecked: 100000 x 100000
    takes 10 GB, or crashes it where that allocation fails (seen: a segmentation fault under
    a 3 GB address-space limit). A size that is not the image's is refused first; one that is
    decodes as torchvision's does."""
    root, ann_file = coco
    document = json.loads(Path(ann_file).read_text())
    image = document["images"][0]
    height, width = image["height"], image["width"]

    def rle_on_first_image(size):
        def edit(document):
            for annotation in document["annotations"]:
                if annotation["image_id"] == image["id"]:
                    pixels = np.zeros(size, np.uint8, order="F")
                    pixels[1:3, 2:5] = 1
                    encoded = coco_mask.encode(pixels)
                    annotation["segmentation"] = {"counts": encoded["counts"].decode(), "size": list(size)}
                    annotation["iscrowd"] = 1
        return edit

    wrong = edit_annotations(ann_file, tmp_path / "wrong.json", rle_on_first_image((height, width + 1)))
    ours = CocoDetection(root, wrong, target_keys=["masks"])
    with pytest.raises(ValueError, match=r"COCO RLE of size .* image: an RLE mask must have its image's"):
        ours[ours.ids.index(image["id"])]
    right = edit_annotations(ann_file, tmp_path / "right.json", rle_on_first_image((height, width)))
    ours, theirs = (CocoDetection(root, right, target_keys=["masks"]),
                    torchvision_coco(root, right, v2.ToImage(), ["masks"]))
    index = ours.ids.index(image["id"])
    assert_same_samples(ours[index], theirs[index])


def test_unknown_target_keys_are_refused_as_torchvision_does(coco):
    with pytest.raises(ValueError, match=r"Target keys \['mask'\] are not available"):
        CocoDetection(*coco, target_keys=["mask"])


@pytest.mark.parametrize("wrapped", [True, False])
def test_torchvisions_dataset_is_taken_over_when_its_transforms_start_with_toimage(
        coco, wrapped):
    root, ann_file = coco
    transforms = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])
    dataset = torchvision_coco(root, ann_file, transforms, wrapped=wrapped)
    source = CocoSource.detect(dataset)
    assert source is not None and (source.target_keys is None) == (not wrapped)
    # the workers get compact arrays, not pycocotools' parsed JSON
    assert b"pycocotools" not in pickle.dumps(source)
    stats = compare(dataset, torchvision_coco(root, ann_file, transforms, wrapped=wrapped),
                    batch_size=3, shuffle=True)
    assert stats.kernel_samples == len(dataset)   # flips touch no annotation dict
    # yielding PIL images, it stays on torch's path
    assert CocoSource.detect(torchvision_coco(root, ann_file, v2.RandomHorizontalFlip())) is None


def test_index_holds_numpy_buffers_not_annotation_objects(coco):
    index = CocoDetection(*coco).reader.index
    packed = [value for value in vars(index).values() if isinstance(value, Packed)]
    assert len(packed) == 2 and all(isinstance(value, np.ndarray) for value in [
        index.ids, *(array for value in packed for array in vars(value).values())])
    api = COCO(coco[1])
    assert index.annotations(0) == api.loadAnns(api.getAnnIds(imgIds=int(index.ids[0])))


# -- errors -----------------------------------------------------------------------------

def test_a_bad_annotation_file_is_named(coco, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        CocoDetection(coco[0], tmp_path / "nowhere.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"images": [')
    with pytest.raises(ValueError, match="broken.json.*is not JSON"):
        CocoDetection(coco[0], broken)
    not_coco = tmp_path / "list.json"
    not_coco.write_text("[1, 2]")
    with pytest.raises(ValueError, match="list.json.*not a COCO annotation file"):
        CocoDetection(coco[0], not_coco)
    no_id = edit_annotations(coco[1], tmp_path / "no_id.json",
                             lambda document: document["images"][0].pop("id"))
    with pytest.raises(ValueError, match="no_id.json.*lacks 'id'"):
        CocoDetection(coco[0], no_id)


def test_missing_and_corrupt_images_are_named_with_their_sample(coco, tmp_path):
    root, ann_file = coco
    images = tmp_path / "images"
    images.mkdir()
    for path in Path(root).iterdir():
        (images / path.name).write_bytes(path.read_bytes())
    corrupt = images / "000002.jpg"
    corrupt.write_bytes(corrupt.read_bytes()[:600])
    (images / "000004.jpg").unlink()
    dataset = CocoDetection(str(images), ann_file,
                            transforms=v2.Compose([v2.RandomHorizontalFlip(),
                                                   v2.ToDtype(torch.float32, scale=True)]))
    for num_workers in (0, 2):
        loader = PIMDataLoader(dataset, batch_size=1, num_workers=num_workers,
                               collate_fn=lambda batch: batch)
        with pytest.raises(DecodeError, match=r"000002\.jpg") as error:
            list(loader)
        if num_workers:
            assert "sample 2" in str(error.value)
        loader.close()
    skipping = PIMDataLoader(dataset, batch_size=2, on_error="skip",
                             collate_fn=lambda batch: batch,
                             sampler=[0, 1, 2, 3])
    assert sum(len(batch) for batch in skipping) == 3
    assert skipping.stats()[-1].skipped_samples == 1
    with pytest.raises(FileNotFoundError, match=r"000004\.jpg"):
        list(PIMDataLoader(dataset, batch_size=1, collate_fn=lambda batch: batch,
                           sampler=[4]))


def test_the_loaders_transform_stands_for_the_datasets_transforms(coco):
    root, ann_file = coco
    flip = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True)])
    want, _ = batches(DataLoader, torchvision_coco(root, ann_file, flip), batch_size=2,
                      sampler=[0, 3, 5])
    got, _ = batches(PIMDataLoader, CocoDetection(root, ann_file), batch_size=2,
                     sampler=[0, 3, 5], transform=flip)
    assert_same_samples(got, want)
    with pytest.raises(ValueError, match="given twice"):
        PIMDataLoader(CocoDetection(root, ann_file, transforms=flip), transform=flip)


def test_options_that_do_not_apply_yet_say_so(coco):
    with pytest.warns(UserWarning, match="channels_last does not apply to detection"):
        PIMDataLoader(CocoDetection(*coco), memory_format=torch.channels_last)


def test_a_transform_of_the_image_alone_lowers_too(coco):
    root, ann_file = coco
    make = lambda: v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(),  # noqa: E731
                               v2.Resize(64), v2.ToDtype(torch.float32, scale=True)])
    theirs = lambda: torchvision.datasets.CocoDetection(root, ann_file, transform=make())  # noqa: E731
    stats = compare(theirs(), theirs(), batch_size=3, shuffle=True)
    assert stats.kernel_samples == len(theirs())
