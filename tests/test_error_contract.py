"""One error contract on every path (README "Errors"): a bad sample raises an error naming it
and its cause, an OSError as torchvision's datasets raise; on_error="skip" drops and counts
it, native path or Python; a batch of bad samples only is one DecodeError everywhere; wrong
arguments are refused as the loader (or the dataset) is made.

Oracles: torch's DataLoader over the same torchvision datasets (what it raises, its batches
without the bad sample), Pillow (the cause), torchvision's CocoDetection (when it finds a
missing image folder)."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import soundfile
import torch
import torchvision
import torchvision.transforms.v2 as v2
from PIL import Image
from torch.utils.data import DataLoader, default_collate

from _coco import make_coco, torchvision_coco
from _helpers import assert_same_batches
from pimloader import DecodeError, PIMDataLoader
from pimloader.datasets import AudioFolder, CocoDetection
from pimloader.pipelines.classification import EncodedImages
from pimloader.pipelines.in_memory import InMemoryImages
from pimloader.pipelines.python_transform import PythonTransform

# does not lower (PILToTensor keeps the transform in Python): the transform as Python
PYTHON = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(48), v2.ToDtype(torch.uint8)])
# lowers: the native path (classification)
NATIVE = v2.Compose([v2.RandomResizedCrop(48), v2.ToDtype(torch.float32, scale=True)])


def make_folder(root, broken: dict) -> dict:
    """Two classes of four JPEGs each; `broken` {file: how} spoils some ("half": truncated,
    "junk": not an image). Returns {file: path}."""
    paths = {}
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(4):
            pixels = np.random.default_rng(10 * ord(label) + i).integers(
                0, 256, (40 + 8 * i, 56, 3), dtype=np.uint8)
            path = root / label / f"{i}.jpg"
            Image.fromarray(pixels).save(path, quality=90)
            paths[f"{label}/{i}.jpg"] = path
    for name, how in broken.items():
        data = paths[name].read_bytes()
        paths[name].write_bytes(data[:len(data) // 2] if how == "half" else b"junk" * 64)
    return paths


@pytest.fixture
def one_truncated(tmp_path):
    paths = make_folder(tmp_path / "photos", {"a/1.jpg": "half"})
    return tmp_path / "photos", paths["a/1.jpg"]


def torch_error(dataset, **kwargs):
    with pytest.raises(Exception) as raised:
        list(DataLoader(dataset, **kwargs))
    return raised.value


def transform_given(root, transform, where: str):
    """(dataset, the loader's transform= argument): the transform on the dataset or given
    to the loader."""
    if where == "dataset":
        return torchvision.datasets.ImageFolder(root, transform=transform), None
    return torchvision.datasets.ImageFolder(root), transform


# -- a bad sample is named, and an OSError ------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("where", ["loader", "dataset"])
def test_python_path_names_a_truncated_jpeg_and_its_cause(one_truncated, where, num_workers,
                                                          leak_check):
    root, victim = one_truncated
    dataset, transform = transform_given(root, PYTHON, where)
    loader = PIMDataLoader(dataset, batch_size=4, num_workers=num_workers, transform=transform)
    assert loader._pipeline is None or isinstance(loader._pipeline, PythonTransform)
    expected = torch_error(torchvision.datasets.ImageFolder(root, transform=PYTHON),
                           batch_size=4)
    assert type(expected) is OSError    # Pillow's, through torch's DataLoader
    with pytest.raises(OSError) as raised:
        list(loader)
    assert isinstance(raised.value, DecodeError)
    assert str(victim) in str(raised.value) and str(expected) in str(raised.value)
    del raised, loader
    gc.collect()
    leak_check.assert_clean(what="a bad sample raised on the Python path")


@pytest.mark.parametrize("path", ["native", "python"])
@pytest.mark.parametrize("how", ["half", "junk"])
def test_a_corrupt_image_is_an_oserror_on_every_path(tmp_path, path, how):
    """Code written for torchvision's datasets catches OSError (Pillow's
    UnidentifiedImageError is one): pimloader's DecodeError is one too (and a ValueError)."""
    paths = make_folder(tmp_path, {"b/2.jpg": how})
    expected = torch_error(torchvision.datasets.ImageFolder(tmp_path, transform=PYTHON),
                           batch_size=3)
    assert isinstance(expected, OSError)
    loader = PIMDataLoader(torchvision.datasets.ImageFolder(tmp_path), batch_size=3,
                           transform=NATIVE if path == "native" else PYTHON)
    assert isinstance(loader._pipeline, EncodedImages if path == "native" else PythonTransform)
    with pytest.raises(OSError) as raised:
        list(loader)
    assert isinstance(raised.value, (DecodeError, ValueError))
    assert str(paths["b/2.jpg"]) in str(raised.value)


