"""Small Hugging Face datasets for the ArrowColumns tests, made offline: 40 tiny photos
(Pillow; JPEG and PNG, several sizes, 4 classes) and 6 clips (soundfile; WAV and FLAC), as
`datasets.Dataset`s in memory (cells holding only paths), saved and loaded from disk (cells
holding the files' bytes, in 3 Arrow files) and read back from Parquet."""
from __future__ import annotations

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")   # never reach a hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
from PIL import Image  # noqa: E402

CLASSES = ["cat", "dog", "fox", "owl"]
PHOTOS, CLIPS = 40, 6


def make_photos(folder) -> tuple:
    """(paths, labels) of PHOTOS photos: smooth gradients with noise, every 7th a PNG."""
    rng = np.random.default_rng(19)
    folder.mkdir(parents=True, exist_ok=True)
    paths, labels = [], []
    for n in range(PHOTOS):
        height, width = 18 + (n * 5) % 23, 20 + (n * 7) % 29
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (height + width)], -1)
        pixels = np.clip(base + rng.integers(-30, 30, base.shape), 0, 255).astype(np.uint8)
        path = folder / (f"photo{n:02d}." + ("png" if n % 7 == 3 else "jpg"))
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(str(path))
        labels.append(n % len(CLASSES))
    return paths, labels


def make_clips(folder) -> tuple:
    """(paths, labels) of CLIPS clips of noise, 16 kHz, every third a FLAC."""
    rng = np.random.default_rng(7)
    folder.mkdir(parents=True, exist_ok=True)
    paths, labels = [], []
    for n in range(CLIPS):
        samples = (rng.standard_normal(400 + 97 * n) * 0.2).astype(np.float32)
        path = folder / (f"clip{n}." + ("flac" if n % 3 == 2 else "wav"))
        soundfile.write(path, samples, 16000, subtype="PCM_16")
        paths.append(str(path))
        labels.append(n % 2)
    return paths, labels


def in_memory(hf, paths, labels, column="image", feature=None):
    """A Dataset from file paths (cells hold paths, not bytes), labels a ClassLabel, and a
    column "n": each row's position in `paths`. (Cast from strings, as datasets' docs do:
    encoding Audio examples from paths would need torchcodec.)"""
    dataset = hf.Dataset.from_dict({column: paths, "label": labels,
                                    "n": list(range(len(paths)))})
    dataset = dataset.cast_column(column, feature or hf.Image(decode=False))
    return dataset.cast_column("label", hf.ClassLabel(names=CLASSES))


def saved(hf, dataset, folder):
    """The dataset saved in 3 Arrow files (the cells then hold the bytes) and loaded back."""
    dataset.save_to_disk(str(folder), num_shards=3)
    return hf.load_from_disk(str(folder))


def file_bytes(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()
