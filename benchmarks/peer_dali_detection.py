"""NVIDIA DALI's CPU detection pipelines as a contender of benchmarks/detection.py (an optional
peer: `pip install nvidia-dali-cuda120`, which `make bench` does; without it the contender is
skipped with a printed line).

Every operator runs on the CPU (`device_id=None`); no GPU is needed. The pipelines follow
detection.py's torchvision v2 ones as closely as DALI's operators allow:

- "faster-rcnn": `readers.coco` -> `decoders.image` -> `bb_flip` on a coin that also drives
  `crop_mirror_normalize`'s mirror -> `resize` (shorter side 800, longer at most 1333,
  linear, antialiased) -> `crop_mirror_normalize` (float32, CHW, ImageNet mean and std);
- "ssd": the same reader and decoder -> photometric distortion (`brightness_contrast`,
  `hsv`, a channel permutation by `coord_transform`, each with torchvision's probability
  and ranges) -> zoom-out (`paste` onto a canvas of the mean colour, boxes by
  `bbox_paste`) -> IoU crop (`random_bbox_crop`, then `slice`) -> `bb_flip` -> `resize`
  300x300 -> `crop_mirror_normalize`, then SanitizeBoundingBoxes;
- "ssd-geometry": "ssd" without the photometric distortion.

Where they differ from torchvision v2 (so images are close, never bit-equal, and boxes
follow each pipeline's own draws):

- Random draws: DALI's generators, not torch's; no sample gets the same draw. Each
  probability and range is torchvision's.
- The flip is the mirror of `crop_mirror_normalize` (the same coin as `bb_flip`): DALI's
  fused form of `fn.flip`, so no separate copy.
- Photometric: contrast always before saturation and hue (torchvision puts it after them
  with probability 1/2); `hsv` is DALI's linear approximation in RGB (its documentation
  says so), not torchvision's exact HSV round trip; the contrast centre is the mean grey
  level before brightness (the same value unless brightness clips).
- IoU crop: `random_bbox_crop` draws on relative coordinates, so its aspect-ratio bounds
  (0.5-2) apply to the crop's relative width/height, torchvision's to pixels; DALI tries a
  threshold `num_attempts` times (40, torchvision's trials) and keeps boxes whose centres
  are inside the crop, as torchvision does.
- Resize to the shorter side: DALI rounds the other side, torchvision truncates it (1067
  against 1066 for 640x480), and the resamplers differ.
- SanitizeBoundingBoxes: DALI has no operator for it; torchvision's own transform runs on
  each delivered sample in this process (a few microseconds a sample).
- Boxes come from DALI relative to the image (`ratio=True`, as `bb_flip` and `bbox_paste`
  need) and are scaled to the output's pixels when delivered; labels are COCO's category
  ids (`avoid_class_remapping=True`), as torchvision's wrapper gives.

DaliDetectionLoader yields the references' batches, `(images, targets)` tuples, over the
first `count` images of the annotations in their order (detection.py's sampler).
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from benchmarks import peer_dali
from benchmarks.calls import Call, Let, Name, run_program

NAME = "DALI"
MEAN_255, STD_255 = peer_dali.MEAN_255, peer_dali.STD_255
FILL = [123, 117, 104]  # detection.py's zoom-out fill, SSD's mean colour
# detection.py's pipeline makers, by function name, to the pipelines here
PIPELINE_OF_MAKER = {"faster_rcnn": "faster-rcnn", "ssd": "ssd", "ssd_geometry": "ssd-geometry"}


def uniform(low: float, high: float) -> Call:
    return Call("fn.random.uniform", range=[low, high])


def reader(root: str, ann_file: str) -> Let:
    return Let("jpegs, boxes, labels, image_ids", Call(
        "fn.readers.coco", file_root=root, annotations_file=ann_file, images=Name("image_names"),
        ltrb=True, ratio=True, image_ids=True, avoid_class_remapping=True, size_threshold=0.0,
        random_shuffle=False, pad_last_batch=True, name=peer_dali.READER))


DECODE = Let("images", Call("fn.decoders.image", Name("jpegs"), device="cpu",
                            output_type=Name("types.RGB")))
PHOTOMETRIC = (  # torchvision's RandomPhotometricDistort: each step with probability 1/2
    Let("images", Call("fn.brightness_contrast", Name("images"),
                       brightness=Call("maybe", 0.5, uniform(0.875, 1.125), 1.0),
                       contrast=Call("maybe", 0.5, uniform(0.5, 1.5), 1.0),
                       contrast_center=Call("grey_mean", Name("images")))),
    Let("images", Call("fn.hsv", Name("images"),
                       hue=Call("maybe", 0.5, uniform(-18.0, 18.0), 0.0),  # degrees: +-0.05 turn
                       saturation=Call("maybe", 0.5, uniform(0.5, 1.5), 1.0))),
    Let("images", Call("fn.coord_transform", Name("images"), M=Call("channel_permutation", 0.5),
                       dtype=Name("types.UINT8"))),
)
ZOOM_OUT_AND_IOU_CROP = (
    Let("zoom", Call("maybe", 0.5, uniform(1.0, 4.0), 1.0)),
    Let("paste_x", uniform(0.0, 1.0)),
    Let("paste_y", uniform(0.0, 1.0)),
    Let("images", Call("fn.paste", Name("images"), ratio=Name("zoom"), paste_x=Name("paste_x"),
                       paste_y=Name("paste_y"), fill_value=FILL)),
    Let("boxes", Call("fn.bbox_paste", Name("boxes"), ratio=Name("zoom"),
                      paste_x=Name("paste_x"), paste_y=Name("paste_y"), ltrb=True)),
    Let("crop_anchor, crop_shape, boxes, labels", Call(
        "fn.random_bbox_crop", Name("boxes"), Name("labels"), device="cpu",
        aspect_ratio=[0.5, 2.0], thresholds=[0.0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
        bbox_layout="xyXY", allow_no_crop=True, num_attempts=40)),
    Let("images", Call("fn.slice", Name("images"), Name("crop_anchor"), Name("crop_shape"),
                       axis_names="WH")),
)


def flip_resize_normalize(**size) -> tuple:
    return (
        Let("flip", Call("fn.random.coin_flip", probability=0.5)),
        Let("boxes", Call("fn.bb_flip", Name("boxes"), ltrb=True, horizontal=Name("flip"))),
        Let("images", Call("fn.resize", Name("images"), **size,
                           interp_type=Name("types.INTERP_LINEAR"), antialias=True)),
        Let("images", Call("fn.crop_mirror_normalize", Name("images"), dtype=Name("types.FLOAT"),
                           output_layout="CHW", mean=MEAN_255, std=STD_255, mirror=Name("flip"))),
    )


FASTER_RCNN_TAIL = flip_resize_normalize(resize_shorter=800, max_size=1333)
SSD_TAIL = flip_resize_normalize(resize_x=300, resize_y=300)
PIPELINES = {
    "faster-rcnn": ((DECODE, *FASTER_RCNN_TAIL), False),
    "ssd": ((DECODE, *PHOTOMETRIC, *ZOOM_OUT_AND_IOU_CROP, *SSD_TAIL), True),
    "ssd-geometry": ((DECODE, *ZOOM_OUT_AND_IOU_CROP, *SSD_TAIL), True),
}  # name: (steps after the reader, whether SanitizeBoundingBoxes follows)
OUTPUTS = ("images", "boxes", "labels", "image_ids")
HELPERS = ("maybe", "grey_mean", "channel_permutation")


def plan(root: str, ann_file: str, pipeline: str, batch_size: int, threads: int, seed: int,
         count: int) -> dict:
    if pipeline not in PIPELINES:
        raise ValueError(f"DALI: unknown detection pipeline {pipeline!r} "
                         f"(known: {', '.join(PIPELINES)})")
    steps, sanitize = PIPELINES[pipeline]
    return {"pipeline": Call("Pipeline", batch_size=batch_size, num_threads=threads,
                             device_id=None, seed=seed,
                             prefetch_queue_depth=peer_dali.prefetch_for(count, batch_size)),
            "program": (reader(root, ann_file), *steps), "sanitize": sanitize}


def helper_source(names) -> str:
    from benchmarks import dali_draws
    return "\n".join(inspect.getsource(getattr(dali_draws, name)) for name in names)


def describe(plan_: dict, count: int) -> str:
    lines = "\n".join(f"    {line.text()}" for line in plan_["program"])
    used = [name for name in HELPERS if f"{name}(" in lines]
    tail = ("; then torchvision's v2.SanitizeBoundingBoxes() on each delivered sample"
            if plan_["sanitize"] else "")
    text = (f"nvidia.dali {plan_['pipeline'].text()}, image_names = the first {count} file "
            f"names of annFile in its order:\n{lines}\n  outputs {', '.join(OUTPUTS)}; boxes "
            f"scaled from relative to the output image's pixels (XYXY){tail}")
    if used:
        helper_text = "\n".join("    " + line for line in helper_source(used).splitlines())
        text += f"\n  with (benchmarks/dali_draws.py):\n{helper_text}"
    return text


def image_names(ann_file: str, count: int | None) -> list[str]:
    """The file names of the first `count` images of the annotations (all with None)."""
    images = json.loads(Path(ann_file).read_text())["images"]
    count = len(images) if count is None else count
    if count > len(images):
        raise ValueError(f"DALI: {count} images asked, {ann_file} has {len(images)}")
    return [image["file_name"] for image in images[:count]]


def sample(images, boxes, labels, image_id, index: int, copy: bool) -> tuple:
    """One delivered (image, target), boxes in the image's pixels."""
    image = torch.from_dlpack(images[index])
    image = image.clone() if copy else image
    height, width = image.shape[-2:]
    scale = torch.tensor([width, height, width, height], dtype=torch.float32)
    target = {"boxes": tv_tensors.BoundingBoxes(torch.from_dlpack(boxes[index]) * scale,
                                                format="XYXY", canvas_size=(height, width)),
              "labels": torch.from_dlpack(labels[index]).view(-1).to(torch.int64, copy=True),
              "image_id": int(torch.from_dlpack(image_id[index]).view(-1)[0])}
    return image, target


