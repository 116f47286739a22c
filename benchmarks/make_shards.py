"""The benchmark's photos, speech and COCO sets as webdataset tar shards and as Hugging Face
Arrow datasets, with progress bars (tqdm, where installed).

    python -m benchmarks.make_shards images ROOT OUT    # ImageFolder -> jpg|png + cls
    python -m benchmarks.make_shards speech ROOT OUT    # AudioFolder -> wav|flac + cls
    python -m benchmarks.make_shards coco ROOT ANNOTATIONS OUT
                                                        # COCO set -> jpg|png + json
                                                        # (the image's annotation list)
    python -m benchmarks.make_shards images ROOT OUT --seekable
                                                        # and OUT/shards-seekable

Each writes OUT/shards/shard-NNNN.tar (`webdataset.ShardWriter`, `--shard-size` samples
each, keys the sample's number) and OUT/arrow (`datasets.Dataset` with the file's bytes in an
`Image(decode=False)` or `Audio(decode=False)` column and the label, or for COCO the
annotations as a JSON string; `save_to_disk`); with `--seekable`, also
OUT/shards-seekable, the shards' copy by `pimloader.datasets.make_seekable_shards` (JPEG
members with restart markers, the same pixels). A folder written before from the same
files is kept (its `done` file records what it was written from); one written from other
files is written again. The makers of the sets themselves are make_dataset.py,
make_speech_dataset.py and make_detection_dataset.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path

from benchmarks.progress import bar, reporter

KINDS = ("images", "speech", "coco")


def samples_of(kind: str, root: Path, annotations: Path | None = None) -> list[tuple]:
    """[(path, target)] of a set: class folders' labels, or a COCO image's annotations."""
    if kind == "images":
        from pimloader.datasets import ImageFolder
        return ImageFolder(root).samples
    if kind == "speech":
        from pimloader.datasets import AudioFolder
        return AudioFolder(root).samples
    if kind == "coco":
        with open(annotations) as file:
            coco = json.load(file)
        by_image: dict[int, list] = {image["id"]: [] for image in coco["images"]}
        for annotation in coco["annotations"]:
            by_image[annotation["image_id"]].append(annotation)
        return [(os.path.join(root, image["file_name"]), by_image[image["id"]])
                for image in coco["images"]]
    raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")


def member(kind: str, path: str, target) -> dict:
    """A sample's members by extension, as webdataset names them."""
    suffix = Path(path).suffix.lower().lstrip(".").replace("jpeg", "jpg")
    with open(path, "rb") as file:
        data = file.read()
    if kind == "coco":
        return {suffix: data, "json": json.dumps(target).encode()}
    return {suffix: data, "cls": str(target).encode()}


