"""The image pipelines every contender runs, and torchvision's own ways of decoding a file."""
from __future__ import annotations

import io
import os

import torch
import torchvision.transforms.v2 as v2
from PIL import Image
from torchvision.io import ImageReadMode, decode_image

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
DTYPES = {"float32": torch.float32, "float16": torch.float16}


def make_transform(pipeline: str, dtype: str, pil: bool = False) -> v2.Compose:
    """The v2 pipeline; `pil`: PIL input, so PILToTensor goes right before ToDtype."""
    if pipeline == "train":
        geometry = [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]
    elif pipeline == "colour":
        geometry = [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                    v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4)]
    elif pipeline == "val":
        geometry = [v2.Resize(256), v2.CenterCrop(224)]
    else:
        raise ValueError(f"unknown pipeline {pipeline!r}")
    to_tensor = [v2.PILToTensor()] if pil else []
    return v2.Compose([*geometry, *to_tensor, v2.ToDtype(DTYPES[dtype], scale=True),
                       v2.Normalize(MEAN, STD)])


def read_bytes(path) -> bytearray:
    """The file's bytes in a writable buffer (torch.frombuffer wants one)."""
    with open(path, "rb") as file:
        data = bytearray(os.fstat(file.fileno()).st_size)
        file.readinto(data)
    return data


def decode_rgb(data: bytearray) -> torch.Tensor:
    return decode_image(torch.frombuffer(data, dtype=torch.uint8), mode=ImageReadMode.RGB)


def tensor_loader(path) -> torch.Tensor:
    """torchvision's tensor path: read the file, decode_image to a uint8 CHW RGB tensor."""
    return decode_rgb(read_bytes(path))


def decode_pil(data: bytearray) -> Image.Image:
    """What ImageFolder's default (PIL) loader does after opening the file."""
    image = Image.open(io.BytesIO(data))
    return image.convert("RGB")
