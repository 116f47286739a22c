"""ArrowColumns in loaders: torch's DataLoader with torchvision's decode_image and v2
transforms over the wrapper gives the batches it gives over the original files (0 and 2
workers, the same seed); DistributedSampler over 2 ranks sees every row once; PIMDataLoader
batches the wrapper's items as torch's DataLoader does, and with `T.Decode()` first its
native path gives decode_image + v2's batches (fork and spawn workers), resumes mid-epoch
with the same crops, and names a corrupt cell by its Arrow file and row.

Oracles: torch's DataLoader over a dataset that reads the photo files themselves (in the
dataset's order, from its column "n"), decoded by torchvision; the set of the dataset's
rows; torch's DataLoader over the wrapper; for clips, T.Decode and the waveform steps as
Python over the files, and PIMDataLoader over the AudioFolder of the same files (its audio
path is checked against torchaudio in test_audio_pipeline.py)."""
from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pytest
import soundfile
import torch
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from _arrow_data import file_bytes, in_memory, make_clips, make_photos, saved
from _helpers import DecodedItems, assert_same, assert_same_batches, compare_with_torch
from pimloader import PIMDataLoader
from pimloader import transforms as T
from pimloader.datasets import ArrowColumns, AudioFolder
from pimloader.decode import DecodeError

hf = pytest.importorskip("datasets")
hf.disable_progress_bars()

TRANSFORM = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(),
                        v2.ToDtype(torch.float32, scale=True),
                        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def table(photos, tmp_path_factory):
    """The photos saved to disk and loaded (memory-mapped, bytes in the cells)."""
    return saved(hf, in_memory(hf, *photos), tmp_path_factory.mktemp("table") / "saved")


class Files(Dataset):
    """The oracle: the photo files' bytes read by path, items (bytes, label)."""

    def __init__(self, paths, labels):
        self.paths, self.labels = paths, labels

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return file_bytes(self.paths[index]), self.labels[index]


def Decoded(items, transform=None):
    """Items (bytes, target) decoded by torchvision and transformed (TRANSFORM by default)."""
    return DecodedItems(items, TRANSFORM if transform is None else transform)


class Transformed(Dataset):
    """Items (bytes, target) of `items` with `transform` on the bytes, as Python."""

    def __init__(self, items, transform):
        self.items, self.transform = items, transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        data, target = self.items[index]
        return self.transform(data), target


class Clips(Dataset):
    """Items (bytes, target) as libsndfile's waveform (float32) and the target."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        data, target = self.items[index]
        samples, _ = soundfile.read(io.BytesIO(data), dtype="float32")
        return torch.from_numpy(samples), target


def run(dataset, num_workers, seed=3, make=DataLoader, **options):
    """(the batches of one shuffled epoch, the loader) under the given seed."""
    torch.manual_seed(seed)
    options.setdefault("batch_size", 8)
    loader = make(dataset, shuffle=True, num_workers=num_workers,
                  generator=torch.Generator().manual_seed(seed), **options)
    batches = list(loader)
    if hasattr(loader, "close"):
        loader.close()
    return batches, loader


def epoch(dataset, num_workers, seed=3, make=DataLoader, **options):
    return run(dataset, num_workers, seed, make, **options)[0]


def files_in_order(dataset, photos) -> Files:
    """The photo files in the dataset's order (its column "n")."""
    paths, labels = photos
    return Files([paths[n] for n in dataset["n"]], [labels[n] for n in dataset["n"]])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_decode_image_and_v2_over_the_wrapper_equal_the_same_over_the_files(
        num_workers, table, photos):
    rotated = [*range(9, len(photos[0])), *range(9)]   # through an indices mapping
    for dataset in (table, table.select(rotated)):
        want = epoch(Decoded(files_in_order(dataset, photos)), num_workers)
        got = epoch(Decoded(ArrowColumns(dataset)), num_workers)
        assert_same_batches(got, want)


def test_clips_through_libsndfile_equal_the_files(tmp_path):
    paths, labels = make_clips(tmp_path / "clips")
    dataset = saved(hf, in_memory(hf, paths, labels, "audio", hf.Audio(decode=False)),
                    tmp_path / "saved")
    collate = list   # clips of several lengths: a list of (waveform, target)
    want = epoch(Clips(Files(paths, labels)), 2, batch_size=3, collate_fn=collate)
    got = epoch(Clips(ArrowColumns(dataset)), 2, batch_size=3, collate_fn=collate)
    assert_same_batches(got, want)


