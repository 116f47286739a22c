"""Step 2 of the flow, fetch: dataset adapters that let a worker read a sample as encoded
bytes and a target instead of calling the dataset's `__getitem__`.

`folders`: torchvision's ImageFolder / DatasetFolder and lists of (path, target) pairs.
Detection (COCO-style) and audio folders get their own module here.
"""
from .folders import EncodedSample, EncodedSource, ImageFolder

__all__ = ["ImageFolder", "EncodedSample", "EncodedSource"]
