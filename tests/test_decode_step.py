"""T.Decode: datasets whose items are encoded bytes take the native path.

Oracle: torch's DataLoader over the same items, the transform applied as Python with
torchvision's `decode_image(data, mode=RGB)` first and the same v2 steps after, under the
same seeds; and PIMDataLoader over an ImageFolder of the same files (same order and seed).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from torchvision.io import ImageReadMode, decode_image

from _helpers import DecodedItems as Decoded, assert_same_batches
from _helpers import seeded_batches as batches
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader
from pimloader import transforms as T
from pimloader.datasets import AudioFolder, ImageFolder, ItemsSource
from pimloader.decode import DecodeError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_steps():
    return [v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=16, classes=2)


@pytest.fixture(scope="module")
def pairs(photos):
    """(bytes, label) items of the folder's files, in ImageFolder's order."""
    return [(open(path, "rb").read(), label) for path, label in ImageFolder(photos).samples]


@pytest.mark.parametrize("workers", [0, 2])
def test_bytes_items_equal_torchvision_and_the_image_folder(photos, pairs, workers):
    common = dict(batch_size=5, shuffle=True, num_workers=workers)
    want, _ = batches(lambda g: torch.utils.data.DataLoader(
        Decoded(pairs, train_steps()), generator=g, **common))
    got, loader = batches(lambda g: PIMDataLoader(
        pairs, transform=T.Compose([T.Decode(), *train_steps()]), generator=g,
        reduced_dct=False, **common))   # the exact path (reduced_dct: see test_image_pipeline)
    assert_same_batches(want, got)
    assert loader.stats()[-1].backend == "cpu"          # the native path, not Python
    folder, _ = batches(lambda g: PIMDataLoader(
        ImageFolder(photos), transform=v2.Compose(train_steps()), generator=g,
        reduced_dct=False, **common))
    assert_same_batches(folder, got)
    reduced, _ = batches(lambda g: PIMDataLoader(
        pairs, transform=T.Compose([T.Decode(), *train_steps()]), generator=g, **common))
    folder, _ = batches(lambda g: PIMDataLoader(
        ImageFolder(photos), transform=v2.Compose(train_steps()), generator=g, **common))
    assert_same_batches(folder, reduced)   # reduced_dct="auto" reads bytes as it reads files


class ArrayBlobs(torch.utils.data.Dataset):
    """A user's dataset: numpy blobs (as from a key-value store) and string targets."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        data, label = self.pairs[index]
        return np.frombuffer(data, dtype=np.uint8), f"class-{label}"


def test_a_users_dataset_of_arrays(pairs):
    steps = [v2.Resize(40), v2.CenterCrop(32)]
    want, _ = batches(lambda g: torch.utils.data.DataLoader(
        Decoded(ArrayBlobs(pairs), steps), batch_size=4, generator=g))
    got, loader = batches(lambda g: PIMDataLoader(
        ArrayBlobs(pairs), transform=T.Compose([T.Decode(), *steps]), batch_size=4,
        generator=g))
    assert_same_batches(want, got)
    assert loader.stats()[-1].backend == "cpu"
    assert isinstance(ItemsSource.of(ArrayBlobs(pairs)), ItemsSource)


def test_decode_as_python_is_decode_image(pairs):
    data = pairs[0][0]
    want = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                        mode=ImageReadMode.RGB)
    for given in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                  torch.frombuffer(bytearray(data), dtype=torch.uint8)):
        assert torch.equal(T.Decode()(given), want)
    grey = T.Decode(mode="GRAY")(data)
    assert torch.equal(grey, decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                          mode=ImageReadMode.GRAY))


