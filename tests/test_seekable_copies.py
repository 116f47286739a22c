"""Seekable copies of tar shards and of saved Arrow datasets (make_seekable_shards,
make_seekable_arrow): torchvision's decode_image gives every JPEG member (or cell) of the
copy the original's pixels; `tar -tf`, webdataset and TarShards list the same members in the
same order (`datasets` the same rows and features); other members are the same bytes; a
JPEG libjpeg cannot read whole is copied as it is and reported; PIMDataLoader over the copy
gives torchvision's batches over the original (same seed, 0 and 2 workers); and the
decoder seeks in the copies."""
import io
import json
import os
import subprocess
import tarfile
import wave

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from torchvision.io import ImageReadMode, decode_image

from _helpers import DecodedItems, assert_same_batches, seeded_batches
from _shard_data import make_folder, write_plain_tar
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader, TarShards
from pimloader import transforms as T
from pimloader.datasets import ImageFolder, make_seekable_arrow, make_seekable_shards
from pimloader.datasets.tar_scan import TruncatedTarError
from pimloader.decode import is_jpeg, jpeg, seek_info
from pimloader.make_seekable import main as command_line

wds = pytest.importorskip("webdataset")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BROKEN = 5       # the sample whose .thumb member is the first half of a JPEG


def train_steps():
    return [v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


def pixels(data: bytes) -> torch.Tensor:
    return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                        mode=ImageReadMode.UNCHANGED)


