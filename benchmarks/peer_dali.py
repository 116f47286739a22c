"""NVIDIA DALI's CPU classification pipelines as a benchmark contender (an optional peer:
`pip install nvidia-dali-cuda120`, which `make bench` does).

Every operator runs on the CPU (`device_id=None`, `device="cpu"`); no GPU is needed.

- train: `readers.file` (shuffled) -> `decoders.image_random_crop` (decodes only the region
  of a RandomResizedCrop box: area 0.08-1 of the image, aspect 3/4-4/3, 10 attempts) ->
  `resize` to 224x224 (linear, antialiased) -> `crop_mirror_normalize` (mirror with
  probability 1/2, float32, CHW, ImageNet mean and std);
- val: `readers.file` -> `decoders.image` -> `resize` of the shorter side to 256 ->
  `crop_mirror_normalize` (centre crop 224x224, float32, CHW, ImageNet mean and std).

The pipelines are written as Calls (benchmarks/calls.py): what runs is what `describe` prints.

DaliLoader drives the pipeline with DALI's scheduling API (schedule_run, share_outputs,
release_outputs), as DALI's DALIGenericIterator does, keeping `prefetch_queue_depth` runs in
flight, with one difference: it schedules no run past the epoch's last batch. DALI's own
iterator keeps prefetching across the end of an epoch, so between two of its epochs it
would go on computing the next epoch's first batches while the other contenders run theirs
(taking their cores, and starting its next timed epoch ahead). torch's DataLoader and FFCV's
Loader stop at the end of an epoch; so does this.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from benchmarks.calls import Call, Name
from benchmarks.pipelines import MEAN, STD

READER = "Reader"
PREFETCH = 2  # DALI's default prefetch_queue_depth
MEAN_255 = [round(255 * value, 6) for value in MEAN]  # as printed: no 57.120000000000005
STD_255 = [round(255 * value, 6) for value in STD]
RGB = Name("types.RGB")
FLOAT = Name("types.FLOAT")
LINEAR = Name("types.INTERP_LINEAR")

STEPS = {
    "train": (
        Call("fn.decoders.image_random_crop", device="cpu", output_type=RGB,
             random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10),
        Call("fn.resize", resize_x=224, resize_y=224, interp_type=LINEAR, antialias=True),
        Call("fn.crop_mirror_normalize", dtype=FLOAT, output_layout="CHW", mean=MEAN_255,
             std=STD_255, mirror=Call("fn.random.coin_flip", probability=0.5)),
    ),
    "val": (
        Call("fn.decoders.image", device="cpu", output_type=RGB),
        Call("fn.resize", resize_shorter=256, interp_type=LINEAR, antialias=True),
        Call("fn.crop_mirror_normalize", dtype=FLOAT, output_layout="CHW", crop=[224, 224],
             crop_pos_x=0.5, crop_pos_y=0.5, mean=MEAN_255, std=STD_255),
    ),
}


def prefetch_for(samples: int, batch_size: int) -> int:
    """PREFETCH, or fewer for an epoch of fewer batches (no run may spill into the next)."""
    return max(1, min(PREFETCH, math.ceil(samples / batch_size)))


def missing() -> str | None:
    """Why DALI cannot run here, or None."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except Exception as error:  # an ImportError, or a broken install's own error
        return f"not installed: {type(error).__name__}: {error}"
    return None


def version() -> str:
    import nvidia.dali
    return nvidia.dali.__version__


def calls(root: Path, pipeline: str, batch_size: int, threads: int, seed: int,
          shuffle: bool = True) -> dict:
    if pipeline not in STEPS:
        raise ValueError(f"DALI: unknown pipeline {pipeline!r} (known: {', '.join(STEPS)})")
    return {
        "pipeline": Call("Pipeline", batch_size=batch_size, num_threads=threads,
                         device_id=None, seed=seed, prefetch_queue_depth=PREFETCH),
        "reader": Call("fn.readers.file", file_root=str(root), random_shuffle=shuffle,
                       pad_last_batch=True, name=READER),
        "steps": STEPS[pipeline],
    }


