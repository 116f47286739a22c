"""NVIDIA DALI's CPU training pipeline over webdataset tar shards, as a benchmark contender
(an optional peer, as peer_dali.py): `fn.readers.webdataset(paths=..., ext=["jpg;png",
"cls"])`, shuffled, then peer_dali's training steps (region decode of a RandomResizedCrop box,
resize to 224x224, mirror + normalise to float32 CHW). DALI reads local paths only; labels
come back as the `cls` members' ASCII digits and are parsed per batch."""
from __future__ import annotations

import numpy as np
import torch

from benchmarks.calls import Call
from benchmarks.peer_dali import (PREFETCH, READER, STEPS, DaliEpochs, DaliLoader,
                                  build_pipeline, dense)


def reader_call(paths: list[str]) -> Call:
    return Call("fn.readers.webdataset", paths=list(paths), ext=["jpg;png", "cls"],
                missing_component_behavior="error", random_shuffle=True,
                pad_last_batch=True, name=READER)


def images_and_labels(outputs, keep: int, copy: bool):
    images = dense(outputs[0], copy)[:keep]
    labels = [int(bytes(np.asarray(outputs[1][i])).decode()) for i in range(keep)]
    return images, torch.tensor(labels)


class DaliShardLoader(DaliLoader):
    """(images, labels) batches of DALI's webdataset pipeline, one epoch per iteration (a
    DaliLoader whose reader is fn.readers.webdataset)."""

    def __init__(self, paths: list[str], batch_size: int, threads: int, seed: int) -> None:
        from nvidia.dali import Pipeline, fn, types
        self.plan = {"pipeline": Call("Pipeline", batch_size=batch_size, num_threads=threads,
                                      device_id=None, seed=seed, prefetch_queue_depth=PREFETCH),
                     "reader": reader_call(paths), "steps": STEPS["train"]}
        self.batch_size = batch_size
        self._epochs = DaliEpochs(build_pipeline(self.plan["pipeline"], {
            "fn": fn, "types": types, "Pipeline": Pipeline}, self._graph), batch_size,
            images_and_labels)