# -- on_error="skip" ------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("where", ["loader", "dataset"])
def test_python_path_skips_and_counts_a_truncated_jpeg(one_truncated, where, num_workers):
    """The batches are torch's DataLoader's over the same batches of indices without the
    bad one, same seed: the bad sample fails before its transform draws anything."""
    root, victim = one_truncated
    dataset, transform = transform_given(root, PYTHON, where)
    bad = [path for path, _ in dataset.samples].index(str(victim))
    indices = list(range(len(dataset)))
    batch_indices = [indices[start:start + 3] for start in range(0, len(indices), 3)]
    torch.manual_seed(3)
    expected = list(DataLoader(torchvision.datasets.ImageFolder(root, transform=PYTHON),
                               batch_sampler=[[i for i in batch if i != bad]
                                              for batch in batch_indices],
                               num_workers=num_workers,
                               generator=torch.Generator().manual_seed(5)))
    torch.manual_seed(3)
    loader = PIMDataLoader(dataset, batch_size=3, num_workers=num_workers, on_error="skip",
                           transform=transform, generator=torch.Generator().manual_seed(5))
    got = list(loader)
    assert_same_batches(got, expected)
    assert loader.stats()[-1].skipped_samples == 1
    loader.close()


def test_in_memory_path_skips_and_counts_what_its_dataset_cannot_decode(tmp_path):
    """A dataset decoding its own files (torchvision.io, then Pillow for what it refuses)
    into uint8 tensors: the fused kernel's path drops and counts its bad sample too."""
    paths = make_folder(tmp_path, {"a/2.jpg": "junk"})

    class Decoded(torch.utils.data.Dataset):
        files = sorted(paths.values())

        def __len__(self):
            return len(self.files)

        def __getitem__(self, index):
            with Image.open(self.files[index]) as image:
                return v2.functional.pil_to_tensor(image.convert("RGB")), index

    loader = PIMDataLoader(Decoded(), batch_size=4, on_error="skip", transform=NATIVE)
    assert isinstance(loader._pipeline, InMemoryImages)
    indices = torch.cat([labels for _, labels in loader]).tolist()
    assert indices == [i for i in range(8) if Decoded.files[i] != paths["a/2.jpg"]]
    assert loader.stats()[-1].skipped_samples == 1
    with pytest.raises(OSError, match="sample 2"):   # no source to name it by: its index
        list(PIMDataLoader(Decoded(), batch_size=4, transform=NATIVE))


def test_detection_python_path_names_skips_and_counts(tmp_path):
    """A torchvision CocoDetection whose transforms keep PIL images (the loader runs them as
    Python on whole samples): named by its source's path, dropped and counted."""
    root, ann_file = make_coco(tmp_path / "coco", count=4, empty=0)
    bad = sorted((tmp_path / "coco" / "images").iterdir())[1]
    bad.write_bytes(b"junk" * 64)
    flip = v2.Compose([v2.RandomHorizontalFlip(), v2.PILToTensor()])
    expected = torch_error(torchvision_coco(root, ann_file, flip), batch_size=2,
                           collate_fn=lambda batch: batch)
    assert isinstance(expected, OSError)
    dataset = torchvision_coco(root, ann_file)
    loader = PIMDataLoader(dataset, batch_size=2, transform=flip,
                           collate_fn=lambda batch: batch)
    assert type(loader._pipeline).__name__ == "JointTransform"
    with pytest.raises(OSError, match=str(bad)) as raised:
        list(loader)
    assert isinstance(raised.value, DecodeError) and str(expected) in str(raised.value)
    skipping = PIMDataLoader(dataset, batch_size=2, transform=flip, on_error="skip",
                             collate_fn=lambda batch: batch)
    assert [len(batch) for batch in skipping] == [1, 2]
    assert skipping.stats()[-1].skipped_samples == 1


# -- a batch whose every sample is bad ------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("path", ["native", "native collate_fn", "python"])
def test_an_all_bad_batch_is_one_decode_error_on_every_path(tmp_path, path, num_workers,
                                                            leak_check):
    """Documented (README "Errors"): on_error="skip" drops bad samples, but a batch of bad
    samples only raises one DecodeError naming the batch and the last cause (before, the
    Python path and the native path with a collate_fn ended in default_collate's
    IndexError)."""
    paths = make_folder(tmp_path, {"a/0.jpg": "junk", "a/1.jpg": "half"})
    options = dict(collate_fn=lambda batch: default_collate(batch)) \
        if path == "native collate_fn" else {}
    loader = PIMDataLoader(torchvision.datasets.ImageFolder(tmp_path), batch_size=2,
                           on_error="skip", num_workers=num_workers,
                           transform=PYTHON if path == "python" else NATIVE, **options)
    with pytest.raises(DecodeError, match=r"every sample of the batch \[0, 1\]") as raised:
        list(loader)
    assert isinstance(raised.value, OSError) and str(paths["a/1.jpg"]) in str(raised.value)
    loader.close()
    kept = PIMDataLoader(torchvision.datasets.ImageFolder(tmp_path), batch_size=2,
                         sampler=[1, 2, 3, 4], on_error="skip",
                         transform=PYTHON if path == "python" else NATIVE, **options)
    assert [len(labels) for _, labels in kept] == [1, 2]
    assert kept.stats()[-1].skipped_samples == 1
    del raised, loader
    gc.collect()
    leak_check.assert_clean(what="an all-bad batch")


