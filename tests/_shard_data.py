"""Small tar shards for the shard tests: an image folder of JPEGs and PNGs, the same samples
written as shards by webdataset's ShardWriter, and by plain `tar` (GNU, pax, ustar).

    folder = make_folder(tmp, n=24)        # Folder(root, samples=[(path, cls)], keys)
    urls = write_wds_shards(folder, out, per_shard=8)
    tar = write_plain_tar(folder, out / "gnu.tar", "gnu")
"""
import io
import os
import subprocess
from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass
class Folder:
    root: str
    samples: list     # [(path, class index)] in the shards' order
    keys: list        # webdataset keys, in the same order


def make_folder(tmp, n=24, classes=3, seed=0, long_names=False) -> Folder:
    """n small images (every third a PNG) in class folders, sizes varying; long_names: paths
    of about 200 characters (a ustar prefix, GNU 'L' entries, pax path records)."""
    rng = np.random.default_rng(seed)
    root = os.path.join(str(tmp), "folder")
    samples, keys = [], []
    for i in range(n):
        label = i % classes
        stem = f"img{i:04d}" + ("_" + "x" * 80 if long_names else "")
        directory = f"class{label}" + ("/" + "d" * 90 if long_names else "")
        extension = "png" if i % 3 == 2 else "jpg"
        path = os.path.join(root, directory, f"{stem}.{extension}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        size = (24 + int(rng.integers(0, 24)), 32 + int(rng.integers(0, 24)))
        pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, format="PNG" if extension == "png" else "JPEG")
        samples.append((path, label))
        keys.append(f"{directory}/{stem}")
    return Folder(root, samples, keys)


def write_wds_shards(folder: Folder, out, per_shard=8) -> list:
    """The folder's samples as shards of `per_shard` samples by webdataset.ShardWriter."""
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    pattern = os.path.join(str(out), "shard-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for (path, label), key in zip(folder.samples, folder.keys):
            with open(path, "rb") as file:
                data = file.read()
            sink.write({"__key__": key, path.rsplit(".", 1)[1]: data,
                        "cls": str(label).encode()})
    count = -(-len(folder.samples) // per_shard)
    return [pattern % shard for shard in range(count)]


def write_plain_tar(folder: Folder, tar_path, tar_format) -> str:
    """The folder's samples as one tar written by GNU tar in `tar_format` (gnu, pax,
    ustar), each image beside its .cls file, in the folder's order, after the entries of
    their directories (which a reader passes over)."""
    staging = str(tar_path) + ".d"
    parts = [key.split("/")[:-1] for key in folder.keys]
    names = sorted({"/".join(part[:end]) for part in parts for end in range(1, len(part) + 1)})
    for (path, label), key in zip(folder.samples, folder.keys):
        image = key + "." + path.rsplit(".", 1)[1]
        target = os.path.join(staging, image)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(path, "rb") as src, open(target, "wb") as dst:
            dst.write(src.read())
        with open(os.path.join(staging, key + ".cls"), "w") as file:
            file.write(str(label))
        names += [image, key + ".cls"]
    listing = str(tar_path) + ".list"
    with open(listing, "w") as file:
        file.write("\n".join(names) + "\n")
    subprocess.run(["tar", "-cf", str(tar_path), f"--format={tar_format}", "-C", staging,
                    "--no-recursion", "-T", listing], check=True)
    return str(tar_path)


def image_bytes(path) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def jpeg(seed=0, size=(16, 16)) -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()
