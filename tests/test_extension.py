"""A toy source, a toy op and a toy task, defined here and registered through the public API
only, feed PIMDataLoader with no edit under pimloader/ (issue 18's extension test).

- The source: a user's dataset of short clips, each a list of JPEG frames and a label; its
  `ClipSource` keeps every frame in one packed buffer (no per-sample objects) and declares
  the fields {"clip", "label"} (`register_source`).
- The op: `CornerCrop(size)`, the size x size corner at (0, 0), lowered as a geometric op
  through its draw (`register_op`).
- The task: clips whose source carries those fields, with a transform that lowers; each
  frame is decoded by pimloader's decoder and rendered through the fused kernel of the
  loader's backends (the router and the run batcher every built-in task uses), a clip
  being a [T, 3, H, W] uint8 tensor (`register_task`).

Oracle: Pillow's decode of each frame and torchvision's v2 ops on it (CornerCrop's Python
`transform` is torchvision's crop), collated by torch's DataLoader.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from pimloader import PIMDataLoader, Task, decode, register_task, unregister_task
from pimloader import transforms as T
from pimloader.backends.select import CPU, Backends
from pimloader.datasets import EncodedSample, Source, register_source, source_of
from pimloader.datasets.index import Packed, Targets
from pimloader.loader import BatchProducer, Fetcher, Pipeline
from pimloader.pipelines.runs import RunBatcher

FRAMES, HEIGHT, WIDTH = 4, 30, 40
CLIP_FIELDS = frozenset({"clip", "label"})


# -- the source ------------------------------------------------------------------------------

class Clips(Dataset):
    """A user's dataset: items (list of JPEG frames as bytes, label)."""

    def __init__(self, clips: list[list[bytes]], labels: list[int]) -> None:
        self.clips, self.labels = clips, labels

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, index):
        return self.clips[index], self.labels[index]


class ClipSource(Source):
    fields = CLIP_FIELDS

    def __init__(self, dataset: Clips) -> None:
        self.frames = Packed([frame for clip in dataset.clips for frame in clip])
        self.starts = np.cumsum([0] + [len(clip) for clip in dataset.clips])
        self.labels = Targets(dataset.labels)

    def __len__(self):
        return len(self.starts) - 1

    def metadata(self, index):
        return self.labels[index], f"clip {index}"

    def read(self, index):
        frames = [self.frames[i] for i in range(self.starts[index], self.starts[index + 1])]
        return EncodedSample(frames, *self.metadata(index))


register_source(Clips, ClipSource)


# -- the op ----------------------------------------------------------------------------------

class CornerCrop(v2.Transform):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def transform(self, inpt, params):
        return F.crop(inpt, 0, 0, self.size, self.size)


def draw_corner_crop(step, size, channels):
    """(params for replay, size after, channels after, what it does to the geometry)."""
    out = (step.size, step.size)
    return {}, out, channels, lambda geometry: geometry.crop(0, 0, *out)


T.register_op(CornerCrop, "geometry", draw=draw_corner_crop,
              output_size=lambda step, size: (step.size, step.size))


# -- the task --------------------------------------------------------------------------------

class ClipFrames(Pipeline):
    def __init__(self, source, plan) -> None:
        self.source, self.plan = source, plan

    def make_producer(self, context):
        router = context.resources.get(Backends).router(CPU)
        fetcher = FrameFetcher(self, context.auto_collation, router)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)

    def clip(self, index: int, router):
        sample = self.source.read(index)
        out = torch.empty(len(sample.data), 3, *self.plan.output_size, dtype=torch.uint8)
        runs = RunBatcher(router, len(out))
        for row, data in enumerate(sample.data):
            pixels = decode.decode_image(data, name=f"{sample.name} frame {row}")
            geometry = self.plan.draw(*pixels.shape[:2], 3).geometry
            runs.add(out, row, pixels, geometry.box, geometry)
        runs.flush()
        return out, sample.target


class FrameFetcher(Fetcher):
    def __init__(self, pipeline: ClipFrames, auto_collation: bool, router) -> None:
        super().__init__(auto_collation)
        self.pipeline, self.router = pipeline, router

    def fetch(self, index, each=None):
        if not self.auto_collation:
            return self.pipeline.clip(index, self.router)
        return [self.pipeline.clip(i, self.router) for i in index]


def takes_clips(dataset, transform) -> bool:
    source = source_of(dataset)
    return transform is not None and source is not None and CLIP_FIELDS <= source.fields


def build_clips(dataset, transform, options):
    plan = T.lower(transform, warn=False)
    if plan.tail or plan.elementwise or plan.output_size is None:
        return None        # the Python path would be needed: leave it to torch's
    return ClipFrames(source_of(dataset), plan)


CLIP_TASK = Task("clip_frames_extension_test", takes_clips, build_clips, specificity=25,
                 describes="clips of JPEG frames with a transform that lowers")


# -- the test --------------------------------------------------------------------------------

@pytest.fixture
def clip_task():
    register_task(CLIP_TASK)
    yield CLIP_TASK
    unregister_task(CLIP_TASK.name)


@pytest.fixture(scope="module")
def clips() -> Clips:
    rng = np.random.default_rng(11)
    encoded, labels = [], []
    for clip in range(9):
        frames = []
        for _ in range(FRAMES):
            pixels = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="JPEG", quality=90)
            frames.append(out.getvalue())
        encoded.append(frames)
        labels.append(clip % 4)
    return Clips(encoded, labels)


class Decoded(Dataset):
    """The oracle: Pillow's decode of each frame, then torchvision's ops."""

    def __init__(self, clips: Clips, transform) -> None:
        self.clips, self.transform = clips, transform

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, index):
        frames, label = self.clips[index]
        return torch.stack([self.transform(F.pil_to_tensor(Image.open(io.BytesIO(frame))))
                            for frame in frames]), label


TRANSFORM = v2.Compose([CornerCrop(24), v2.Resize((12, 16), antialias=True)])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_source_an_op_and_a_task_from_outside_the_package(clip_task, clips, num_workers):
    loader = PIMDataLoader(clips, batch_size=4, num_workers=num_workers, transform=TRANSFORM)
    assert isinstance(loader._pipeline, ClipFrames)
    assert [type(step) for step in loader._pipeline.plan.geometric] == [CornerCrop, v2.Resize]
    expected = list(DataLoader(Decoded(clips, TRANSFORM), batch_size=4))
    got = list(loader)
    assert [len(labels) for _, labels in got] == [4, 4, 1]
    for (frames, labels), (want, want_labels) in zip(got, expected):
        assert frames.shape == want.shape == (len(labels), FRAMES, 3, 12, 16)
        assert torch.equal(labels, want_labels)
        assert torch.equal(frames, want), int((frames.int() - want.int()).abs().max())
    assert loader.stats()[0].shared_batches == 3      # stacked into the loader's slots
    loader.close()


def test_without_the_task_the_same_loader_is_torchs(clips):
    loader = PIMDataLoader(clips, batch_size=4)
    assert loader._pipeline is None                   # no registered task takes the clips
    assert [labels.tolist() for _, labels in loader] == [[0, 1, 2, 3], [0, 1, 2, 3], [0]]