def test_an_all_bad_batch_is_one_decode_error_for_detection(tmp_path):
    root, ann_file = make_coco(tmp_path / "coco", count=4, empty=0)
    files = sorted((tmp_path / "coco" / "images").iterdir())
    for path in files[:2]:
        path.write_bytes(b"junk" * 64)
    for transforms in (None, v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])):
        dataset = CocoDetection(root, ann_file, transforms=transforms)
        loader = PIMDataLoader(dataset, batch_size=2, on_error="skip",
                               collate_fn=lambda batch: tuple(zip(*batch)))
        with pytest.raises(DecodeError, match=r"every sample of the batch \[0, 1\]"):
            list(loader)
        kept = PIMDataLoader(dataset, batch_size=2, sampler=[1, 2, 3], on_error="skip",
                             collate_fn=lambda batch: tuple(zip(*batch)))
        assert [len(images) for images, _ in kept] == [1, 1]
        assert kept.stats()[-1].skipped_samples == 1


@pytest.mark.parametrize("transform", ["native", "python"])
def test_an_all_bad_batch_is_one_decode_error_for_audio(tmp_path, transform):
    for label in ("no", "yes"):
        (tmp_path / label).mkdir()
        for i in range(2):
            clip = np.random.default_rng(i).uniform(-0.5, 0.5, 1600).astype(np.float32)
            soundfile.write(tmp_path / label / f"{i}.wav", clip, 16000)
    for i in range(2):
        (tmp_path / "no" / f"{i}.wav").write_bytes(b"RIFF" + b"junk" * 16)
    from pimloader import transforms as T
    steps = ([T.CropOrPad(1600), T.MelSpectrogram(16000, n_fft=400, n_mels=16)]
             if transform == "native" else [lambda clip: clip[..., :800]])
    loader = PIMDataLoader(AudioFolder(tmp_path, sample_rate=16000), batch_size=2,
                           on_error="skip", transform=T.Compose(steps))
    with pytest.raises(DecodeError, match=r"every sample of the batch \[0, 1\]") as raised:
        list(loader)
    assert "no/1.wav" in str(raised.value)


# -- wrong arguments, refused where they are given -----------------------------------------

def test_a_transform_that_is_not_callable_is_refused_by_the_constructor(one_truncated):
    """torch's DataLoader over a torchvision dataset with such a transform raises TypeError
    at the first sample; PIMDataLoader raises it as it is made, naming the step."""
    root, _ = one_truncated
    for bad, where in ((v2.Compose([v2.PILToTensor(), "flip"]), r"transform\.transforms\[1\]"),
                       ("flip", "transform"), (42, "transform")):
        expected = torch_error(torchvision.datasets.ImageFolder(root, transform=bad))
        assert isinstance(expected, TypeError)
        with pytest.raises(TypeError, match=f"{where} must be callable"):
            PIMDataLoader(torchvision.datasets.ImageFolder(root), transform=bad)


def test_a_coco_set_without_its_image_folder_is_refused_as_it_is_made(tmp_path):
    """torchvision's CocoDetection finds a missing image folder at its first sample; both
    pimloader's CocoDetection and the loader taking over torchvision's refuse it at once."""
    root, ann_file = make_coco(tmp_path / "coco", count=2, empty=0)
    missing = tmp_path / "nowhere"
    theirs = torchvision_coco(str(missing), ann_file, v2.Compose([v2.ToImage()]))
    with pytest.raises(FileNotFoundError):
        theirs[0]
    with pytest.raises(FileNotFoundError, match="nowhere"):
        CocoDetection(str(missing), ann_file)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        PIMDataLoader(theirs)
    with pytest.raises(NotADirectoryError, match="annotations|json"):
        CocoDetection(ann_file, ann_file)
    with pytest.raises(FileNotFoundError, match="nowhere.json"):   # as torchvision's
        torchvision_coco(root, str(tmp_path / "nowhere.json"))
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        CocoDetection(root, str(tmp_path / "nowhere.json"))