@pytest.mark.parametrize("make", [DataLoader, PIMDataLoader], ids=["torch", "pimloader"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_distributed_sampler_over_two_ranks_sees_every_row_once(make, num_workers, table):
    wrapper = ArrowColumns(table.shuffle(seed=8))
    seen = Counter()
    for rank in range(2):
        sampler = DistributedSampler(wrapper, num_replicas=2, rank=rank, shuffle=True, seed=11)
        sampler.set_epoch(1)
        loader = make(wrapper, batch_size=5, sampler=sampler, num_workers=num_workers)
        for data, labels in loader:
            seen.update(zip(data, labels.tolist()))
    assert seen == Counter(wrapper[i] for i in range(len(wrapper)))
    assert set(seen.values()) == {1} and len(seen) == len(table)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pimloader_batches_the_items_as_torch_does(num_workers, table):
    compare_with_torch(ArrowColumns(table.shuffle(seed=2)), epochs=2, gen_seed=5,
                       batch_size=6, shuffle=True, num_workers=num_workers)


# -- PIMDataLoader with T.Decode(): the native path over the Arrow cells -------------------

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_steps():
    return [v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("order", ["saved", "shuffled", "in_memory"])
def test_pimloader_decode_equals_decode_image_and_v2(num_workers, order, table, photos):
    dataset = {"saved": table, "shuffled": table.shuffle(seed=6),
               "in_memory": in_memory(hf, *photos)}[order]   # in memory: cells hold paths
    want = epoch(Decoded(files_in_order(dataset, photos), v2.Compose(train_steps())),
                 num_workers)
    transform = T.Compose([T.Decode(), *train_steps()])
    got, loader = run(ArrowColumns(dataset), num_workers, make=PIMDataLoader,
                      transform=transform, reduced_dct=False)
    assert_same_batches(got, want)
    assert loader.stats()[-1].backend == "cpu"   # the native path, not Python


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decode"])
def test_pimloader_resumes_mid_epoch(num_workers, decoded, table):
    """The batches after a state_dict taken mid-epoch, as the items (torch's path) and
    through T.Decode() (the native path: the same crops)."""
    wrapper = ArrowColumns(table.shuffle(seed=9))
    transform = T.Compose([T.Decode(), *train_steps()]) if decoded else None

    def loader(seed):
        torch.manual_seed(seed)
        return PIMDataLoader(wrapper, batch_size=4, shuffle=True, num_workers=num_workers,
                             transform=transform, generator=torch.Generator().manual_seed(seed))
    first = loader(7)
    batches, state = [], None
    for batch in first:
        batches.append(batch)
        if len(batches) == 4:
            state = first.state_dict()
    first.close()
    resumed = loader(99)
    resumed.load_state_dict(state)
    rest = list(resumed)
    resumed.close()
    assert len(rest) == len(batches) - 4 > 0
    for i, (got, want) in enumerate(zip(rest, batches[4:])):
        assert_same(got, want, f"resumed[{i}]")
    if not decoded:   # the whole epoch saw every row once
        seen = Counter(data for datas, _ in batches for data in datas)
        assert seen == Counter(wrapper[i][0] for i in range(len(wrapper)))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_corrupt_cell_is_named_by_its_arrow_file_and_row(num_workers, photos, tmp_path):
    cells = [{"bytes": file_bytes(path), "path": None} for path in photos[0][:12]]
    cells[3]["bytes"] = cells[3]["bytes"][:150]          # truncated mid-scan
    features = hf.Features({"image": hf.Image(decode=False), "label": hf.Value("int64")})
    dataset = hf.Dataset.from_dict({"image": cells, "label": photos[1][:12]}, features=features)
    dataset.save_to_disk(str(tmp_path / "bad"))
    wrapper = ArrowColumns(hf.load_from_disk(str(tmp_path / "bad")))
    transform = T.Compose([T.Decode(), v2.Resize(24), v2.CenterCrop(24)])
    loader = PIMDataLoader(wrapper, transform=transform, batch_size=4, num_workers=num_workers)
    with pytest.raises(DecodeError, match=r"data-00000-of-00001\.arrow\[row 3\]"):
        list(loader)
    loader.close()
    loader = PIMDataLoader(wrapper, transform=transform, batch_size=4, num_workers=num_workers,
                           on_error="skip")
    assert sum(len(labels) for _, labels in loader) == len(wrapper) - 1
    assert loader.stats()[-1].skipped_samples == 1
    loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pimloader_decode_of_clips_equals_the_same_as_python(num_workers, tmp_path):
    paths, labels = make_clips(tmp_path / "clips")
    dataset = saved(hf, in_memory(hf, paths, labels, "audio", hf.Audio(decode=False)),
                    tmp_path / "saved")
    wrapper = ArrowColumns(dataset)
    transform = T.Compose([T.Decode(sample_rate=16000, downmix=True), T.RandomCropOrPad(700),
                           T.RandomTimeShift(50)])
    want = epoch(Transformed(Files(paths, labels), transform), num_workers, batch_size=3)
    got = epoch(wrapper, num_workers, batch_size=3, make=PIMDataLoader, transform=transform)
    assert_same_batches(got, want)


def test_spawned_workers_map_the_files_themselves(table, photos):
    """Under spawn the wrapper travels pickled (by file reference) and each worker opens
    the Arrow files itself."""
    want = epoch(Decoded(files_in_order(table, photos), v2.Compose(train_steps())), 2)
    got = epoch(ArrowColumns(table), 2, make=PIMDataLoader, multiprocessing_context="spawn",
                transform=T.Compose([T.Decode(), *train_steps()]), reduced_dct=False)
    assert_same_batches(got, want)


def test_the_encoded_sample_cache_keys_on_the_arrow_rows(table, photos):
    """cache_bytes=: the second epoch reads every row from the cache (keyed on
    "<arrow file>#row"), with the batches of a loader without it."""
    transform = T.Compose([T.Decode(), *train_steps()])
    wrapper = ArrowColumns(table.shuffle(seed=3))
    options = dict(num_workers=2, transform=transform, reduced_dct=False, batch_size=8,
                   shuffle=True, persistent_workers=True)
    plain = PIMDataLoader(wrapper, generator=torch.Generator().manual_seed(1), **options)
    cached = PIMDataLoader(wrapper, generator=torch.Generator().manual_seed(1),
                           cache_bytes=1 << 20, **options)
    for _ in range(2):
        torch.manual_seed(5)
        want = list(plain)
        torch.manual_seed(5)
        assert_same_batches(list(cached), want)
    first, second = cached.stats()[-2:]
    assert first.cache_misses == len(wrapper) and second.cache_hits == len(wrapper)
    plain.close()
    cached.close()


def speech_steps():
    return [T.RandomCropOrPad(8000), T.MelSpectrogram(sample_rate=16000, n_fft=400,
                                                     hop_length=160, n_mels=40),
            T.AmplitudeToDB()]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_clip_cells_take_the_audio_path_as_the_audio_folder(num_workers, tmp_path):
    """Clips of several rates, mono and stereo, as an Arrow table's Audio(decode=False)
    cells under T.Decode(sample_rate=16000, downmix=True): the fused feature kernel's
    batches of the AudioFolder of the same files."""
    rng = np.random.default_rng(3)
    for label, rates in (("go", (16000, 22050, 8000)), ("stop", (44100, 16000, 11025))):
        (tmp_path / "speech" / label).mkdir(parents=True)
        for number, rate in enumerate(rates):
            frames = int(rate * rng.uniform(0.3, 0.9))
            soundfile.write(tmp_path / "speech" / label / f"{number}.wav",
                            rng.uniform(-0.4, 0.4, (frames, 1 + number % 2)).astype(np.float32),
                            rate, subtype="PCM_16")
    folder = AudioFolder(tmp_path / "speech", sample_rate=16000, downmix=True)
    paths, labels = zip(*folder.samples)
    table = hf.Dataset.from_dict({"audio": list(paths), "label": list(labels)}).cast_column(
        "audio", hf.Audio(decode=False))
    wrapper = ArrowColumns(saved(hf, table, tmp_path / "saved"))
    decode = T.Decode(sample_rate=16000, downmix=True)
    want = epoch(folder, num_workers, batch_size=3, make=PIMDataLoader,
                 transform=T.Compose(speech_steps()))
    got, loader = run(wrapper, num_workers, batch_size=3, make=PIMDataLoader,
                      transform=T.Compose([decode, *speech_steps()]))
    assert_same_batches(got, want)
    assert loader.stats()[-1].kernel_samples == len(wrapper)   # the fused feature kernel ran
