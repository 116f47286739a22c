"""TarShards over local shards: the same items as webdataset's `.decode().to_tuple(...)` on
shards written by webdataset's ShardWriter and by plain tar (GNU, pax, ustar, long names);
the same batches as torch's DataLoader + decode_image + v2 over the original files; the
errors of a missing field and a cut shard; sidecars; the shard-order sampler."""
import os
import tarfile

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.io import decode_image
from torchvision.transforms import v2

from _shard_data import image_bytes, jpeg, make_folder, write_plain_tar, write_wds_shards
from pimloader import ShardOrderSampler, TarShards
from pimloader.datasets import ShardMemberError, source_of, write_sidecar
from pimloader.datasets.shards import expand_urls
from pimloader.datasets.tar_scan import TarFormatError, TruncatedTarError

wds = pytest.importorskip("webdataset")


def webdataset_items(urls, keys=("jpg;png", "cls"), handler=None, **kw):
    pipeline = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
    pipeline = pipeline.decode(handler=handler) if handler else pipeline.decode()
    return list(pipeline.to_tuple(*keys, **kw))


def same_keys(dataset, urls):
    """The samples' keys (how members were grouped) are webdataset's."""
    want = [sample["__key__"] for sample in wds.WebDataset(urls, shardshuffle=False)]
    assert [dataset.index.key(i) for i in range(len(dataset))] == want


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("shards"), n=24)


@pytest.fixture(scope="module")
def wds_urls(folder, tmp_path_factory):
    return write_wds_shards(folder, tmp_path_factory.mktemp("wds"), per_shard=7)


def test_items_equal_webdataset_on_shardwriter_shards(wds_urls, folder):
    dataset = TarShards(wds_urls)
    want = webdataset_items(wds_urls)
    assert len(dataset) == len(want) == len(folder.samples)
    assert [dataset[i] for i in range(len(dataset))] == want
    same_keys(dataset, wds_urls)
    assert list(dataset.shard_bounds) == [0, 7, 14, 21, 24]
    assert dataset[5][0] == image_bytes(folder.samples[5][0])


@pytest.mark.parametrize("tar_format", ["gnu", "pax", "ustar"])
def test_items_equal_webdataset_on_plain_tar(folder, tmp_path, tar_format):
    long_names = make_folder(tmp_path / "long", n=6, long_names=True)
    urls = [write_plain_tar(folder, tmp_path / f"a.{tar_format}.tar", tar_format),
            write_plain_tar(long_names, tmp_path / f"b.{tar_format}.tar", tar_format)]
    dataset = TarShards(urls)
    assert [dataset[i] for i in range(len(dataset))] == webdataset_items(urls)
    same_keys(dataset, urls)
    assert len(dataset) == 30
    with tarfile.open(urls[1]) as archive:   # past the 100-byte name field; directories
        assert min(len(member.name) for member in archive if member.isfile()) > 180
        assert any(member.isdir() for member in archive)


def test_more_fields_json_txt_and_file_urls(tmp_path):
    with wds.TarWriter(str(tmp_path / "t.tar")) as sink:
        for i in range(5):
            sample = {"__key__": f"k{i}", "jpg": jpeg(i), "json": {"i": i, "s": [1, i]},
                      "txt": f"caption {i} é"}
            if i != 3:
                sample["cls"] = i if i != 4 else b"four"
            sink.write(sample)
    url = "file://" + str(tmp_path / "t.tar")
    keys = ("jpg", "cls", "json", "txt")
    dataset = TarShards(url, keys=" ".join(keys), missing="none")
    want = webdataset_items(url, keys, missing_is_error=False, handler=wds.ignore_and_continue)
    assert [dataset[i] for i in range(4)] == want   # webdataset drops the undecodable k4
    assert dataset[3][1] is None
    with pytest.raises(ShardMemberError, match=r"t\.tar#k4: its \.cls member does not decode"):
        dataset[4]
    assert len(TarShards(url, keys=keys, missing="skip")) == 4
    with pytest.raises(ValueError, match=r"t\.tar#k3: no member with the extension 'cls'"):
        TarShards(url, keys=keys)
    source = source_of(TarShards(url, keys=("jpg", "json", "txt")))
    sample = source.read(2)
    assert (sample.data, sample.target) == (jpeg(2), ({"i": 2, "s": [1, 2]}, "caption 2 é"))
    assert sample.name == url + "#k2" and source.key(2) == (url + "#k2").encode()
    assert source.fields == {"image", "label"} and source.encoded_items