def fingerprint(*parts) -> str:
    """What a folder is written from: the parts' text, and each file's path, size and
    modification time (a folder made from other photos, or from photos made again, is
    written again)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, (str, os.PathLike)) and os.path.isfile(part):
            stat = os.stat(part)
            part = (os.fspath(part), stat.st_size, stat.st_mtime_ns)
        digest.update(repr(part).encode())
    return digest.hexdigest()


def is_written(out: Path, made_from: str) -> bool:
    """Whether `out` holds what `made_from` (a fingerprint) describes; if not, `out` is
    removed, to be written afresh (no stale shard is left among new ones)."""
    done = out / "done"
    if done.exists() and done.read_text() == made_from:
        return True
    if out.exists():
        shutil.rmtree(out)
    return False


def mark_written(out: Path, made_from: str) -> None:
    (out / "done").write_text(made_from)


def write_shards(kind: str, samples: list[tuple], out: Path, shard_size: int) -> list[str]:
    """The samples as webdataset shards under `out` (written once for these samples and
    shard size); their paths."""
    import webdataset as wds
    made_from = fingerprint(kind, shard_size, *(part for sample in samples for part in sample))
    if not is_written(out, made_from):
        out.mkdir(parents=True)
        with wds.ShardWriter(str(out / "shard-%04d.tar"), maxcount=shard_size,
                             verbose=0) as writer:
            for number, (path, target) in enumerate(
                    bar(samples, desc=f"{kind} -> shards", unit="sample")):
                writer.write({"__key__": f"{number:07d}", **member(kind, path, target)})
        mark_written(out, made_from)
    return sorted(str(path) for path in out.glob("shard-*.tar"))


def write_seekable_shards(urls: list[str], out: Path) -> list[str]:
    """The seekable copy of the shards `urls` under `out` (written once for these shards);
    its paths, in the same order."""
    from pimloader.datasets import make_seekable_shards
    made_from = fingerprint(*urls)
    if not is_written(out, made_from):
        progress, close_bar = reporter("seekable shards", unit="member")
        try:
            make_seekable_shards(urls, out, overwrite=True, progress=progress)
        finally:
            close_bar()
        mark_written(out, made_from)
    return [str(out / Path(url).name) for url in urls]


def write_seekable_arrow(source: Path, out: Path) -> Path:
    """The seekable copy of the Arrow dataset at `source` (JPEG cells with restart
    markers) at `out`, written once for that dataset."""
    from pimloader.datasets import make_seekable_arrow
    made_from = fingerprint(*sorted(str(path) for path in Path(source).iterdir()))
    if not is_written(out, made_from):
        make_seekable_arrow(source, out, overwrite=True)
        mark_written(out, made_from)
    return out


def write_arrow(kind: str, samples: list[tuple], out: Path) -> Path:
    """The samples as a Hugging Face Arrow dataset at `out`, bytes embedded (written once
    for these samples)."""
    import datasets
    made_from = fingerprint(kind, *(part for sample in samples for part in sample))
    if is_written(out, made_from):
        return out
    paths = [path for path, _ in bar(samples, desc=f"{kind} -> arrow", unit="sample")]
    if kind == "coco":
        table = datasets.Dataset.from_dict({"image": paths, "objects": [
            json.dumps(target) for _, target in samples]})
    else:
        table = datasets.Dataset.from_dict({"file": paths,
                                            "label": [target for _, target in samples]})
    column = "image" if kind == "coco" else "file"
    feature = datasets.Audio(decode=False) if kind == "speech" else datasets.Image(decode=False)
    table = table.cast_column(column, feature)
    if kind != "coco":
        table = table.rename_column("file", "audio" if kind == "speech" else "image")
    table.save_to_disk(str(out))
    mark_written(out, made_from)
    return out


def make_shards(kind: str, root, out, annotations=None, shard_size: int = 100,
                seekable: bool = False) -> dict:
    """Shards and an Arrow dataset of the set at `root`: {"shards": [paths], "arrow": path},
    and with `seekable` the shards' seekable copy ("seekable_shards": [paths])."""
    samples = samples_of(kind, Path(root), annotations)
    out = Path(out)
    made = {"shards": write_shards(kind, samples, out / "shards", shard_size),
            "arrow": write_arrow(kind, samples, out / "arrow")}
    if seekable:
        made["seekable_shards"] = write_seekable_shards(made["shards"], out / "shards-seekable")
    return made


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.make_shards",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("root", help="the set's folder (COCO: its image folder)")
    parser.add_argument("paths", nargs="+", help="OUT, or for coco ANNOTATIONS OUT")
    parser.add_argument("--shard-size", type=int, default=100, help="samples per shard")
    parser.add_argument("--seekable", action="store_true",
                        help="also OUT/shards-seekable, the shards with their JPEG members "
                             "rewritten with restart markers (make_seekable_shards)")
    args = parser.parse_args(argv)
    if len(args.paths) != (2 if args.kind == "coco" else 1):
        parser.error("coco takes ANNOTATIONS OUT; images and speech take OUT")
    annotations = args.paths[0] if args.kind == "coco" else None
    made = make_shards(args.kind, args.root, args.paths[-1], annotations, args.shard_size,
                       args.seekable)
    print(f"{len(made['shards'])} shards under {Path(made['shards'][0]).parent}, "
          f"Arrow dataset at {made['arrow']}")
    if args.seekable:
        print(f"seekable copies under {Path(made['seekable_shards'][0]).parent}")


if __name__ == "__main__":
    main()
