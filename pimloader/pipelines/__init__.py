"""Per task, what runs for one batch: read and draw each sample, decode, and hand runs of
samples to a backend's fused kernel, writing into the batch slot.

`classification`: encoded images with labels (folders, lists of paths, tar shards, Arrow
columns, bytes under T.Decode, from a Dataset or an IterableDataset) -> fixed-size image
batches.
`detection`: COCO sets, images as bytes with torchvision targets under T.Decode (a list, a
Dataset, an IterableDataset) -> (image, target) samples, images from the fused kernel.
`audio`: encoded clips with labels (AudioFolders, bytes under T.Decode, from a Dataset or
an IterableDataset) -> features.
`in_memory`: images a dataset returns as uint8 tensors, through the same kernel.
`python_transform`: the loader's transform as Python (the fallback).

Each registers here as a task of the loader (loader/tasks.py), with what it takes and how
specific that is: the loader asks the most specific task that takes its dataset first.
"""
from pimloader.loader.tasks import Task, register_task

from . import audio, classification, detection, in_memory, python_transform

register_task(Task("detection", detection.takes, detection.build, specificity=30,
                   reads_encoded_files=True,
                   describes="a COCO detection set, or images as bytes with torchvision "
                             "detection targets under T.Decode() (a list, a Dataset, an "
                             "IterableDataset), with v2 joint transforms"))
register_task(Task("classification", classification.takes, classification.build,
                   specificity=20, reads_encoded_files=True,
                   describes="encoded images with labels (an ImageFolder / DatasetFolder, a "
                             "list of (path, target) pairs, tar shards, Arrow columns, any "
                             "dataset of (bytes, label) under T.Decode()), with a transform "
                             "pimloader lowers"))
register_task(Task("audio", audio.takes, audio.build, specificity=20, reads_encoded_files=True,
                   describes="encoded clips with labels (an AudioFolder, or clips as bytes "
                             "under T.Decode(sample_rate=...)) with a transform"))
register_task(Task("in_memory", in_memory.takes, in_memory.build, specificity=10,
                   describes="in-memory uint8 images with a transform the fused kernel runs"))
register_task(Task("python_transform", python_transform.takes, python_transform.build,
                   specificity=0, describes="any dataset with a transform, run as Python",
                   native=False))