class DaliDetectionLoader:
    """(images, targets) batches, the detection references' collate, of one DALI detection
    pipeline; one epoch per iteration."""

    def __init__(self, root: str, ann_file: str, pipeline: str, batch_size: int, threads: int,
                 seed: int = 0, count: int | None = None):
        from nvidia.dali import Pipeline, fn, types

        from benchmarks import dali_draws

        names = image_names(ann_file, count)
        self.plan = plan(str(root), str(ann_file), pipeline, batch_size, threads, seed,
                         len(names))
        self.text = describe(self.plan, len(names))
        self._sanitize = v2.SanitizeBoundingBoxes() if self.plan["sanitize"] else None
        namespace = {"fn": fn, "types": types, "Pipeline": Pipeline, "image_names": names,
                     **{name: getattr(dali_draws, name) for name in HELPERS}}
        self._epochs = peer_dali.DaliEpochs(
            peer_dali.build_pipeline(self.plan["pipeline"], namespace, self._graph), batch_size,
            self._batch)
        self.samples = self._epochs.samples

    def _graph(self, namespace: dict) -> list:
        bound = run_program(self.plan["program"], namespace)
        return [bound[name] for name in OUTPUTS]

    def _batch(self, outputs, keep: int, copy: bool) -> tuple:
        samples = [sample(*outputs, index, copy) for index in range(keep)]
        if self._sanitize is not None:
            samples = [self._sanitize(image, target) for image, target in samples]
        return tuple(zip(*samples))

    def __iter__(self):
        return iter(self._epochs)

    def close(self) -> None:
        self._epochs = None