def describe(plan: dict) -> str:
    steps = "\n".join(f"    -> {step.text()}" for step in plan["steps"])
    return (f"nvidia.dali {plan['pipeline'].text()}:\n    {plan['reader'].text()}\n{steps}\n"
            f"  outputs (images, labels) as torch tensors (DLPack), epochs of the reader's "
            f"epoch_size, the padded last batch cut; no run scheduled past an epoch's end")


class DaliEpochs:
    """Epochs of a built DALI pipeline whose reader is named READER: iterating gives one
    epoch, `convert(outputs, keep, copy)` per batch, where `keep` is how many of the batch's
    samples are not the reader's padding of the last batch, and `copy` says whether the
    outputs' buffers go back to DALI when the batch is released (then `convert` must copy
    what it keeps; with DALI's dynamic executor they stay the caller's)."""

    def __init__(self, pipe, batch_size: int, convert):
        self._pipe, self.batch_size, self._convert = pipe, batch_size, convert
        self.samples = pipe.epoch_size(READER)
        self.batches = math.ceil(self.samples / batch_size)
        self._prefetch = pipe.prefetch_queue_depth
        if self.batches < self._prefetch:
            raise ValueError(f"DALI: {self.samples} samples make {self.batches} batches of "
                             f"{batch_size}, fewer than the {self._prefetch} prefetched")
        self._started = self._broken = False

    def _schedule_first_runs(self) -> None:
        """The prefetched runs: DALI's first schedule_run prefetches them all, later ones run
        one each."""
        if not self._started:
            self._pipe.schedule_run()
            self._started = True
            return
        for _ in range(self._prefetch):
            self._pipe.schedule_run()

    def __iter__(self):
        if self._broken:
            raise RuntimeError("DALI: an earlier epoch was left before its end, so runs of "
                               "it are still queued; make a new loader")
        self._schedule_first_runs()
        scheduled, delivered = self._prefetch, 0
        self._broken = True
        for _ in range(self.batches):
            keep = min(self.batch_size, self.samples - delivered)
            batch = self._convert(self._pipe.share_outputs(), keep,
                                  not self._pipe.exec_dynamic)
            self._pipe.release_outputs()
            if scheduled < self.batches:
                self._pipe.schedule_run()
                scheduled += 1
            delivered += keep
            yield batch
        self._broken = False


def build_pipeline(plan_pipeline: Call, namespace: dict, outputs):
    """The DALI Pipeline `plan_pipeline` makes, its graph set by `outputs(namespace)` (the
    nodes to output), built."""
    pipe = plan_pipeline.run(namespace)
    with pipe:
        pipe.set_outputs(*outputs(namespace))
    pipe.build()
    return pipe


def dense(output, copy: bool) -> torch.Tensor:
    """A batch output of equal-shape samples as one torch tensor (DLPack)."""
    tensor = torch.from_dlpack(output.as_tensor())
    return tensor.clone() if copy else tensor


def images_and_labels(outputs, keep: int, copy: bool):
    """Dense (images, labels) torch tensors of a batch, the padding cut."""
    images, labels = (dense(output, copy) for output in outputs)
    return images[:keep], labels.view(-1)[:keep]


class DaliLoader:
    """(images, labels) batches of one DALI pipeline, one epoch per iteration."""

    def __init__(self, root: Path, pipeline: str, batch_size: int, threads: int, seed: int,
                 shuffle: bool = True):
        from nvidia.dali import Pipeline, fn, types

        self.plan = calls(root, pipeline, batch_size, threads, seed, shuffle)
        self.text = describe(self.plan)
        self.batch_size = batch_size
        self._epochs = DaliEpochs(build_pipeline(self.plan["pipeline"], {
            "fn": fn, "types": types, "Pipeline": Pipeline}, self._graph), batch_size,
            images_and_labels)
        self.samples, self.batches = self._epochs.samples, self._epochs.batches

    def _graph(self, namespace: dict):
        images, labels = self.plan["reader"].run(namespace)
        for step in self.plan["steps"]:
            images = step.run(namespace, images)
        return images, labels

    def __iter__(self):
        return iter(self._epochs)

    def close(self) -> None:
        self._epochs = None
