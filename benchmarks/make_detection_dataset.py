"""Make a COCO-format detection set of real photographs, offline and reproducible from a seed.

Objects are cut from the photographs bundled with scikit-image, with their silhouettes as
masks where a simple rule segments them (every coin of `coins` by Otsu's threshold, the
cameraman's dark coat and camera, the horse's drawn silhouette filled with the cat's fur)
and an ellipse or a rectangle where not (the cat's face, the astronaut's face, the coffee
cup on its saucer, the rocket). They are pasted at random scales, flips and positions (some
across the border, some over each other) onto other real photographs cropped to COCO-like
sizes (640x480, portrait 480x640, 640x427, 500x375, 612x612, 640x360), 1-15 per image.

Each annotation is what remains visible of its object: `bbox` (x, y, w, h), `area` (the
mask's pixels), `segmentation` as COCO polygons (iscrowd 0) or, for about one object in
twenty, compressed RLE (iscrowd 1), `category_id`. A few images are greyscale JPEGs, one is
a CMYK JPEG (Adobe's inverted polarity, as Pillow writes it), `empty=` adds images with no
annotation. The instances JSON loads in pycocotools.

    python -m benchmarks.make_detection_dataset --count 300 --seed 0 --root /tmp/coco_like
"""
from __future__ import annotations

import argparse
import functools
import io
import json
import time
from pathlib import Path

import numpy as np
from PIL import Image

from .make_dataset import DATA_DIR, load_photo
from .progress import bar

DEFAULT_ROOT = DATA_DIR / "coco_like"
ANNOTATIONS = "annotations/instances.json"
GENERATOR_VERSION = 1

CANVASES = ((640, 480), (480, 640), (640, 427), (500, 375), (612, 612), (640, 360))
CANVAS_WEIGHTS = (0.4, 0.25, 0.15, 0.08, 0.07, 0.05)
BACKGROUNDS = ("grass", "gravel", "brick", "hubble_deep_field", "moon", "page", "rocket",
               "motorcycle_left", "immunohistochemistry", "coffee", "astronaut", "camera",
               "retina", "text")
CATEGORIES = ("coin", "cat", "person", "face", "cup", "rocket", "horse")
GREY_FRACTION = 0.05
CROWD_FRACTION = 0.05
MIN_VISIBLE_PIXELS = 12


def _ellipse(height: int, width: int) -> np.ndarray:
    rows, cols = np.ogrid[:height, :width]
    return (((rows + 0.5 - height / 2) / (height / 2)) ** 2
            + ((cols + 0.5 - width / 2) / (width / 2)) ** 2) <= 1.0


def _rgb(name: str) -> np.ndarray:
    return np.asarray(load_photo(name).convert("RGB"))


def _largest_components(mask: np.ndarray, count: int, min_pixels: int) -> list[np.ndarray]:
    from scipy import ndimage
    labels, found = ndimage.label(ndimage.binary_fill_holes(mask))
    sizes = ndimage.sum(mask, labels, range(1, found + 1))
    order = [i + 1 for i in np.argsort(sizes)[::-1][:count] if sizes[i] >= min_pixels]
    return [ndimage.binary_fill_holes(labels == label) for label in order]


