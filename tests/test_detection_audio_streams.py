"""Detection and audio over IterableDatasets of encoded items take the native path, as
classification does (pipelines/sourced.py: IteratedBatches): a plain Python IterableDataset
of (bytes, target) items and webdataset's own pipeline, with T.Decode() first.

Oracle: torch's DataLoader over the same IterableDataset with the transform applied per item
as Python: torchvision's decode_image and the v2 joint transforms (detection, equal), or
soundfile, torchaudio's resample and torchaudio's transforms (audio, within the audio
tests' tolerance; and equal to the native path over the same items as a list). A bad item
is named by its place in the iterator, or dropped and counted (torch's DataLoader over the
items without it is the oracle); resume mid-epoch is bit-identical."""
from __future__ import annotations

import io
import json

import pytest
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchvision import tv_tensors

from _helpers import assert_same_batches, seeded_batches
from pimloader import DecodeError, PIMDataLoader
from pimloader import transforms as T
from pimloader.datasets import AudioFolder
from test_audio_pipeline import assert_close_features
from test_decode_step import (DecodedBoxes, Stream, as_lists, audio_steps, boxed_items,
                              detection_steps, train_steps)
from test_decode_step import clips, pairs, photos  # noqa: F401 - its fixtures

AF = pytest.importorskip("torchaudio.functional")
AT = pytest.importorskip("torchaudio.transforms")
RATE = 16000
GARBAGE = b"\xff\xd8\xff garbage"


def detection_transform():
    return T.Compose([T.Decode(), *detection_steps()])


def audio_transform():
    return T.Compose([T.Decode(sample_rate=RATE, downmix=True), *audio_steps()])


class Oracle(IterableDataset):
    """`dataset[i]` (torch's Python per item) for the items `Stream` gives each worker."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, len(self.dataset), step):
            yield self.dataset[index]


class ReferenceClips(torch.utils.data.Dataset):
    """(bytes, label) clips read by soundfile, down-mixed, resampled by torchaudio, then
    RandomCropOrPad and torchaudio's MelSpectrogram and AmplitudeToDB."""

    def __init__(self, items) -> None:
        self.items = items
        self.transform = T.Compose([T.RandomCropOrPad(8000), AT.MelSpectrogram(
            sample_rate=RATE, n_fft=400, hop_length=160, n_mels=40), AT.AmplitudeToDB()])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return reference_clip(self.items[index], self.transform)


def reference_clip(item, transform):
    import soundfile
    data, label = item
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    waveform = torch.from_numpy(samples.T.copy()).mean(0, keepdim=True)
    return transform(AF.resample(waveform, rate, RATE)), label


@pytest.fixture(scope="module")
def clip_items(clips):
    return [(open(path, "rb").read(), label)
            for path, label in AudioFolder(clips, sample_rate=RATE, downmix=True).samples]


def assert_close_clips(got, want):
    assert len(got) == len(want) > 0
    for number, ((features, labels), (want_features, want_labels)) in enumerate(zip(got, want)):
        assert torch.equal(labels, want_labels)
        assert_close_features(features, want_features, f"batch {number}")


def assert_native(loader, task: str, samples: int) -> None:
    stats = loader.stats()[-1]
    assert stats.task == task and stats.path.startswith("native"), (stats.task, stats.path)
    assert stats.kernel_samples == samples     # the fused kernel made every sample's output


# -- a plain Python IterableDataset of (bytes, target) ---------------------------------------

@pytest.mark.parametrize("workers", [0, 2])
def test_detection_stream_equals_torchvision(pairs, workers):
    items = boxed_items(pairs)
    common = dict(batch_size=3, num_workers=workers, collate_fn=as_lists)
    want, _ = seeded_batches(lambda g: DataLoader(Oracle(DecodedBoxes(items)), generator=g,
                                                  **common))
    got, loader = seeded_batches(lambda g: PIMDataLoader(
        Stream(items), transform=detection_transform(), generator=g, **common))
    assert_same_batches(got, want)
    assert_native(loader, "detection", len(items))