def test_decode_errors():
    with pytest.raises(DecodeError, match="encoded image"):
        T.Decode()(b"\xff\xd8 not a jpeg at all")
    with pytest.raises(TypeError, match="encoded bytes"):
        T.Decode()(torch.zeros(3, 4, 4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="ArrowColumns"):    # a Hugging Face row
        T.Decode()({"image": {"bytes": b"", "path": None}, "label": 0})
    with pytest.raises(ValueError, match="mode"):
        T.Decode(mode="CMYK")
    with pytest.raises(ValueError, match="sample_rate"):
        T.Decode(sample_rate=0)


def test_other_modes_run_as_python_and_still_equal(pairs):
    steps = [v2.Resize(32), v2.CenterCrop(24)]
    oracle = [(T.Decode(mode="GRAY")(data), label) for data, label in pairs]
    want = list(torch.utils.data.DataLoader(
        [(v2.Compose(steps)(image), label) for image, label in oracle], batch_size=4))
    loader = PIMDataLoader(pairs, transform=T.Compose([T.Decode(mode="GRAY"), *steps]),
                           batch_size=4)
    assert_same_batches(want, list(loader))


def test_image_ops_over_bytes_without_decode_say_so(pairs):
    with pytest.raises(ValueError, match=r"T\.Decode\(\)"):
        PIMDataLoader(pairs, transform=v2.Compose(train_steps()), batch_size=4)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_corrupt_item_is_named_or_skipped(pairs, workers):
    items = list(pairs)
    items[3] = (items[3][0][:200], items[3][1])       # truncated mid-scan
    items[5] = (b"\xff\xd8\xff garbage", items[5][1])
    transform = T.Compose([T.Decode(), v2.Resize(32), v2.CenterCrop(32)])
    loader = PIMDataLoader(items, transform=transform, batch_size=4, num_workers=workers)
    with pytest.raises(DecodeError, match="item [35] of list"):
        list(loader)
    loader = PIMDataLoader(items, transform=transform, batch_size=4, num_workers=workers,
                           on_error="skip")
    got = list(loader)
    assert sum(len(labels) for _, labels in got) == len(items) - 2
    assert loader.stats()[-1].skipped_samples == 2


def test_audio_decode_as_python_equals_the_audio_folder(tmp_path):
    import soundfile
    rng = np.random.default_rng(0)
    (tmp_path / "yes").mkdir()
    path = tmp_path / "yes" / "a.wav"
    soundfile.write(path, rng.uniform(-0.5, 0.5, (1200, 2)).astype(np.float32), 8000,
                    subtype="PCM_16")
    folder = AudioFolder(tmp_path, sample_rate=16000, downmix=True)
    decoded = T.Decode(sample_rate=16000, downmix=True)(path.read_bytes())
    assert torch.equal(decoded, folder[0][0])


def audio_steps():
    return [T.RandomCropOrPad(8000), T.MelSpectrogram(sample_rate=16000, n_fft=400,
                                                     hop_length=160, n_mels=40),
            T.AmplitudeToDB()]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    import soundfile
    root = tmp_path_factory.mktemp("speech")
    rng = np.random.default_rng(1)
    for label, rates in (("go", (16000, 22050, 8000)), ("stop", (44100, 16000, 11025))):
        (root / label).mkdir()
        for number, rate in enumerate(rates):
            frames = int(rate * rng.uniform(0.3, 0.9))
            soundfile.write(root / label / f"{number}.wav",
                            rng.uniform(-0.4, 0.4, (frames, 1 + number % 2)).astype(np.float32),
                            rate, subtype="PCM_16")
    return root


@pytest.mark.parametrize("workers", [0, 2])
def test_clip_bytes_take_the_audio_path_as_the_audio_folder(clips, workers):
    folder = AudioFolder(clips, sample_rate=16000, downmix=True)
    items = [(open(path, "rb").read(), label) for path, label in folder.samples]
    common = dict(batch_size=3, shuffle=True, num_workers=workers)
    want, _ = batches(lambda g: PIMDataLoader(
        folder, transform=T.Compose(audio_steps()), generator=g, **common))
    got, loader = batches(lambda g: PIMDataLoader(
        items, transform=T.Compose([T.Decode(sample_rate=16000, downmix=True), *audio_steps()]),
        generator=g, **common))
    assert_same_batches(want, got)
    assert loader.stats()[-1].kernel_samples == len(items)    # the fused feature kernel ran
    python = [(T.Compose(audio_steps())(T.Decode(sample_rate=16000, downmix=True)(data)), label)
              for data, label in items]
    assert [tuple(features.shape) for features, _ in python] == [(1, 40, 51)] * len(items)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_over_bytes_is_bit_identical(pairs, workers):
    """Resume lives in the loader, under every source and task: the rest of an epoch over
    encoded items, random crops included, is the uninterrupted run's."""
    def make(seed):
        torch.manual_seed(seed)
        return PIMDataLoader(pairs, transform=T.Compose([T.Decode(), *train_steps()]),
                             batch_size=3, shuffle=True, num_workers=workers,
                             generator=torch.Generator().manual_seed(seed))
    loader = make(7)
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    state = loader.state_dict()
    rest = [[images.clone(), labels.clone()] for images, labels in iterator]
    resumed = make(99)                      # other seeds: the state must carry them
    resumed.load_state_dict(state)
    assert_same_batches(rest, list(resumed))
    assert resumed.stats()[-1].backend == "cpu"


class Stream(torch.utils.data.IterableDataset):
    """A stream of (bytes, label) items, split over workers as webdataset splits shards."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for data, label in self.pairs[start::step]:
            yield data, label


class DecodedStream(Stream):
    def __init__(self, pairs, steps):
        super().__init__(pairs)
        self.transform = v2.Compose(steps)

    def __iter__(self):
        for data, label in super().__iter__():
            yield self.transform(T.Decode()(data)), label


@pytest.mark.parametrize("workers,drop_last", [(0, False), (2, False), (2, True)])
def test_an_iterable_of_bytes_takes_the_native_path(pairs, workers, drop_last):
    common = dict(batch_size=3, num_workers=workers, drop_last=drop_last)
    want, _ = batches(lambda g: torch.utils.data.DataLoader(
        DecodedStream(pairs, train_steps()), generator=g, **common))
    got, loader = batches(lambda g: PIMDataLoader(
        Stream(pairs), transform=T.Compose([T.Decode(), *train_steps()]), generator=g,
        reduced_dct=False, **common))
    assert_same_batches(want, got)
    stats = loader.stats()[-1]
    assert stats.backend == "cpu" and stats.shared_batches == len(got)   # straight to slots


def test_a_bad_item_in_a_stream_is_named_by_its_place(pairs):
    items = list(pairs)
    items[4] = (b"\xff\xd8\xff garbage", items[4][1])
    transform = T.Compose([T.Decode(), v2.Resize(32), v2.CenterCrop(32)])
    with pytest.raises(DecodeError, match="sample 4 of this process's iterator"):
        list(PIMDataLoader(Stream(items), transform=transform, batch_size=3))
    loader = PIMDataLoader(Stream(items), transform=transform, batch_size=3, on_error="skip")
    assert sum(len(labels) for _, labels in loader) == len(items) - 1
    assert loader.stats()[-1].skipped_samples == 1


class DecodesItself(torch.utils.data.Dataset):
    """The usual custom Dataset: decodes and transforms inside __getitem__."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        data, label = self.pairs[index]
        return v2.CenterCrop(32)(T.Decode()(data)), label


def test_stats_and_a_notice_say_which_path_and_why(pairs):
    import warnings
    from pimloader import PathNotice
    from pimloader.loader import tasks
    tasks._NOTICED.clear()
    native = PIMDataLoader(pairs, transform=T.Compose([T.Decode(), v2.CenterCrop(32)]),
                           batch_size=4)
    list(native)
    assert native.stats()[-1].task == "classification"
    assert native.stats()[-1].path.startswith("native")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = PIMDataLoader(DecodesItself(pairs), batch_size=4)
        PIMDataLoader(DecodesItself(pairs), batch_size=4)          # said once, not twice
    notices = [w for w in caught if issubclass(w.category, PathNotice)]
    assert len(notices) == 1 and "DecodesItself" in str(notices[0].message)
    assert "T.Decode()" in str(notices[0].message)
    list(loader)
    assert loader.stats()[-1].task == "" and "T.Decode()" in loader.stats()[-1].path
    python = PIMDataLoader(pairs, transform=T.Compose([T.Decode(mode="GRAY"),
                                                      v2.CenterCrop(32)]), batch_size=4)
    list(python)
    assert python.stats()[-1].task == "python_transform"


# -- detection: (bytes, torchvision target) items under T.Decode() ----------------------------

def boxed_items(pairs):
    """(bytes, target) items with boxes that a detection pipeline moves, built from the
    photos' sizes (read from their headers by Pillow, an independent oracle)."""
    import io
    from PIL import Image
    from torchvision import tv_tensors
    items = []
    for number, (data, label) in enumerate(pairs):
        width, height = Image.open(io.BytesIO(data)).size
        boxes = tv_tensors.BoundingBoxes(
            [[width * 0.1, height * 0.2, width * 0.6, height * 0.7],
             [width * 0.5, height * 0.1, width * 0.9, height * 0.4]],
            format="XYXY", canvas_size=(height, width))
        items.append((data, {"boxes": boxes, "labels": torch.tensor([label, number % 3]),
                             "image_id": number}))
    return items


def detection_steps():
    return [v2.RandomPhotometricDistort(p=1), v2.RandomZoomOut(fill=114, p=0.5),
            v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((64, 64)),
            v2.SanitizeBoundingBoxes(), v2.ToDtype(torch.float32, scale=True)]


class DecodedBoxes(torch.utils.data.Dataset):
    """The oracle: torchvision's decode_image, then the v2 joint transforms."""

    def __init__(self, items):
        self.items, self.transforms = items, v2.Compose(detection_steps())

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        from torchvision import tv_tensors
        data, target = self.items[index]
        image = tv_tensors.Image(decode_image(torch.frombuffer(bytearray(data),
                                                               dtype=torch.uint8),
                                              mode=ImageReadMode.RGB))
        return self.transforms(image, {key: value.clone() if torch.is_tensor(value) else value
                                       for key, value in target.items()})


def as_lists(batch):
    return tuple(zip(*batch))


@pytest.mark.parametrize("workers", [0, 2])
def test_detection_items_under_decode_equal_torchvision(pairs, workers):
    items = boxed_items(pairs)
    common = dict(batch_size=4, shuffle=True, num_workers=workers, collate_fn=as_lists)
    want, _ = batches(lambda g: torch.utils.data.DataLoader(DecodedBoxes(items), generator=g,
                                                            **common))
    got, loader = batches(lambda g: PIMDataLoader(
        items, transform=T.Compose([T.Decode(), *detection_steps()]), generator=g, **common))
    assert_same_batches(want, got)
    stats = loader.stats()[-1]
    assert stats.task == "detection" and stats.kernel_samples == len(items)   # fused kernel
    assert torch.equal(items[0][1]["boxes"], boxed_items(pairs)[0][1]["boxes"])  # untouched


def test_detection_decode_as_python_on_whole_samples(pairs):
    data, target = boxed_items(pairs)[0]
    image, same = T.Decode()(data, target)
    assert same is target and torch.equal(image, T.Decode()(data))
    assert T.Decode()((data, target))[1] is target


def test_boxes_on_another_canvas_are_named(pairs):
    from torchvision import tv_tensors
    items = boxed_items(pairs)
    data, target = items[2]
    target["boxes"] = tv_tensors.BoundingBoxes(target["boxes"], format="XYXY",
                                               canvas_size=(7, 9))
    loader = PIMDataLoader(items, transform=T.Compose([T.Decode(), *detection_steps()]),
                           batch_size=4, collate_fn=as_lists)
    with pytest.raises(ValueError, match=r"item 2 of list: its boxes' canvas_size \(7, 9\)"):
        list(loader)
