"""PIMDataLoader over COCO datasets against torch's DataLoader over torchvision's v2-wrapped
CocoDetection with the same transforms and seed: images bit-identical, boxes, labels and
masks equal, whether the pipeline lowers to the fused kernel or runs as Python."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from _coco import (assert_same_samples, batches, collate_list, compare, edit_annotations,
                   make_coco, torchvision_coco)
from pimloader import PaddedBatch, PIMDataLoader
from pimloader.datasets import CocoDetection

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
ZOOM_FILL = {tv_tensors.Image: (123, 117, 104), "others": 0}   # masks are padded with 0


def ssd_geometry():
    return v2.Compose([v2.ToImage(), v2.RandomZoomOut(fill=ZOOM_FILL, side_range=(1.0, 2.0)),
                       v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((96, 96)),
                       v2.ClampBoundingBoxes(), v2.SanitizeBoundingBoxes(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def faster_rcnn():
    return v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.Resize(120, max_size=150),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def shortest_size():
    return v2.Compose([v2.ToImage(), v2.RandomShortestSize([64, 80, 96], max_size=120),
                       v2.RandomVerticalFlip(), v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


def jitter():
    return v2.Compose([v2.ToImage(), v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
                       v2.RandomHorizontalFlip(), v2.Resize(100, max_size=130)])


def ssd_full():   # photometric distortion (hue and channel permutations) before the geometry
    return v2.Compose([v2.ToImage(), v2.RandomPhotometricDistort(p=1.0),
                       *ssd_geometry().transforms[1:]])


def crop_then_zoom():   # a zoom-out after a crop does not fuse: those samples replay
    return v2.Compose([v2.ToImage(), v2.RandomIoUCrop(), v2.RandomZoomOut(fill=ZOOM_FILL),
                       v2.Resize((64, 64)), v2.SanitizeBoundingBoxes()])


def small_crop():   # a corner crop that often holds no box at all
    return v2.Compose([v2.ToImage(), v2.RandomCrop((48, 48)), v2.ClampBoundingBoxes(),
                       v2.SanitizeBoundingBoxes()])


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """9 images (one grey, one CMYK) and a tenth without annotations."""
    return make_coco(tmp_path_factory.mktemp("coco"), count=9, empty=1)


@pytest.fixture(scope="module")
def annotated(coco, tmp_path_factory):
    """The images with annotations only (RandomIoUCrop refuses a sample without boxes)."""
    return coco[0], edit_annotations(coco[1], tmp_path_factory.mktemp("ann") / "a.json",
                                     lambda document: document["images"].pop())


def check(dataset_files, make, target_keys=None, **kwargs):
    root, ann_file = dataset_files
    ours = CocoDetection(root, ann_file, transforms=make(), target_keys=target_keys)
    oracle = torchvision_coco(root, ann_file, make(), target_keys)
    kwargs.setdefault("shuffle", "sampler" not in kwargs)
    return compare(ours, oracle, batch_size=3, **kwargs), len(ours)


@pytest.mark.parametrize("make, target_keys", [
    (ssd_geometry, ["boxes", "labels", "masks", "image_id"]), (faster_rcnn, None),
    (shortest_size, ["masks", "boxes", "labels"]), (jitter, None)])
def test_lowered_pipelines_give_torchvisions_samples(annotated, make, target_keys):
    stats, count = check(annotated, make, target_keys)
    assert stats.kernel_samples == count   # every image made by the fused kernel


def test_with_workers(annotated):
    stats, count = check(annotated, ssd_geometry, num_workers=2)
    assert stats.kernel_samples == count


def test_photometric_distortion_lowers_too(annotated):
    stats, count = check(annotated, ssd_full, target_keys="all")
    assert stats.kernel_samples == count


def test_draws_that_do_not_fuse_replay_from_the_same_random_state(annotated):
    stats, count = check(annotated, crop_then_zoom, target_keys=["boxes", "masks", "labels"])
    assert 0 < stats.kernel_samples < count


@pytest.mark.parametrize("num_workers", [0, 2])   # 2: empty boxes through the output arena
def test_a_crop_that_removes_every_box(annotated, num_workers):
    root, ann_file = annotated
    oracle = torchvision_coco(root, ann_file, small_crop())
    want, _ = batches(DataLoader, oracle, batch_size=3, shuffle=True)
    assert any(len(target["boxes"]) == 0 for _, targets in want for target in targets)
    compare(CocoDetection(root, ann_file, transforms=small_crop()), oracle,
            batch_size=3, shuffle=True, num_workers=num_workers)


def test_grey_and_cmyk_images_give_torchvisions_samples(annotated):
    root, ann_file = annotated
    theirs = torchvision_coco(root, ann_file, wrapped=False)
    modes = {}
    for index, image_id in enumerate(theirs.ids):
        with Image.open(Path(root) / theirs.coco.loadImgs(image_id)[0]["file_name"]) as image:
            modes.setdefault(image.mode, index)
    assert {"L", "CMYK", "RGB"} <= set(modes)
    sampler = [modes["L"], modes["CMYK"], modes["RGB"]]
    for make in (faster_rcnn, ssd_geometry):
        stats, _ = check(annotated, make, sampler=sampler, num_workers=2,
                         target_keys=["boxes", "labels", "masks"])
        assert stats.kernel_samples == len(sampler)


def test_degenerate_boxes_and_boxes_on_the_border(annotated, tmp_path):
    def edit(document):
        first = document["images"][0]
        extra = [[0.0, 0.0, 0.0, 5.0], [3.0, 4.0, 7.0, 0.0],          # degenerate
                 [0.0, 0.0, 10.0, 10.0],                               # in the corner
                 [first["width"] - 12.0, first["height"] - 9.0, 12.0, 9.0]]   # opposite
        for bbox in extra:
            document["annotations"].append({
                "id": len(document["annotations"]) + 1, "image_id": first["id"],
                "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": 0, "category_id": 1,
                "segmentation": [[bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1],
                                  bbox[0] + bbox[2], bbox[1] + bbox[3]]]})
    edited = annotated[0], edit_annotations(annotated[1], tmp_path / "edges.json", edit)
    make = lambda: v2.Compose([*faster_rcnn().transforms, v2.SanitizeBoundingBoxes()])  # noqa: E731
    stats, count = check(edited, make, target_keys=["boxes", "labels", "masks"])
    assert stats.kernel_samples == count


def test_an_image_without_annotations(coco):
    stats, count = check(coco, faster_rcnn, target_keys=["boxes", "labels", "masks"])
    assert stats.kernel_samples == count


def test_a_sample_without_boxes_fails_as_under_torch(coco):
    root, ann_file = coco
    last = len(CocoDetection(root, ann_file)) - 1
    errors = []
    for loader_class, dataset in ((DataLoader, torchvision_coco(root, ann_file, ssd_geometry())),
                                  (PIMDataLoader, CocoDetection(root, ann_file,
                                                                transforms=ssd_geometry()))):
        with pytest.raises(TypeError) as error:
            batches(loader_class, dataset, batch_size=1, sampler=[last])
        errors.append(str(error.value).split("\n")[0])
    assert errors[0] == errors[1]


def test_emulated_dpus_give_the_cpu_backends_samples(annotated):
    root, ann_file = annotated
    flip_resize = lambda: v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(),  # noqa: E731
                                      v2.RandomIoUCrop(), v2.Resize((64, 80)),
                                      v2.ToDtype(torch.float16, scale=True)])
    results = []
    for backend in ("cpu", "emulator"):
        dataset = CocoDetection(root, ann_file, transforms=flip_resize())
        got, loader = batches(PIMDataLoader, dataset, batch_size=3, backend=backend,
                              nr_dpus=3, nr_tasklets=4)
        assert loader.stats()[-1].kernel_samples == len(dataset)
        loader.close()
        results.append(got)
    assert_same_samples(results[1], results[0], "emulator vs cpu")


def test_a_defaultdict_fill_is_looked_up_as_torchvision_does(annotated):
    # torchvision's SSD reference: images get no fill from the default (torchvision pads
    # them with 0); the probe must pad the same
    fill = defaultdict(lambda: (123, 117, 104), {tv_tensors.Mask: 0})
    make = lambda: v2.Compose([v2.ToImage(), v2.RandomZoomOut(fill=fill, p=1.0),  # noqa: E731
                               v2.Resize((40, 40))])
    stats, _ = check(annotated, make, sampler=[1, 3])
    assert stats.kernel_samples == 2


def test_padded_batches(annotated):
    root, ann_file = annotated
    padded = PaddedBatch(size_divisibility=32, fill=-1.0)
    stats = compare(CocoDetection(root, ann_file, transforms=faster_rcnn()),
                    torchvision_coco(root, ann_file, faster_rcnn()), batch_size=4,
                    num_workers=2, collate_fn=padded)
    assert stats.kernel_samples == len(CocoDetection(root, ann_file))
    listed, _ = batches(PIMDataLoader, CocoDetection(root, ann_file, transforms=faster_rcnn()),
                        batch_size=4)
    got, _ = batches(PIMDataLoader, CocoDetection(root, ann_file, transforms=faster_rcnn()),
                     batch_size=4, collate_fn=padded)
    for (images, _), (batch, targets) in zip(listed, got):
        assert batch.tensors.shape[2] % 32 == 0 and batch.tensors.shape[3] % 32 == 0
        for image, size, row in zip(images, batch.image_sizes, batch.tensors):
            assert size == tuple(image.shape[1:])
            assert torch.equal(row[:, :size[0], :size[1]], image)
            assert (row[:, size[0]:] == -1).all() and (row[:, :, size[1]:] == -1).all()


def test_padded_batch_refuses_what_it_cannot_pad():
    with pytest.raises(ValueError, match="size_divisibility"):
        PaddedBatch(0)
    with pytest.raises(ValueError, match="sample 1 .* shape"):
        PaddedBatch()([(torch.zeros(3, 4, 4), {}), (torch.zeros(1, 4, 4), {})])
    with pytest.raises(ValueError, match="sample 0 .*pair"):
        PaddedBatch()([torch.zeros(3, 4, 4)])


def test_the_encoded_sample_cache_serves_detection_sets(annotated):
    root, ann_file = annotated
    torch.manual_seed(7)
    want = list(DataLoader(torchvision_coco(root, ann_file, faster_rcnn()), batch_size=3,
                           collate_fn=collate_list))
    loader = PIMDataLoader(CocoDetection(root, ann_file, transforms=faster_rcnn()),
                           batch_size=3, collate_fn=collate_list, cache_bytes=1 << 24)
    for _ in range(2):
        torch.manual_seed(7)
        assert_same_samples(list(loader), want)
    first, second = loader.stats()
    loader.close()
    assert first.cache_misses == second.cache_hits == len(loader.dataset) > 0