def _cut(pixels: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = np.nonzero(mask)
    box = slice(rows.min(), rows.max() + 1), slice(cols.min(), cols.max() + 1)
    return pixels[box], mask[box]


@functools.cache
def object_library() -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(category_id, RGB pixels, silhouette mask) of every object that can be pasted."""
    from skimage.filters import threshold_otsu
    import skimage.data
    objects = []
    coins = np.asarray(load_photo("coins"))
    for mask in _largest_components(coins > threshold_otsu(coins), 24, 300):
        objects.append((1, *_cut(_rgb("coins"), mask)))
    cat = _rgb("chelsea")
    objects.append((2, cat[0:274, 55:397], _ellipse(274, 342)))
    camera = np.asarray(load_photo("camera"))
    dark = np.zeros_like(camera, bool)
    dark[60:, :400] = camera[60:, :400] < 60
    person = _largest_components(dark, 1, 1000)[0]
    objects.append((3, *_cut(_rgb("camera"), person)))
    objects.append((4, _rgb("astronaut")[15:170, 165:285], _ellipse(155, 120)))
    objects.append((5, _rgb("coffee")[110:395, 70:485], _ellipse(285, 415)))
    rocket = _rgb("rocket")[120:395, 292:342]
    objects.append((6, rocket, np.ones(rocket.shape[:2], bool)))
    horse = ~skimage.data.horse()
    horse_mask = horse[np.ix_(horse.any(1), horse.any(0))]
    fur = np.asarray(load_photo("chelsea").convert("RGB").resize(horse_mask.shape[::-1]))
    objects.append((7, fur, horse_mask))
    return objects


def _background(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    photo = load_photo(BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]).convert("RGB")
    scale = max(width / photo.width, height / photo.height) * rng.uniform(1.0, 1.5)
    crop_w = min(photo.width, round(width / scale))
    crop_h = min(photo.height, round(height / scale))
    left = int(rng.integers(0, photo.width - crop_w + 1))
    top = int(rng.integers(0, photo.height - crop_h + 1))
    return photo.crop((left, top, left + crop_w, top + crop_h)).resize(
        (width, height), Image.Resampling.BILINEAR)


def _paste(canvas: np.ndarray, rng: np.random.Generator, library) -> tuple[int, np.ndarray]:
    """Paste one random object; returns (category_id, its full-canvas mask)."""
    category = int(rng.integers(1, len(CATEGORIES) + 1))   # each category as likely
    candidates = [entry for entry in library if entry[0] == category]
    _, pixels, mask = candidates[int(rng.integers(len(candidates)))]
    height, width = canvas.shape[:2]
    longer = min(height, width) * float(np.exp(rng.uniform(np.log(0.06), np.log(0.7))))
    scale = longer / max(mask.shape)
    size = (max(2, round(mask.shape[1] * scale)), max(2, round(mask.shape[0] * scale)))
    pixels = np.asarray(Image.fromarray(pixels).resize(size, Image.Resampling.BILINEAR))
    mask = np.asarray(Image.fromarray(mask).resize(size, Image.Resampling.NEAREST))
    if rng.random() < 0.5:
        pixels, mask = pixels[:, ::-1], mask[:, ::-1]
    left = int(rng.integers(-size[0] // 3, width - 2 * size[0] // 3 + 1))
    top = int(rng.integers(-size[1] // 3, height - 2 * size[1] // 3 + 1))
    full = np.zeros((height, width), bool)
    rows = slice(max(top, 0), min(top + size[1], height))
    cols = slice(max(left, 0), min(left + size[0], width))
    part = mask[rows.start - top:rows.stop - top, cols.start - left:cols.stop - left]
    full[rows, cols] = part
    canvas[rows, cols][part] = pixels[rows.start - top:rows.stop - top,
                                      cols.start - left:cols.stop - left][part]
    return category, full


def _polygons(mask: np.ndarray) -> list[list[float]]:
    from skimage.measure import approximate_polygon, find_contours
    rows, cols = np.nonzero(mask)
    top, left = rows.min(), cols.min()
    crop = np.pad(mask[top:rows.max() + 1, left:cols.max() + 1], 1)
    polygons = []
    for contour in find_contours(crop.astype(np.uint8), 0.5):
        contour = approximate_polygon(contour, tolerance=0.75)
        if len(contour) >= 3:
            xy = np.stack([contour[:, 1] + left - 1 + 0.5, contour[:, 0] + top - 1 + 0.5], 1)
            polygons.append([round(float(v), 2) for v in xy.ravel()])
    return polygons


def _annotation(mask: np.ndarray, category: int, crowd: bool) -> dict | None:
    from pycocotools import mask as coco_mask
    rows, cols = np.nonzero(mask)
    if len(rows) < MIN_VISIBLE_PIXELS:
        return None
    if crowd:
        rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
        segmentation = {"size": list(rle["size"]), "counts": rle["counts"].decode("ascii")}
    else:
        segmentation = _polygons(mask)
        if not segmentation:
            return None
    x, y = int(cols.min()), int(rows.min())
    bbox = [float(x), float(y), float(cols.max() + 1 - x), float(rows.max() + 1 - y)]
    return {"segmentation": segmentation, "area": float(len(rows)), "iscrowd": int(crowd),
            "bbox": bbox, "category_id": category}


def _encode(image: Image.Image, kind: str, quality: int) -> bytes:
    buffer = io.BytesIO()
    if kind == "grey":
        image = image.convert("L")
    elif kind == "cmyk":
        image = image.convert("CMYK")
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _kinds(count: int, rng: np.random.Generator) -> list[str]:
    kinds = ["rgb"] * count
    order = rng.permutation(count).tolist()
    for position in order[:max(1, round(count * GREY_FRACTION))]:
        kinds[position] = "grey"
    if count > 2:
        kinds[order[-1]] = "cmyk"
    return kinds


def make_image(index: int, kind: str, seed: int, objects: bool = True):
    """(encoded JPEG, width, height, [annotations without ids]) of image `index`."""
    rng = np.random.default_rng([seed, index])
    width, height = CANVASES[int(rng.choice(len(CANVASES), p=CANVAS_WEIGHTS))]
    canvas = np.array(_background(rng, width, height))
    pasted = []
    for _ in range(int(rng.integers(1, 16)) if objects else 0):
        category, mask = _paste(canvas, rng, object_library())
        for _, earlier in pasted:
            earlier &= ~mask          # the new object hides what it covers
        pasted.append((category, mask))
    crowd = rng.random(len(pasted)) < CROWD_FRACTION
    annotations = [a for (category, mask), is_crowd in zip(pasted, crowd)
                   if (a := _annotation(mask, category, bool(is_crowd))) is not None]
    data = _encode(Image.fromarray(canvas), kind, int(rng.integers(80, 96)))
    return data, width, height, annotations


def make_detection_dataset(root: str | Path = DEFAULT_ROOT, count: int = 300, seed: int = 0,
                           empty: int = 0, verbose: bool = False) -> Path:
    """Write `count` images (plus `empty` without annotations) under root/images and their
    instances JSON at root/annotations/instances.json (returned). Kept when it already holds
    these parameters."""
    root = Path(root)
    ann_file = root / ANNOTATIONS
    params = {"count": count, "seed": seed, "empty": empty, "version": GENERATOR_VERSION}
    if ann_file.is_file() and json.loads(ann_file.read_text()).get("info", {}).get(
            "params") == params:
        return ann_file
    if count < 1 or empty < 0:
        raise ValueError(f"count must be >= 1 and empty >= 0, got {count} and {empty}")
    (root / "images").mkdir(parents=True, exist_ok=True)
    ann_file.parent.mkdir(parents=True, exist_ok=True)
    kinds = _kinds(count, np.random.default_rng([seed, count]))
    images, annotations, started = [], [], time.perf_counter()
    for index in bar(range(count + empty), desc="detection set", unit="image"):
        kind = kinds[index] if index < count else "rgb"
        data, width, height, found = make_image(index, kind, seed, objects=index < count)
        name = f"{index:06d}.jpg"
        (root / "images" / name).write_bytes(data)
        image_id = index + 1
        images.append({"id": image_id, "file_name": name, "width": width, "height": height})
        for annotation in found:
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, **annotation})
        if verbose and (index + 1) % 50 == 0:
            print(f"  {index + 1}/{count + empty} images, {len(annotations)} objects, "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
    document = {"info": {"description": "pimloader's COCO-like set of scikit-image photos",
                         "params": params},
                "images": images, "annotations": annotations,
                "categories": [{"id": i + 1, "name": name, "supercategory": "object"}
                               for i, name in enumerate(CATEGORIES)]}
    ann_file.write_text(json.dumps(document))
    return ann_file


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--empty", type=int, default=0, help="images without annotations")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    ann_file = make_detection_dataset(args.root, args.count, args.seed, args.empty, verbose=True)
    print(f"{ann_file} ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