@pytest.mark.parametrize("workers", [0, 2])
def test_audio_stream_equals_torchaudio(clip_items, workers):
    common = dict(batch_size=2, num_workers=workers)
    want, _ = seeded_batches(lambda g: DataLoader(Oracle(ReferenceClips(clip_items)),
                                                  generator=g, **common))
    got, loader = seeded_batches(lambda g: PIMDataLoader(
        Stream(clip_items), transform=audio_transform(), generator=g, **common))
    assert_close_clips(got, want)
    assert_native(loader, "audio", len(clip_items))
    if workers == 0:   # in the list's order: the native path over the same items as a list
        listed, _ = seeded_batches(lambda g: PIMDataLoader(
            clip_items, transform=audio_transform(), generator=g, **common))
        assert_same_batches(got, listed)


# -- webdataset's own pipeline ---------------------------------------------------------------

def detection_target(annotation: bytes) -> dict:
    """The torchvision target of a shard's JSON annotation (as a user's map_tuple makes)."""
    record = json.loads(annotation)
    return {"boxes": tv_tensors.BoundingBoxes(record["boxes"], format="XYXY",
                                              canvas_size=tuple(record["canvas"])),
            "labels": torch.tensor(record["labels"]), "image_id": record["image_id"]}


def write_shards(root, samples) -> list:
    wds = pytest.importorskip("webdataset")
    with wds.ShardWriter(str(root / "shard-%04d.tar"), maxcount=4, verbose=0) as writer:
        for number, sample in enumerate(samples):
            writer.write({"__key__": f"{number:05d}", **sample})
    return sorted(str(path) for path in root.glob("shard-*.tar"))


@pytest.fixture(scope="module")
def detection_shards(tmp_path_factory, pairs):
    samples = []
    for data, target in boxed_items(pairs):
        annotation = {"boxes": target["boxes"].tolist(), "labels": target["labels"].tolist(),
                      "canvas": list(target["boxes"].canvas_size),
                      "image_id": target["image_id"]}
        samples.append({"jpg": data, "json": json.dumps(annotation).encode()})
    return write_shards(tmp_path_factory.mktemp("wds-detection"), samples)


@pytest.fixture(scope="module")
def audio_shards(tmp_path_factory, clip_items):
    return write_shards(tmp_path_factory.mktemp("wds-audio"),
                        [{"wav": data, "cls": str(label).encode()} for data, label in clip_items])


def webdataset(shards, keys):
    import webdataset as wds
    return wds.WebDataset(shards, shardshuffle=False, empty_check=False).to_tuple(keys)


def decoded_boxes(sample):
    return DecodedBoxes([sample])[0]


def decoded_clip(sample):
    return reference_clip(sample, ReferenceClips([]).transform)


@pytest.mark.parametrize("workers", [0, 2])
def test_detection_over_webdataset_equals_torchvision(detection_shards, pairs, workers):
    def stream():
        return webdataset(detection_shards, "jpg;png json").map_tuple(None, detection_target)
    common = dict(batch_size=3, num_workers=workers, collate_fn=as_lists)
    want, _ = seeded_batches(lambda g: DataLoader(stream().map(decoded_boxes), generator=g,
                                                  **common))
    got, loader = seeded_batches(lambda g: PIMDataLoader(
        stream(), transform=detection_transform(), generator=g, **common))
    assert_same_batches(got, want)
    assert_native(loader, "detection", len(pairs))


@pytest.mark.parametrize("workers", [0, 2])
def test_audio_over_webdataset_equals_torchaudio(audio_shards, clip_items, workers):
    common = dict(batch_size=2, num_workers=workers)
    want, _ = seeded_batches(lambda g: DataLoader(
        webdataset(audio_shards, "wav;flac cls").map(decoded_clip), generator=g, **common))
    got, loader = seeded_batches(lambda g: PIMDataLoader(
        webdataset(audio_shards, "wav;flac cls"), transform=audio_transform(), generator=g,
        **common))
    assert_close_clips([(features, torch.tensor([int(label) for label in labels]))
                        for features, labels in got],
                       [(features, torch.tensor([int(label) for label in labels]))
                        for features, labels in want])
    assert [labels for _, labels in got] == [labels for _, labels in want]
    assert_native(loader, "audio", len(clip_items))


# -- bad items: named by their place, or dropped and counted --------------------------------

def spoiled(items, bad: int, data: bytes) -> list:
    items = list(items)
    items[bad] = (data, items[bad][1])
    return items


def without(count: int, bad: int, size: int) -> list:
    return [[index for index in range(start, min(start + size, count)) if index != bad]
            for start in range(0, count, size)]


