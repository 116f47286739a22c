"""PIMDataLoader over TarShards with T.Decode() first takes the native path: the same batches
as torch's DataLoader with torchvision's decode_image + the same v2 steps under the same
seed, and as PIMDataLoader over an ImageFolder of the same files, with 0 and 2 workers; a
bad member (undecodable bytes, or a shard cut after indexing) follows on_error."""
import os

import pytest
import torch
import torchvision.transforms.v2 as v2

from _helpers import DecodedItems as Decoded, assert_same_batches
from _helpers import seeded_batches as batches
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader, TarShards
from pimloader import transforms as T
from pimloader.datasets import ImageFolder, ShardMemberError, TarShardSource, source_of
from pimloader.decode import DecodeError

wds = pytest.importorskip("webdataset")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_steps():
    return [v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


def write_shards(samples, out, per_shard=6, corrupt=()):
    """ImageFolder samples as ShardWriter shards, in the folder's order; the images of the
    positions in `corrupt` replaced by bytes that are no image."""
    os.makedirs(out, exist_ok=True)
    pattern = os.path.join(str(out), "shard-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for position, (path, label) in enumerate(samples):
            data = b"\xff\xd8 not a jpeg" if position in corrupt else open(path, "rb").read()
            extension = "png" if path.endswith(".png") else "jpg"
            sink.write({"__key__": f"s{position:04d}", extension: data,
                        "cls": str(label).encode()})
    return [pattern % shard for shard in range(-(-len(samples) // per_shard))]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=16, classes=2)


@pytest.fixture(scope="module")
def shard_urls(photos, tmp_path_factory):
    return write_shards(ImageFolder(photos).samples, tmp_path_factory.mktemp("shards"))


@pytest.mark.parametrize("workers", [0, 2])
def test_decode_over_shards_equals_torchvision_and_the_folder(photos, shard_urls, workers):
    shards = TarShards(shard_urls)
    assert isinstance(source_of(shards), TarShardSource)
    common = dict(batch_size=5, shuffle=True, num_workers=workers, reduced_dct=False)
    want, _ = batches(lambda g: torch.utils.data.DataLoader(
        Decoded(shards, train_steps()), generator=g, batch_size=5, shuffle=True,
        num_workers=workers))
    got, loader = batches(lambda g: PIMDataLoader(
        shards, transform=T.Compose([T.Decode(), *train_steps()]), generator=g, **common))
    assert_same_batches(want, got)
    assert loader.stats()[-1].backend == "cpu"     # the native path, not Python
    folder, _ = batches(lambda g: PIMDataLoader(
        ImageFolder(photos), transform=v2.Compose(train_steps()), generator=g, **common))
    assert_same_batches(folder, got)


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_members_follow_on_error(photos, tmp_path, workers):
    samples = ImageFolder(photos).samples
    urls = write_shards(samples, tmp_path / "shards", corrupt={3})
    shards = TarShards(urls)
    last = len(shards) - 1          # the shard of the last sample cut after indexing
    os.truncate(urls[-1], shards.index.member(last, 0)[0] + 10)
    transform = T.Compose([T.Decode(), v2.Resize(40), v2.CenterCrop(32)])
    loader = PIMDataLoader(shards, transform=transform, batch_size=4, num_workers=workers,
                           on_error="skip")
    got = list(loader)
    assert sum(len(labels) for _, labels in got) == len(shards) - 2
    assert loader.stats()[-1].skipped_samples == 2
    with pytest.raises((DecodeError, ShardMemberError), match=rf"{urls[0]}#s0003"):
        list(PIMDataLoader(shards, transform=transform, batch_size=4, num_workers=workers))
    shards.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_over_shards_is_bit_identical(shard_urls, workers):
    """A shard sampler's epoch cut after two batches and resumed in a new loader (other
    seeds) gives the uninterrupted run's remaining batches, random crops included."""
    from pimloader import ShardOrderSampler

    def make(seed):
        torch.manual_seed(seed)
        shards = TarShards(shard_urls)
        return PIMDataLoader(shards, sampler=ShardOrderSampler(shards, window=2, seed=seed),
                             transform=T.Compose([T.Decode(), *train_steps()]), batch_size=3,
                             num_workers=workers, generator=torch.Generator().manual_seed(seed))
    loader = make(7)
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    state = loader.state_dict()
    rest = [[images.clone(), labels.clone()] for images, labels in iterator]
    resumed = make(99)
    resumed.load_state_dict(state)
    assert_same_batches(rest, list(resumed))


def test_the_sample_cache_keys_shard_members(shard_urls):
    """cache_bytes over shards: the second epoch reads every member from the cache, with
    the first epoch's batches."""
    shards = TarShards(shard_urls)
    transform = T.Compose([T.Decode(), v2.Resize(40), v2.CenterCrop(32)])
    loader = PIMDataLoader(shards, transform=transform, batch_size=4, cache_bytes=1 << 24)
    first, second = list(loader), list(loader)
    assert_same_batches(first, second)
    assert loader.stats()[-1].cache_hits == len(shards) and loader.stats()[-1].cache_misses == 0
    loader.close()


def test_decode_on_dpus_over_shards_equals_the_cpu(photos, tmp_path):
    """decode_on_dpu=True over shard members: the emulated DPUs decode the seekable JPEGs
    (those with restart markers: make_seekable's copies) with the CPU backend's pixels."""
    from pimloader.decode import make_seekable
    make_seekable(photos, tmp_path / "seekable")
    shards = TarShards(write_shards(ImageFolder(tmp_path / "seekable").samples,
                                    tmp_path / "shards"))
    transform = T.Compose([T.Decode(), v2.Resize(40), v2.CenterCrop(32)])
    cpu = list(PIMDataLoader(shards, transform=transform, batch_size=4, backend="cpu"))
    loader = PIMDataLoader(shards, transform=transform, batch_size=4, backend="emulator",
                           nr_dpus=4, decode_on_dpu=True)
    assert_same_batches(cpu, list(loader))
    stats = loader.stats()[-1]
    assert stats.dpu_decode and stats.dpu_decoded_samples > 0
