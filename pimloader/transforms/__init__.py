"""torchvision-style transforms that pimloader lowers into fused native steps.

The classes are torchvision.transforms.v2's own (same constructor arguments, defaults,
validation and random draws); `pimloader.transforms` re-exports them so that a pipeline
written against either module is the same object. `lower()` turns a Compose of them into a
`Plan` that draws each sample's parameters exactly as torchvision would and describes the
fused colour/pad/crop/resize/flip/convert/normalize step the native kernels execute. Which
ops lower, and to what, is one registry (`pimloader.transforms.registry`): every registered
op has its namesake here, and `register_op` adds one.

The audio feature transforms (Spectrogram, MelSpectrogram, AmplitudeToDB, MFCC,
FrequencyMasking, TimeMasking, MelScale) are torchaudio's, written in plain torch with
torchaudio's names, arguments, defaults and random draws, so that they run without
torchaudio; `pimloader.transforms.audio_spec.FeatureSpec.from_transforms` lowers a chain of
them (or of torchaudio's own) to the fused audio kernel. `Resample` is torchaudio's (the
same arguments, defaults and samples); the waveform augmentations of keyword spotting
(`CropOrPad`, `RandomCropOrPad`, `RandomTimeShift`, `RandomGain`, `AddBackgroundNoise`)
are pimloader's, each drawing its random numbers with the torch calls its docstring lists.
"""
from torchvision.transforms import ToTensor   # v1's: v2 deprecates its own
from torchvision.transforms.v2 import (
    CenterCrop,
    ClampBoundingBoxes,
    ColorJitter,
    Compose,
    ConvertBoundingBoxFormat,
    ConvertImageDtype,
    Grayscale,
    Identity,
    Normalize,
    Pad,
    PILToTensor,
    RandomCrop,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomIoUCrop,
    RandomPhotometricDistort,
    RandomResizedCrop,
    RandomShortestSize,
    RandomVerticalFlip,
    RandomZoomOut,
    Resize,
    SanitizeBoundingBoxes,
    ToDtype,
    ToImage,
    ToPureTensor,
)

from . import _audio_ops, _image_ops  # noqa: F401  (the registrations)
from .decode import Decode
from ._masking import FrequencyMasking, TimeMasking
from .params import Geometry, SampleParams
from .resample import Resample
from .waveform import (AddBackgroundNoise, CropOrPad, RandomCropOrPad, RandomGain,
                       RandomTimeShift)
from .plan import Plan
from ._lower import lower
from .registry import register_op
from .spectral import MFCC, AmplitudeToDB, MelScale, MelSpectrogram, Spectrogram

__all__ = [
    "Decode",  # encoded bytes -> image or waveform: the first step over shards and tables
    "CenterCrop", "ColorJitter", "Compose", "Grayscale", "Normalize", "Pad", "RandomCrop",
    "RandomGrayscale", "RandomHorizontalFlip", "RandomPhotometricDistort", "RandomResizedCrop",
    "RandomVerticalFlip", "Resize", "ToDtype", "ToImage", "ToPureTensor", "PILToTensor",
    "ConvertImageDtype", "Identity", "ToTensor",
    # detection: lowered on the image probe (transforms/probe.py)
    "RandomShortestSize", "RandomZoomOut", "RandomIoUCrop", "ClampBoundingBoxes",
    "SanitizeBoundingBoxes", "ConvertBoundingBoxFormat",
    "Geometry", "Plan", "SampleParams", "lower", "register_op",
    # torchaudio's spectral transforms and masks, in plain torch (torchaudio's names)
    "AmplitudeToDB", "FrequencyMasking", "MelScale", "MelSpectrogram", "MFCC", "Spectrogram",
    "TimeMasking",
    # waveform transforms: torchaudio's Resample, pimloader's augmentations
    "Resample", "AddBackgroundNoise", "CropOrPad", "RandomCropOrPad", "RandomGain",
    "RandomTimeShift",
]
