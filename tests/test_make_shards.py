"""benchmarks/make_shards.py: the benchmark's sets as shards and Arrow tables read back
equal to their files (TarShards, ArrowColumns; the files' bytes and the targets as the
folder datasets and pycocotools give them)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from _coco import make_coco
from benchmarks import make_shards
from benchmarks.make_dataset import make_imagenet_like
from pimloader import TarShards
from pimloader.datasets import AudioFolder, ImageFolder

pytest.importorskip("webdataset")
datasets = pytest.importorskip("datasets")


def file_bytes(path):
    with open(path, "rb") as file:
        return file.read()


def test_images_and_speech(tmp_path):
    import soundfile
    from pimloader.datasets import ArrowColumns
    photos = make_imagenet_like(tmp_path / "photos", count=8, classes=2)
    speech = tmp_path / "speech"
    for label in ("no", "yes"):
        (speech / label).mkdir(parents=True)
        for number in range(3):
            soundfile.write(speech / label / f"{number}.wav",
                            np.zeros(800 + number, dtype=np.float32), 16000)
    for kind, root, dataset, keys in (("images", photos, ImageFolder(photos), "jpg;png"),
                                      ("speech", speech, AudioFolder(speech), "wav;flac")):
        made = make_shards.make_shards(kind, root, tmp_path / kind, shard_size=3)
        want = [(file_bytes(path), label) for path, label in dataset.samples]
        assert [tuple(item) for item in TarShards(made["shards"], keys=(keys, "cls"))] == want
        table = ArrowColumns(datasets.load_from_disk(str(made["arrow"])))
        assert [table[i] for i in range(len(table))] == want


def test_coco(tmp_path):
    from pycocotools.coco import COCO
    images, annotations = make_coco(tmp_path / "coco", count=4)
    made = make_shards.make_shards("coco", images, tmp_path / "out", annotations,
                                   shard_size=3)
    api = COCO(annotations)
    want = [api.loadAnns(api.getAnnIds(imgIds=image)) for image in sorted(api.imgs)]
    shards = TarShards(made["shards"], keys=("jpg;png", "json"))
    assert [shards[i][1] for i in range(len(shards))] == want
    table = datasets.load_from_disk(str(made["arrow"]))
    assert [json.loads(row) for row in table["objects"]] == want


def test_seekable_shards(tmp_path):
    """--seekable: a copy of the shards whose JPEG members have restart markers and decode
    (torchvision) to the files' pixels, the other members the files' bytes; written once."""
    import torch
    from torchvision.io import decode_image

    from pimloader.decode import is_jpeg, seek_info
    photos = make_imagenet_like(tmp_path / "photos", count=8, classes=2)
    made = make_shards.make_shards("images", photos, tmp_path / "out", shard_size=3,
                                   seekable=True)
    copy = TarShards(made["seekable_shards"])
    samples = ImageFolder(photos).samples
    assert len(copy) == len(samples) and len(made["seekable_shards"]) == 3
    for (data, label), (path, want) in zip(copy, samples):
        assert label == want
        if is_jpeg(file_bytes(path)):
            assert seek_info(data) is not None
            assert torch.equal(decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8)),
                               decode_image(path))
        else:
            assert data == file_bytes(path)
    stamp = (tmp_path / "out" / "shards-seekable" / "done").stat().st_mtime_ns
    again = make_shards.make_shards("images", photos, tmp_path / "out", shard_size=3,
                                    seekable=True)
    assert again["seekable_shards"] == made["seekable_shards"]
    assert (tmp_path / "out" / "shards-seekable" / "done").stat().st_mtime_ns == stamp


def test_a_set_made_again_with_another_count_is_written_again_with_nothing_stale(tmp_path):
    """The photos made again with another count (the benchmark's --count) into the same
    folder: the shards, their seekable copy and the Arrow table are written again from
    them, and no shard of the first set is left among the new ones."""
    import datasets

    first = make_imagenet_like(tmp_path / "photos", count=8, classes=2)
    make_shards.make_shards("images", first, tmp_path / "out", shard_size=2, seekable=True)
    photos = make_imagenet_like(tmp_path / "photos", count=5, classes=2)
    made = make_shards.make_shards("images", photos, tmp_path / "out", shard_size=2,
                                   seekable=True)
    assert len(made["shards"]) == len(made["seekable_shards"]) == 3
    assert sorted(path.name for path in (tmp_path / "out" / "shards").glob("*.tar")) == \
        [os.path.basename(path) for path in made["shards"]]
    assert len(TarShards(made["shards"])) == len(TarShards(made["seekable_shards"])) == 5
    assert len(datasets.load_from_disk(str(made["arrow"]))) == 5
    arrow = make_shards.write_seekable_arrow(made["arrow"], tmp_path / "out" / "arrow-seekable")
    assert len(datasets.load_from_disk(str(arrow))) == 5