def wav_bytes(seed: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(8000)
        clip.writeframes(np.random.default_rng(seed).integers(
            -3000, 3000, 400, dtype=np.int16).tobytes())
    return out.getvalue()


def write_shards(samples, out, per_shard=6):
    """ImageFolder samples as ShardWriter shards with more members than the image and its
    class: a JSON caption, a WAV clip every fourth sample, the image again under the
    extension "alt" (a JPEG by content, not by name), and for sample BROKEN a cut JPEG."""
    os.makedirs(out, exist_ok=True)
    pattern = os.path.join(str(out), "shard-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for position, (path, label) in enumerate(samples):
            data = open(path, "rb").read()
            sample = {"__key__": f"s{position:04d}",
                      "png" if path.endswith(".png") else "jpg": data,
                      "cls": str(label).encode(), "alt": data,
                      "json": json.dumps({"caption": f"photo {position}"}).encode()}
            if position % 4 == 0:
                sample["wav"] = wav_bytes(position)
            if position == BROKEN:
                sample["thumb"] = data[:len(data) // 2]
            sink.write(sample)
    return [pattern % shard for shard in range(-(-len(samples) // per_shard))]


def members(path) -> list:
    """[(name, bytes)] of a tar's regular members, in order (Python's tarfile)."""
    with tarfile.open(path) as archive:
        return [(info.name, archive.extractfile(info).read()) for info in archive
                if info.isreg()]


def tar_listing(path) -> list:
    return subprocess.run(["tar", "-tf", str(path)], check=True, capture_output=True,
                          text=True).stdout.splitlines()


def keys(shards) -> list:
    return [shards.index.key(index) for index in range(len(shards))]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=16, classes=2)


@pytest.fixture(scope="module")
def copied(photos, tmp_path_factory):
    """(original urls, copy urls, report)."""
    root = tmp_path_factory.mktemp("shards")
    urls = write_shards(ImageFolder(photos).samples, root / "plain")
    report = make_seekable_shards(urls, root / "seekable")
    return urls, [str(root / "seekable" / os.path.basename(url)) for url in urls], report


def test_every_member_keeps_its_name_place_and_pixels(copied):
    urls, copies, report = copied
    transcoded = copied_members = 0
    for url, copy in zip(urls, copies):
        assert tar_listing(copy) == tar_listing(url)
        for (name, before), (copy_name, after) in zip(members(url), members(copy), strict=True):
            assert copy_name == name
            if name == f"s{BROKEN:04d}.thumb":
                assert after == before and report.unreadable == [f"{url}#{name}"]
            elif is_jpeg(before):
                assert torch.equal(pixels(after), pixels(before)), name
                assert seek_info(after) is not None and seek_info(before) is None, name
                transcoded += 1
            else:
                assert after == before, name   # PNG, cls, json, wav: the same bytes
                copied_members += 1
    assert (report.transcoded, report.copied) == (transcoded, copied_members)
    assert transcoded > 16 and copied_members > 2 * 16   # the .alt JPEGs count too
    assert report.bytes_before > 0 and report.bytes_after > 0


def test_webdataset_and_tarshards_read_the_copy(copied):
    urls, copies, _ = copied
    original = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
    copy = list(wds.WebDataset(copies, shardshuffle=False, empty_check=False))
    assert [sample["__key__"] for sample in copy] == [sample["__key__"] for sample in original]
    for before, after in zip(original, copy):
        assert sorted(after) == sorted(before)
        for field in ("cls", "json", "wav", "png"):
            assert after.get(field) == before.get(field)
        image = "jpg" if "jpg" in before else "png"
        assert torch.equal(pixels(after[image]), pixels(before[image]))
    plain, seekable = TarShards(urls), TarShards(copies)
    assert len(seekable) == len(plain) == 16 and keys(seekable) == keys(plain)
    for index in range(len(plain)):
        (after, label), (before, want) = seekable[index], plain[index]
        assert label == want and torch.equal(pixels(after), pixels(before))


def test_the_decoder_seeks_in_the_copied_members(copied):
    """A small box near the bottom right: the copy's decode reads only the intervals around
    it (seek_used), the original's from its start; the same pixels."""
    _, copies, _ = copied
    shards = TarShards(copies)
    seeking = 0
    for index in range(len(shards)):
        data = shards[index][0]
        if not is_jpeg(data):
            continue
        height, width = jpeg.image_size(data)
        box = (height - 40, width - 40, 24, 24)
        got, result = jpeg._jpeg_call(data, jpeg.ffi.from_buffer("uint8_t[]", data), len(data),
                                      box, 8, 3, None, True, True, "copy")
        seeking += result.seek_used
        assert np.array_equal(got, jpeg.decode_jpeg(data)[box[0]:box[0] + 24,
                                                          box[1]:box[1] + 24])
    assert seeking >= 10


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_over_the_copy_gives_torchvision_batches_of_the_original(copied, workers):
    urls, copies, _ = copied
    common = dict(batch_size=5, shuffle=True, num_workers=workers)
    want, _ = seeded_batches(lambda g: torch.utils.data.DataLoader(
        DecodedItems(TarShards(urls), train_steps()), generator=g, **common))
    got, _ = seeded_batches(lambda g: PIMDataLoader(
        TarShards(copies), transform=T.Compose([T.Decode(), *train_steps()]), generator=g,
        reduced_dct=False, **common))
    assert_same_batches(got, want)
    plain, _ = seeded_batches(lambda g: PIMDataLoader(
        TarShards(urls), transform=T.Compose([T.Decode(), *train_steps()]), generator=g,
        reduced_dct=False, **common))
    assert_same_batches(got, plain)


def test_gnu_and_ustar_shards_keep_their_long_names(tmp_path):
    folder = make_folder(tmp_path, n=6, long_names=True)
    for tar_format in ("gnu", "pax"):
        source = write_plain_tar(folder, tmp_path / f"{tar_format}.tar", tar_format)
        report = make_seekable_shards(source, tmp_path / f"{tar_format}-copy")
        copy = tmp_path / f"{tar_format}-copy" / f"{tar_format}.tar"
        assert tar_listing(copy) == tar_listing(source)
        assert report.transcoded == 4 and report.copied == 8   # 4 JPEGs; 2 PNGs, 6 cls
        assert keys(TarShards(str(copy))) == keys(TarShards(source))


def test_arguments_progress_and_threads(copied, tmp_path):
    urls, copies, report = copied
    calls = []
    again = make_seekable_shards(os.path.dirname(urls[0]), tmp_path / "again", threads=1,
                                 progress=lambda done, total: calls.append((done, total)))
    assert again == report  # a folder of shards, one thread: the same copy
    assert [open(tmp_path / "again" / os.path.basename(copy), "rb").read() for copy in copies] \
        == [open(copy, "rb").read() for copy in copies]
    total = sum(len(members(url)) for url in urls)
    assert calls == [(done, total) for done in range(1, total + 1)]
    pattern = urls[0].replace("shard-0000", "shard-{0000..0002}")
    assert make_seekable_shards(pattern, tmp_path / "pattern").transcoded == report.transcoded
    with pytest.raises(FileExistsError, match="overwrite=True"):
        make_seekable_shards(urls, tmp_path / "again")
    with pytest.raises(ValueError, match="only local shards"):
        make_seekable_shards("http://example.com/shard-0000.tar", tmp_path / "web")
    with pytest.raises(FileNotFoundError, match="missing.tar"):
        make_seekable_shards(str(tmp_path / "missing.tar"), tmp_path / "none")
    with pytest.raises(ValueError, match="is a folder: give it alone"):
        make_seekable_shards([os.path.dirname(urls[0]), urls[0]], tmp_path / "mixed")
    with pytest.raises(ValueError, match="two shards named"):
        make_seekable_shards([urls[0], copies[0]], tmp_path / "twice")
    with pytest.raises(ValueError, match="overwritten by its own copy"):
        make_seekable_shards(urls, os.path.dirname(urls[0]), overwrite=True)
    with pytest.raises(TypeError, match="progress must be callable"):
        make_seekable_shards(urls, tmp_path / "other", progress=True)


def test_a_cut_shard_is_an_error_naming_it_and_leaves_no_copy(copied, tmp_path):
    urls, _, _ = copied
    cut = tmp_path / "cut.tar"
    cut.write_bytes(open(urls[0], "rb").read()[:3000])
    with pytest.raises(TruncatedTarError, match="cut.tar"):
        make_seekable_shards(str(cut), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_copy_stopped_midway_leaves_no_shard(copied, tmp_path, monkeypatch):
    from pimloader.datasets import seekable_shards
    urls, _, _ = copied

    def failing(data, max_interval, name):
        raise RuntimeError(f"stopped at {name}")
    monkeypatch.setattr(seekable_shards, "seekable_version", failing)
    with pytest.raises(RuntimeError, match="stopped at .*shard-0000.tar#s0000"):
        make_seekable_shards(urls, tmp_path / "out")
    assert os.listdir(tmp_path / "out") == []   # no shard, no .partial file


def test_the_command_line_copies_shards(copied, tmp_path, capsys):
    urls, copies, report = copied
    assert command_line([*urls, str(tmp_path / "listed")]) == 0
    out = capsys.readouterr().out
    assert f"{report.transcoded} JPEGs rewritten" in out and "other members copied" in out
    assert f"copied unchanged, libjpeg cannot read it whole: {urls[0]}#s0005.thumb" in out
    assert command_line(["--shards", os.path.dirname(urls[0]), str(tmp_path / "folder")]) == 0
    for copy in copies:
        name = os.path.basename(copy)
        assert (tmp_path / "listed" / name).read_bytes() == open(copy, "rb").read()
        assert (tmp_path / "folder" / name).read_bytes() == open(copy, "rb").read()
    capsys.readouterr()
    assert command_line([os.path.dirname(urls[0]), str(tmp_path / "as-files")]) == 0
    assert "pass --shards" in capsys.readouterr().out   # a folder of shards copied as files
    assert command_line([str(tmp_path / "nothing.tar"), str(tmp_path / "x")]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command_line([os.path.dirname(urls[0]), urls[0], str(tmp_path / "y")])
    assert "several sources are shards only" in capsys.readouterr().err


# -- Arrow datasets (save_to_disk) ----------------------------------------------------------

@pytest.fixture(scope="module")
def arrow_copy(photos, tmp_path_factory):
    """(original DatasetDict, its copy, report): a "train" split of the photos
    (Image(decode=False), ClassLabel) and a "broken" one whose row 1 is a cut JPEG."""
    hf = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("arrow")
    samples = ImageFolder(photos).samples
    features = hf.Features({"image": hf.Image(decode=False),
                            "label": hf.ClassLabel(names=["a", "b"])})

    def table(cells, labels):
        return hf.Dataset.from_dict({"image": [{"bytes": data, "path": None}
                                               for data in cells], "label": labels},
                                    features=features)
    images = [open(path, "rb").read() for path, _ in samples]
    original = hf.DatasetDict({
        "train": table(images, [label for _, label in samples]),
        "broken": table([images[0], images[0][:len(images[0]) // 2], images[1]], [0, 1, 0])})
    original.save_to_disk(str(root / "plain"))
    calls = []
    report = make_seekable_arrow(root / "plain", root / "seekable",
                                 progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (19, 19)
    return original, hf.load_from_disk(str(root / "seekable")), report, root


def test_an_arrow_copy_keeps_rows_labels_and_pixels(arrow_copy):
    original, copy, report, root = arrow_copy
    assert list(copy) == list(original) and copy["train"].features == original["train"].features
    transcoded = 0
    for split in original:
        for index, (before, after) in enumerate(zip(original[split], copy[split], strict=True)):
            assert after["label"] == before["label"]
            old, new = before["image"]["bytes"], after["image"]["bytes"]
            if split == "broken" and index == 1:
                assert new == old
            elif is_jpeg(old):
                assert torch.equal(pixels(new), pixels(old)) and seek_info(new) is not None
                transcoded += 1
            else:
                assert new == old
    assert report.transcoded == transcoded and report.copied == 19 - transcoded - 1
    assert report.unreadable == [f"{root / 'plain'}#broken/1"]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_over_an_arrow_copy_gives_torchvision_batches(arrow_copy, workers):
    from pimloader.datasets import ArrowColumns
    original, copy, _, _ = arrow_copy
    common = dict(batch_size=5, shuffle=True, num_workers=workers)
    want, _ = seeded_batches(lambda g: torch.utils.data.DataLoader(
        DecodedItems(ArrowColumns(original["train"], "image"), train_steps()), generator=g,
        **common))
    got, _ = seeded_batches(lambda g: PIMDataLoader(
        ArrowColumns(copy["train"], "image"), transform=T.Compose([T.Decode(), *train_steps()]),
        generator=g, reduced_dct=False, **common))
    assert_same_batches(got, want)


def test_an_arrow_dataset_with_decoded_images_and_the_command_line(arrow_copy, tmp_path,
                                                                   capsys):
    import datasets as hf
    original, copy, _, root = arrow_copy
    decoded = original["train"].cast_column("image", hf.Image())
    decoded.save_to_disk(str(tmp_path / "decoded"))
    assert command_line([str(tmp_path / "decoded"), str(tmp_path / "decoded-copy")]) == 0
    assert "JPEGs rewritten" in capsys.readouterr().out
    again = hf.load_from_disk(str(tmp_path / "decoded-copy"))
    assert again.features == decoded.features   # Image(decode=True) kept
    raw = again.cast_column("image", hf.Image(decode=False))
    assert raw["image"] == copy["train"]["image"]
    with pytest.raises(ValueError, match="name the image column"):
        make_seekable_arrow(_two_image_columns(hf, tmp_path), tmp_path / "two")
    assert command_line([str(root / "plain"), str(tmp_path / "two"), "--column", "nope"]) == 1
    assert "no column 'nope'" in capsys.readouterr().err


def _two_image_columns(hf, tmp_path):
    table = hf.Dataset.from_dict({"a": [None], "b": [None]},
                                 features=hf.Features({"a": hf.Image(), "b": hf.Image()}))
    table.save_to_disk(str(tmp_path / "two-columns"))
    return tmp_path / "two-columns"