# -- the hook of benchmarks/detection.py -----------------------------------------------------

_announced: set = set()


def contenders(make) -> list[str]:
    """[NAME] where DALI can run the pipeline `make` builds, else [] with a printed line
    saying why (once per pipeline)."""
    pipeline = PIPELINE_OF_MAKER.get(getattr(make, "__name__", ""))
    reason = peer_dali.missing() or (None if pipeline else "no DALI version of this pipeline")
    if reason and pipeline not in _announced:
        _announced.add(pipeline)
        print(f"  {NAME}: skipped, {reason}", flush=True)
    return [] if reason else [NAME]


def loader(make, root: str, ann_file: str, workers: int, batch_size: int,
           count: int) -> DaliDetectionLoader:
    """DALI's version of `make`'s pipeline, threads = max(1, workers); its exact pipeline
    printed the first time for each pipeline."""
    pipeline = PIPELINE_OF_MAKER[make.__name__]
    built = DaliDetectionLoader(root, ann_file, pipeline, batch_size, max(1, workers), seed=0,
                                count=count)
    if pipeline not in _announced:
        _announced.add(pipeline)
        print(f"  {NAME} {peer_dali.version()}, {pipeline} (num_threads = max(1, workers) in "
              f"each group): {built.text}", flush=True)
    return built
