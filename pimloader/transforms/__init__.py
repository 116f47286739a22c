"""torchvision-style transforms that pimloader lowers into fused native steps.

The classes are torchvision.transforms.v2's own (same constructor arguments, defaults,
validation and random draws); `pimloader.transforms` re-exports them so that a pipeline
written against either module is the same object. `lower()` turns a Compose of them into a
`Plan` that draws each sample's parameters exactly as torchvision would and describes the
fused crop/resize/flip/convert/normalize step the native kernels execute.
"""
from torchvision.transforms.v2 import (
    CenterCrop,
    ColorJitter,
    Compose,
    Grayscale,
    Normalize,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    ToDtype,
    ToImage,
)

from ._params import Geometry, SampleParams
from ._plan import Plan
from ._lower import lower

__all__ = [
    "CenterCrop", "ColorJitter", "Compose", "Grayscale", "Normalize", "Pad", "RandomCrop",
    "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Resize", "ToDtype",
    "ToImage", "Geometry", "Plan", "SampleParams", "lower",
]