KINDS = {
    "detection": (lambda pairs, clips: boxed_items(pairs), detection_transform,
                  lambda items: DecodedBoxes(items), dict(collate_fn=as_lists)),
    "audio": (lambda pairs, clips: clips, audio_transform, ReferenceClips, {}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("workers", [0, 2])
def test_a_bad_item_is_named_by_its_place(pairs, clip_items, kind, workers):
    make_items, transform, _, extra = KINDS[kind]
    items = spoiled(make_items(pairs, clip_items), 4, GARBAGE)
    place = 4 // max(workers, 1)       # Stream deals the items out to the workers in turn
    with pytest.raises(DecodeError, match=f"sample {place} of this process's iterator"):
        list(PIMDataLoader(Stream(items), transform=transform(), batch_size=3,
                           num_workers=workers, **extra))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_bad_item_is_dropped_and_counted(pairs, clip_items, kind):
    """The items kept get the draws they get without the bad one: torch's DataLoader over
    the items, batched without it, is the oracle."""
    make_items, transform, oracle, extra = KINDS[kind]
    items = spoiled(make_items(pairs, clip_items), 4, GARBAGE)
    want, _ = seeded_batches(lambda g: DataLoader(
        oracle(items), batch_sampler=without(len(items), 4, 3), generator=g, **extra))
    got, loader = seeded_batches(lambda g: PIMDataLoader(
        Stream(items), transform=transform(), batch_size=3, on_error="skip", generator=g,
        **extra))
    if kind == "audio":
        assert_close_clips(got, want)
    else:
        assert_same_batches(got, want)
    assert loader.stats()[-1].skipped_samples == 1
    assert_native(loader, kind, len(items) - 1)


def test_box_targets_under_a_transform_without_box_steps_are_named(pairs):
    """The transform says which task an IterableDataset's items take (no item is read
    before the loader iterates): box targets under classification would leave the boxes
    where they were, so the item is named with what to add."""
    transform = T.Compose([T.Decode(), v2.Resize((32, 32)), v2.RandomHorizontalFlip()])
    loader = PIMDataLoader(Stream(boxed_items(pairs)), transform=transform, batch_size=3,
                           collate_fn=as_lists)
    with pytest.raises(TypeError, match=r"sample 0 of this process's iterator.*"
                                        r"BoundingBoxes.*T\.SanitizeBoundingBoxes"):
        list(loader)
    boxed = T.Compose([*transform.transforms, v2.ClampBoundingBoxes()])
    assert len(list(PIMDataLoader(Stream(boxed_items(pairs)), transform=boxed, batch_size=3,
                                  collate_fn=as_lists))) == 6


@pytest.mark.parametrize("kind", ["classification", *sorted(KINDS)])
def test_an_unbatched_stream_under_decode_is_refused(pairs, clip_items, kind):
    """batch_size=None over encoded items under T.Decode(): the native path transforms a
    batch at a time, and torch's unbatched path would hand out the raw bytes with the
    transform silently left out, so the loader refuses it when it is made."""
    if kind == "classification":
        items, transform = pairs, T.Compose([T.Decode(), *train_steps()])
    else:
        make_items, make_transform, _, _ = KINDS[kind]
        items, transform = make_items(pairs, clip_items), make_transform()
    with pytest.raises(ValueError, match=r"batch_size=None over an IterableDataset"):
        PIMDataLoader(Stream(items), transform=transform, batch_size=None)


# -- resume ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_bit_identical(pairs, clip_items, kind, workers):
    make_items, transform, _, extra = KINDS[kind]
    items = make_items(pairs, clip_items)

    def make(seed):
        torch.manual_seed(seed)
        return PIMDataLoader(Stream(items), transform=transform(), batch_size=2,
                             num_workers=workers, generator=torch.Generator().manual_seed(seed),
                             **extra)
    loader = make(7)
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    state = loader.state_dict()
    rest = [copied(batch) for batch in iterator]
    resumed = make(99)                      # other seeds: the state must carry them
    resumed.load_state_dict(state)
    assert_same_batches(list(resumed), rest)
    assert_native(resumed, kind, sum(len(batch[1]) for batch in rest))


def copied(batch):
    """The batch, its tensors cloned (slots are reused once the next batch comes)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, dict):
        return {key: copied(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(copied(value) for value in batch)
    return batch