def test_cut_shard_and_bad_header_are_named(wds_urls, tmp_path):
    data = open(wds_urls[0], "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:512 + 100])   # inside the first member's data
    with pytest.raises(TruncatedTarError, match=r"cut\.tar: truncated tar: member '.*' needs "
                                                r"bytes \d+\.\.\d+ but the shard ends at byte"):
        TarShards(str(cut))
    first_member_end = 512 + 512 * -(-len(jpeg_member(data)) // 512)
    cut.write_bytes(data[:first_member_end])   # at a header boundary, no end-of-archive
    with pytest.raises(TruncatedTarError, match=r"cut\.tar: truncated tar: it ends at byte "
                                                rf"{first_member_end} without the end-of"):
        TarShards(str(cut))
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar" * 200)
    with pytest.raises(TarFormatError, match=r"garbage\.tar: not a tar archive"):
        TarShards(str(garbage))
    # a shard cut after its index was built: the read names the shard, the key and the cause
    whole = tmp_path / "whole.tar"
    whole.write_bytes(data)
    dataset = TarShards(str(whole))
    os.truncate(whole, 2048)
    with pytest.raises(ShardMemberError, match=r"whole\.tar#class\d/img\d+: truncated tar"):
        dataset[len(dataset) - 1]
    dataset.close()


def jpeg_member(tar_bytes):
    """The data of the tar's first member (its size from the header)."""
    return tar_bytes[512:512 + int(tar_bytes[124:136].strip(b"\0 "), 8)]


def test_brace_patterns_expand_as_webdataset():
    from braceexpand import braceexpand
    for pattern in ["s-{0000..0011}.tar", "s-{8..11}.tar", "{a,b}/s-{00..02}.tar", "x.tar"]:
        assert expand_urls(pattern) == list(braceexpand(pattern))


def test_sidecar_round_trip(wds_urls, tmp_path):
    from pimloader.datasets.shard_members import _parse, scan_local
    path = write_sidecar(wds_urls[1], tmp_path / "one.idx")
    members, scanned = _parse(open(path, "rb").read(), path), scan_local(wds_urls[1])
    assert members.names.buffer.tobytes() == scanned.names.buffer.tobytes()
    assert np.array_equal(members.offsets, scanned.offsets) and members.shard_size == \
        os.path.getsize(wds_urls[1])


def test_sidecar_command_writes_beside_each_shard(wds_urls, tmp_path, capsys):
    from pimloader.datasets.shard_members import main
    copies = []
    for url in wds_urls[:2]:
        copies.append(tmp_path / os.path.basename(url))
        copies[-1].write_bytes(open(url, "rb").read())
    assert main([str(copy) for copy in copies]) == 0
    assert capsys.readouterr().out.split() == [f"{copy}.idx" for copy in copies]
    assert all(os.path.getsize(f"{copy}.idx") > 0 for copy in copies)
    assert main([]) == 2


def test_pickles_without_its_readers(wds_urls):
    import pickle
    dataset = TarShards(wds_urls)
    want = [dataset[i] for i in range(len(dataset))]   # files now open in this process
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy._readers == {} and [copy[i] for i in range(len(copy))] == want
    dataset.close()
    copy.close()


def test_shard_order_sampler_reads_forward(wds_urls):
    dataset = TarShards(wds_urls)
    sampler = ShardOrderSampler(dataset, window=2, seed=3)
    order = list(sampler)
    assert sorted(order) == list(range(len(dataset)))
    bounds = dataset.shard_bounds
    for shard in range(len(bounds) - 1):   # each shard's samples in tar order
        mine = [i for i in order if bounds[shard] <= i < bounds[shard + 1]]
        assert mine == sorted(mine)
    sampler.set_epoch(1)
    assert list(sampler) != order and sorted(sampler) == sorted(order)
    halves = [list(ShardOrderSampler(dataset, window=1, num_replicas=2, rank=r)) for r in (0, 1)]
    assert sorted(halves[0] + halves[1]) == list(range(len(dataset)))


class Decoded(Dataset):
    """torchvision's decode_image + v2 over items of (bytes, target) or (path, target)."""

    def __init__(self, items, transform, read=None):
        self.items, self.transform, self.read = items, transform, read

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        data, target = self.items[index]
        if self.read is not None:
            data = self.read(data)
        image = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return self.transform(image), target


def _batches(dataset, workers):
    torch.manual_seed(7)
    loader = DataLoader(dataset, batch_size=5, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(11))
    return list(loader)


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader_over_shards_equals_image_folder(wds_urls, folder, workers):
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.25])])
    shards = TarShards(wds_urls)
    got = _batches(Decoded(shards, transform), workers)
    want = _batches(Decoded(folder.samples, transform, read=image_bytes), workers)
    assert len(got) == len(want) == 5
    for (images, labels), (want_images, want_labels) in zip(got, want):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


@pytest.mark.parametrize("workers", [0, 2])
def test_pimdataloader_over_shards_equals_torch(wds_urls, workers):
    """Until the Decode step reads them natively, PIMDataLoader gives TarShards' items as
    torch's DataLoader does (bytes and labels, shuffled under the same seed)."""
    from pimloader import PIMDataLoader
    shards = TarShards(wds_urls)
    batches = []
    for cls in (DataLoader, PIMDataLoader):
        loader = cls(shards, batch_size=5, shuffle=True, num_workers=workers,
                     generator=torch.Generator().manual_seed(3))
        batches.append(list(loader))
    for (images, labels), (want_images, want_labels) in zip(*batches, strict=True):
        assert images == want_images and torch.equal(labels, want_labels)
