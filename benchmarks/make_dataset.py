"""Make an ImageNet-like folder of real photographs, byte for byte reproducible from a seed.

The photographs are those bundled inside the scikit-image wheel (no network needed). Each file
is a random crop of one of them, rescaled to an ImageNet-like size (longer side 375-500 px, a
few up to 1000 px), flipped at random and saved as a 4:2:0 JPEG of quality 75-95, in
`root/classNNN/NNNN.JPEG`. As in ImageNet, a few files are greyscale JPEGs, one is a
progressive JPEG and one is a PNG that carries a .JPEG name (like ImageNet's
n02105855_2933.JPEG). `root/manifest.json` records the parameters and every file's SHA-256.

    python -m benchmarks.make_dataset --count 500 --classes 10 --seed 0
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import io
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.progress import bar

DATA_DIR = Path(__file__).resolve().parent / "results" / "data"
DEFAULT_ROOT = DATA_DIR / "imagenet_like"
QUICK = {"count": 40, "classes": 4}
MANIFEST_NAME = "manifest.json"
# Bump when the generator changes, so that existing folders are regenerated.
GENERATOR_VERSION = 1

COLOUR_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
                 "immunohistochemistry", "retina", "motorcycle_left", "motorcycle_right")
GREY_PHOTOS = ("camera", "moon", "coins", "clock", "text")

LONGER_SIDE = (375, 500)
LARGE_LONGER_SIDE = (500, 1000)
LARGE_FRACTION = 0.05
GREY_FRACTION = 0.02
CROP_AREA = (0.35, 1.0)
CROP_ASPECT = (3 / 4, 4 / 3)
JPEG_QUALITY = (75, 95)
JPEG_SUBSAMPLING_420 = 2


@dataclass(frozen=True)
class Params:
    count: int = 500
    classes: int = 10
    seed: int = 0
    greyscale: bool = True
    progressive: bool = True
    png: bool = True
    generator_version: int = GENERATOR_VERSION


@dataclass(frozen=True)
class FileSpec:
    index: int
    kind: str  # "jpeg", "grey", "progressive" or "png"


@functools.cache
def load_photo(name: str) -> Image.Image:
    import skimage.data

    if name.startswith("motorcycle_"):
        left, right, _disparity = skimage.data.stereo_motorcycle()
        pixels = left if name == "motorcycle_left" else right
    else:
        pixels = getattr(skimage.data, name)()
    return Image.fromarray(pixels)


def plan_files(params: Params) -> list[FileSpec]:
    """Which index gets which kind of file; the special kinds are a few, chosen by the seed."""
    if not 1 <= params.classes <= params.count:
        raise ValueError(f"classes={params.classes} must be between 1 and count={params.count}")
    rng = np.random.default_rng([params.seed, params.count])
    special_counts = {
        "grey": max(1, round(params.count * GREY_FRACTION)) if params.greyscale else 0,
        "progressive": 1 if params.progressive else 0,
        "png": 1 if params.png else 0,
    }
    if sum(special_counts.values()) > params.count:
        raise ValueError(f"count={params.count} is too small for the special files")
    kinds = ["jpeg"] * params.count
    shuffled = iter(rng.permutation(params.count).tolist())
    for kind, how_many in special_counts.items():
        for _ in range(how_many):
            kinds[next(shuffled)] = kind
    return [FileSpec(index, kind) for index, kind in enumerate(kinds)]


def random_crop_box(rng: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    area = width * height * rng.uniform(*CROP_AREA)
    aspect = np.exp(rng.uniform(np.log(CROP_ASPECT[0]), np.log(CROP_ASPECT[1])))
    crop_w = min(width, max(1, round(np.sqrt(area * aspect))))
    crop_h = min(height, max(1, round(np.sqrt(area / aspect))))
    left = int(rng.integers(0, width - crop_w + 1))
    top = int(rng.integers(0, height - crop_h + 1))
    return left, top, left + crop_w, top + crop_h


def random_size(rng: np.random.Generator, crop_w: int, crop_h: int) -> tuple[int, int]:
    side_range = LARGE_LONGER_SIDE if rng.random() < LARGE_FRACTION else LONGER_SIDE
    longer = int(rng.integers(side_range[0], side_range[1] + 1))
    scale = longer / max(crop_w, crop_h)
    return max(1, round(crop_w * scale)), max(1, round(crop_h * scale))


def render_image(spec: FileSpec, seed: int) -> tuple[Image.Image, str]:
    rng = np.random.default_rng([seed, spec.index])
    sources = GREY_PHOTOS if spec.kind == "grey" else COLOUR_PHOTOS
    source = sources[int(rng.integers(len(sources)))]
    photo = load_photo(source)
    crop = photo.crop(random_crop_box(rng, *photo.size))
    image = crop.resize(random_size(rng, *crop.size), Image.Resampling.LANCZOS)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image, source


def encode(image: Image.Image, spec: FileSpec, rng: np.random.Generator) -> bytes:
    buffer = io.BytesIO()
    if spec.kind == "png":
        image.save(buffer, format="PNG")
    else:
        quality = int(rng.integers(JPEG_QUALITY[0], JPEG_QUALITY[1] + 1))
        image.save(buffer, format="JPEG", quality=quality, subsampling=JPEG_SUBSAMPLING_420,
                   progressive=spec.kind == "progressive")
    return buffer.getvalue()


def relative_path(spec: FileSpec, params: Params) -> str:
    width = max(4, len(str(params.count - 1)))
    return f"class{spec.index % params.classes:03d}/{spec.index:0{width}d}.JPEG"


def write_file(root: Path, spec: FileSpec, params: Params) -> dict:
    image, source = render_image(spec, params.seed)
    encoded = encode(image, spec, np.random.default_rng([params.seed, spec.index, 1]))
    path = relative_path(spec, params)
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(encoded)
    return {"path": path, "kind": spec.kind, "source": source, "width": image.width,
            "height": image.height, "bytes": len(encoded),
            "sha256": hashlib.sha256(encoded).hexdigest()}


def read_manifest(root: Path) -> dict | None:
    try:
        return json.loads((root / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        return None


def is_complete(root: Path, params: Params) -> bool:
    manifest = read_manifest(root)
    return (manifest is not None and manifest["params"] == asdict(params)
            and all((root / entry["path"]).is_file() for entry in manifest["files"]))


def ensure_replaceable(root: Path) -> None:
    """Refuse to replace a folder that this script did not make."""
    if root.exists() and read_manifest(root) is None and any(root.iterdir()):
        raise FileExistsError(f"{root} holds files but no {MANIFEST_NAME}; not touching it")


def write_folder(root: Path, params: Params) -> None:
    plan = bar(plan_files(params), desc=f"making {params.count} photos", unit="file")
    files = [write_file(root, spec, params) for spec in plan]
    manifest = {"params": asdict(params), "files": files}
    (root / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")


def make_imagenet_like(root: str | Path = DEFAULT_ROOT, count: int = 500, classes: int = 10,
                       seed: int = 0, greyscale: bool = True, progressive: bool = True,
                       png: bool = True) -> Path:
    """Build the folder at `root` (or keep it, if it already holds these parameters).

    The folder is built beside `root` and then moved there, so that an interrupted run never
    leaves a folder that looks complete.
    """
    root = Path(root)
    params = Params(count, classes, seed, greyscale, progressive, png)
    if is_complete(root, params):
        return root
    ensure_replaceable(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        write_folder(built, params)
        shutil.rmtree(root, ignore_errors=True)
        built.rename(root)
    finally:
        shutil.rmtree(built, ignore_errors=True)
    return root


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        help=f"folder to create (default: {DEFAULT_ROOT}, "
                             "or imagenet_like_quick beside it with --quick)")
    parser.add_argument("--count", type=int, default=500, help="number of files (default: 500)")
    parser.add_argument("--classes", type=int, default=10,
                        help="number of class folders (default: 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--no-greyscale", dest="greyscale", action="store_false",
                        help="leave out the greyscale JPEGs")
    parser.add_argument("--no-progressive", dest="progressive", action="store_false",
                        help="leave out the progressive JPEG")
    parser.add_argument("--no-png", dest="png", action="store_false",
                        help="leave out the PNG named .JPEG")
    parser.add_argument("--quick", action="store_true",
                        help=f"a small folder for a smoke run: {QUICK}")
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    if args.out is None:
        args.out = DATA_DIR / ("imagenet_like_quick" if args.quick else "imagenet_like")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    root = make_imagenet_like(args.out, args.count, args.classes, args.seed,
                              args.greyscale, args.progressive, args.png)
    files = read_manifest(root)["files"]
    megabytes = sum(entry["bytes"] for entry in files) / 1e6
    print(f"{root}: {len(files)} files in {args.classes} classes, {megabytes:.1f} MB")


if __name__ == "__main__":
    main()
