"""Step 2 of the flow, fetch: dataset adapters that let a worker read a sample as encoded
bytes and a target instead of calling the dataset's `__getitem__`.

`folders`: torchvision's ImageFolder / DatasetFolder and lists of (path, target) pairs.
`audio`: AudioFolder, class folders of WAV/FLAC clips (the Speech Commands layout).
`coco`: COCO detection sets (pimloader's CocoDetection, torchvision's, v2-wrapped or not).
"""
from .audio import AudioFolder
from .coco import CocoDetection
from .folders import EncodedSample, EncodedSource, ImageFolder

__all__ = ["AudioFolder", "CocoDetection", "ImageFolder", "EncodedSample", "EncodedSource"]
