"""Writes fuzz/corpus/: a few tiny, valid inputs per target, from which atheris mutates.

    python fuzz/make_seeds.py

JPEGs are Pillow's (baseline 4:2:0, 4:4:4, greyscale, progressive, one with restart markers
every MCU row), WAVs libsndfile's (soundfile: 8/16/24/32-bit PCM, float, double,
WAVE_FORMAT_EXTENSIBLE), COCO files small instances documents (boxes, a polygon and an RLE
mask, an image without annotations), and the sample cache's inputs a few operation strings
(fuzz/targets/sample_cache.py reads them). The corpus is committed (a few KB in all), so a
fuzz run needs no step before it; rerun this after changing what the targets read.
"""
from __future__ import annotations

import io
import json
import os

import numpy as np
import soundfile
from PIL import Image

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def picture(height: int, width: int, mode: str = "RGB") -> Image.Image:
    """A small, deterministic image with edges and texture (so every table is used)."""
    rng = np.random.default_rng(height * 1000 + width)
    y, x = np.mgrid[0:height, 0:width]
    base = (x * 255 // max(width - 1, 1) + y * 7) % 256
    pixels = np.stack([base, (base + 85) % 256, 255 - base], -1) + rng.integers(0, 40, (height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image.convert(mode)


def jpeg(image: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def jpegs() -> dict[str, bytes]:
    return {
        "baseline_420.jpg": jpeg(picture(16, 24), quality=75),
        "baseline_444.jpg": jpeg(picture(8, 16), quality=90, subsampling=0),
        "grey.jpg": jpeg(picture(9, 11, "L"), quality=50),
        "progressive.jpg": jpeg(picture(16, 16), quality=60, progressive=True),
        "restarts.jpg": jpeg(picture(32, 32), quality=70, restart_marker_rows=1),
    }


def wav(frames: np.ndarray, rate: int, subtype: str, format: str = "WAV") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, frames, rate, subtype=subtype, format=format)
    return out.getvalue()


def wavs() -> dict[str, bytes]:
    t = np.arange(40) / 8000
    mono = 0.5 * np.sin(2 * np.pi * 440 * t)
    stereo = np.stack([mono, -0.25 * mono], -1)
    return {
        "pcm16_mono.wav": wav(mono, 8000, "PCM_16"),
        "pcm8_mono.wav": wav(mono[:16], 8000, "PCM_U8"),
        "pcm24_stereo.wav": wav(stereo[:16], 16000, "PCM_24"),
        "pcm32_stereo.wav": wav(stereo[:8], 22050, "PCM_32"),
        "float_mono.wav": wav(mono[:12], 44100, "FLOAT"),
        "double_stereo.wav": wav(stereo[:6], 48000, "DOUBLE"),
        "extensible_pcm16.wav": wav(stereo[:8], 16000, "PCM_16", "WAVEX"),
    }


def rle(height: int, width: int, box) -> dict:
    """pycocotools' compressed RLE of a box mask."""
    from pycocotools import mask
    left, top, w, h = box
    pixels = np.zeros((height, width), np.uint8, order="F")
    pixels[top:top + h, left:left + w] = 1
    encoded = mask.encode(pixels)
    return {"counts": encoded["counts"].decode(), "size": [height, width]}


def coco_files() -> dict[str, bytes]:
    categories = [{"id": 1, "name": "thing"}, {"id": 7, "name": "other"}]
    images = [{"id": 3, "file_name": "a.jpg", "height": 16, "width": 24},
              {"id": 1, "file_name": "b.jpg", "height": 8, "width": 16}]
    boxes = {"images": images, "categories": categories, "annotations": [
        {"id": 10, "image_id": 3, "category_id": 1, "bbox": [1, 2, 5, 4], "area": 20, "iscrowd": 0,
         "segmentation": [[1, 2, 6, 2, 6, 6, 1, 6]]},
        {"id": 11, "image_id": 3, "category_id": 7, "bbox": [0.5, 0, 10, 3.25], "area": 32.5,
         "iscrowd": 0, "segmentation": [[0.5, 0, 10.5, 0, 10.5, 3.25]]},
        {"id": 12, "image_id": 1, "category_id": 1, "bbox": [2, 1, 3, 3], "area": 9, "iscrowd": 1,
         "segmentation": {"counts": [17, 3, 5, 3, 5, 3, 92], "size": [8, 16]}}]}
    compressed = {"images": images[:1], "categories": categories, "annotations": [
        {"id": 5, "image_id": 3, "category_id": 7, "bbox": [3, 3, 2, 2], "area": 4, "iscrowd": 1,
         "segmentation": rle(16, 24, (3, 3, 2, 2))}]}
    empty = {"images": images, "categories": categories, "annotations": []}
    return {name: json.dumps(document, separators=(",", ":")).encode()
            for name, document in (("boxes.json", boxes), ("compressed_rle.json", compressed),
                                   ("no_annotations.json", empty))}


def cache_ops() -> dict[str, bytes]:
    """fuzz/targets/sample_cache.py's format: budget, size, then (kind, index, length) triples."""
    return {"fill.bin": bytes([40, 4, 1, 0, 10, 1, 1, 10, 0, 0, 0, 1, 2, 30, 0, 2, 0, 1, 3, 5]),
            "overflow.bin": bytes([5, 2, 1, 0, 6, 1, 1, 5, 1, 0, 1, 0, 1, 0]),
            "negative.bin": bytes([200, 8, 1, 255, 3, 0, 255, 0, 1, 254, 9, 0, 7, 0, 1, 8, 1])}


def main() -> None:
    for folder, files in (("jpeg", jpegs()), ("wav", wavs()), ("coco", coco_files()),
                          ("sample_cache", cache_ops())):
        os.makedirs(os.path.join(CORPUS, folder), exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(CORPUS, folder, name), "wb") as file:
                file.write(data)
    total = sum(os.path.getsize(os.path.join(root, f)) for root, _, fs in os.walk(CORPUS) for f in fs)
    print(f"fuzz/corpus: {total} bytes")


if __name__ == "__main__":
    main()
