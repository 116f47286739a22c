"""The native image path against torchvision, on real photographs.

Oracle: torch's DataLoader over torchvision's ImageFolder whose loader decodes with
`torchvision.io.decode_image` (RGB) and whose transform is the same v2 pipeline: the tensor
path torchvision takes. Same sampler seed and same global seed, so the same crops and flips.
"""
import os
import shutil

import pytest
import torch
import torchvision
import torchvision.transforms.v2 as v2
from torchvision.io import ImageReadMode, decode_image

from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader
from pimloader.datasets import ImageFolder
from pimloader.decode import DecodeError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def train_pipeline(dtype=torch.float32):
    return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                       v2.ToDtype(dtype, scale=True), v2.Normalize(MEAN, STD)])


def val_pipeline(dtype=torch.float32):
    return v2.Compose([v2.Resize(256), v2.CenterCrop(224),
                       v2.ToDtype(dtype, scale=True), v2.Normalize(MEAN, STD)])


PIPELINES = {
    "train_f32": train_pipeline(),
    "train_f16": train_pipeline(torch.float16),
    "val_f32": val_pipeline(),
    "uint8_bicubic_vflip": v2.Compose([
        v2.RandomResizedCrop(96, interpolation=v2.InterpolationMode.BICUBIC),
        v2.RandomVerticalFlip()]),
}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """A small ImageNet-like folder: JPEGs of real photographs, greyscale ones, a
    progressive JPEG and a PNG."""
    return make_imagenet_like(tmp_path_factory.mktemp("photos") / "set", count=24, classes=3)


def tensor_loader(path):
    with open(path, "rb") as file:
        data = torch.frombuffer(bytearray(file.read()), dtype=torch.uint8)
    return decode_image(data, mode=ImageReadMode.RGB)


def torchvision_batches(root, transform, num_workers, seed=0, batch_size=8):
    dataset = torchvision.datasets.ImageFolder(root, transform=transform, loader=tensor_loader)
    torch.manual_seed(seed + 100)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers,
        generator=torch.Generator().manual_seed(seed))
    return list(loader)


def pimloader_batches(root, transform, num_workers, seed=0, batch_size=8, **options):
    torch.manual_seed(seed + 100)
    loader = PIMDataLoader(ImageFolder(root), batch_size=batch_size, shuffle=True,
                           num_workers=num_workers, transform=transform,
                           generator=torch.Generator().manual_seed(seed), **options)
    return list(loader), loader


def paired(expected, actual):
    """zip() of two lists of batches that must be equally long and not empty: a loader that
    yields nothing (or too little) fails instead of passing every comparison vacuously."""
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    return zip(expected, actual, strict=True)


def level_differences(expected, actual, normalized: bool):
    """|expected - actual| in uint8 levels (undoing the normalisation of float outputs)."""
    difference = (expected.double() - actual.double()).abs()
    if normalized:
        difference = difference * torch.tensor(STD, dtype=torch.float64).view(1, 3, 1, 1) * 255
    return difference.flatten()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_exact_decoding_path_matches_torchvision(photos, name, num_workers):
    transform = PIPELINES[name]
    expected = torchvision_batches(photos, transform, num_workers)
    actual, loader = pimloader_batches(photos, transform, num_workers, reduced_dct=False)
    for (expected_images, expected_labels), (images, labels) in paired(expected, actual):
        assert torch.equal(labels, expected_labels)
        assert images.dtype == expected_images.dtype and images.shape == expected_images.shape
        # the same libjpeg-turbo decode and torchvision's arithmetic: equal to the bit
        differences = level_differences(expected_images, images,
                                        normalized=images.is_floating_point())
        assert torch.equal(images, expected_images), (
            f"{int((differences > 0).sum())} values differ, by up to {differences.max()}")
    assert loader.stats()[-1].shared_batches == len(actual)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_reused_decode_buffers_never_mix_samples(photos, monkeypatch, num_workers):
    """Runs of 3 rows in batches of 10, two epochs: every run after the first decodes into
    buffers that earlier runs (of this batch and of earlier ones) gave back."""
    from pimloader.backends.cpu import CpuBackend
    monkeypatch.setattr(CpuBackend, "RUN_ROWS", 3)
    transform = PIPELINES["train_f32"]
    torch.manual_seed(7)
    expected = [torchvision_batches(photos, transform, num_workers, seed, batch_size=10)
                for seed in (1, 2)]
    actual = [pimloader_batches(photos, transform, num_workers, seed, batch_size=10,
                                reduced_dct=False)[0] for seed in (1, 2)]
    for expected_epoch, actual_epoch in paired(expected, actual):
        for (expected_images, expected_labels), (images, labels) in paired(expected_epoch,
                                                                           actual_epoch):
            assert torch.equal(labels, expected_labels)
            assert torch.equal(images, expected_images)


def test_a_seekable_copy_gives_torchvision_batches_of_the_original(photos, tmp_path):
    from pimloader import decode
    from pimloader.decode import make_seekable
    copy = tmp_path / "seekable"
    report = make_seekable(photos, copy)
    jpegs = [path for path, _ in ImageFolder(photos).samples
             if decode.is_jpeg(open(path, "rb").read())]
    assert report.transcoded == len(jpegs) < len(ImageFolder(photos))
    assert report.copied >= 1 and not report.unreadable  # the PNG is copied as it is
    assert ImageFolder(copy).samples == [(str(copy / os.path.relpath(path, photos)), target)
                                         for path, target in ImageFolder(photos).samples]
    for path, _ in ImageFolder(copy).samples:
        data = open(path, "rb").read()
        assert decode.seek_info(data) is not None or not decode.is_jpeg(data)
    transform = PIPELINES["train_f32"]
    expected = torchvision_batches(photos, transform, 0)
    actual, loader = pimloader_batches(copy, transform, 0, reduced_dct=False)
    for (expected_images, expected_labels), (images, labels) in paired(expected, actual):
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected_images)
    plain, _ = pimloader_batches(photos, transform, 0, reduced_dct=False)
    for (seeking, _), (reading_all, _) in paired(actual, plain):
        assert torch.equal(seeking, reading_all)  # seeking changes no pixel
    with pytest.raises(FileExistsError, match="overwrite=True"):
        make_seekable(photos, copy)
    one_thread = make_seekable(photos, tmp_path / "one", threads=1)
    assert one_thread == report  # the same files, whatever the threads
    for path, _ in ImageFolder(copy).samples:
        twin = tmp_path / "one" / os.path.relpath(path, copy)
        assert twin.read_bytes() == open(path, "rb").read()


def test_make_seekable_copies_a_corrupt_jpeg_as_it_is(photos_with_a_half_file, tmp_path):
    from pimloader.decode import make_seekable
    report = make_seekable(photos_with_a_half_file, tmp_path / "copy")
    assert len(report.unreadable) == 1
    victim = report.unreadable[0]
    copied = tmp_path / "copy" / os.path.relpath(victim, photos_with_a_half_file)
    assert copied.read_bytes() == open(victim, "rb").read()
    with pytest.raises(NotADirectoryError):
        make_seekable(tmp_path / "missing", tmp_path / "other")


def test_reduced_dct_decoding_stays_close(photos):
    transform = PIPELINES["train_f32"]
    exact, _ = pimloader_batches(photos, transform, 0, reduced_dct=False)
    reduced, _ = pimloader_batches(photos, transform, 0, reduced_dct=True)
    differences = torch.cat([level_differences(a, b, normalized=True)
                             for (a, _), (b, _) in paired(exact, reduced)])
    assert differences.mean() < 6, differences.mean()  # a few levels on average


def test_dataset_transform_is_taken_over(photos):
    """A torchvision ImageFolder's own transform runs natively, with the same draws."""
    transform = PIPELINES["val_f32"]
    expected = torchvision_batches(photos, transform, 0)
    dataset = torchvision.datasets.ImageFolder(photos, transform=transform)
    loader = PIMDataLoader(dataset, batch_size=8, shuffle=True,
                           generator=torch.Generator().manual_seed(0))
    actual = list(loader)
    assert loader.stats()[-1].shared_batches == len(actual)
    for (expected_images, _), (images, _) in paired(expected, actual):
        assert torch.equal(images, expected_images)


def test_transform_given_twice_is_refused(photos):
    dataset = torchvision.datasets.ImageFolder(photos, transform=PIPELINES["val_f32"])
    with pytest.raises(ValueError, match="transform is given twice"):
        PIMDataLoader(dataset, transform=PIPELINES["val_f32"])


def test_unknown_backend_and_options_are_refused(photos):
    with pytest.raises(ValueError, match="backend must be one of"):
        PIMDataLoader(ImageFolder(photos), transform=PIPELINES["val_f32"], backend="gpu")
    with pytest.raises(ValueError, match="on_error"):
        PIMDataLoader(ImageFolder(photos), transform=PIPELINES["val_f32"], on_error="ignore")


@pytest.fixture
def photos_with_a_truncated_file(photos, tmp_path):
    root = tmp_path / "broken"
    shutil.copytree(photos, root)
    victim = sorted(root.glob("class000/*.JPEG"))[0]
    victim.write_bytes(victim.read_bytes()[:600])
    return root, victim


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_truncated_file_raises_naming_it(photos_with_a_truncated_file, num_workers):
    root, victim = photos_with_a_truncated_file
    loader = PIMDataLoader(ImageFolder(root), batch_size=8, num_workers=num_workers,
                           transform=PIPELINES["train_f32"])
    with pytest.raises(DecodeError, match=victim.name):
        list(loader)


@pytest.fixture
def photos_with_a_half_file(photos, tmp_path):
    """A JPEG cut in half: its header reads (its crop is drawn), its pixels do not decode."""
    root = tmp_path / "half"
    shutil.copytree(photos, root)
    victim = sorted(root.glob("class001/*.JPEG"))[1]
    data = victim.read_bytes()
    victim.write_bytes(data[:len(data) // 2])
    return root


def steps_until_exhausted(loader, errors):
    """What each next() gives: ("batch", images, labels) or ("error", global RNG state)."""
    steps, iterator = [], iter(loader)
    while True:
        try:
            images, labels = next(iterator)
        except StopIteration:
            return steps
        except errors:
            steps.append(("error", torch.get_rng_state()))
            continue
        steps.append(("batch", images, labels))


@pytest.mark.parametrize("load_ahead", [32, 3])
def test_a_failed_decode_leaves_the_random_state_where_torch_does(photos_with_a_half_file,
                                                                  monkeypatch, load_ahead):
    """torch's DataLoader decodes then transforms: a sample that fails draws nothing, and
    iterating on after the error gives the same crops (whole batches drawn ahead, or 3
    samples at a time)."""
    from pimloader.pipelines import classification as _images
    monkeypatch.setattr(_images.DirectImageProducer, "LOAD_AHEAD", load_ahead)
    root = photos_with_a_half_file
    transform = PIPELINES["train_f32"]
    dataset = torchvision.datasets.ImageFolder(root, transform=transform, loader=tensor_loader)
    torch.manual_seed(5)
    expected = steps_until_exhausted(torch.utils.data.DataLoader(
        dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3)),
        RuntimeError)
    torch.manual_seed(5)
    actual = steps_until_exhausted(PIMDataLoader(
        ImageFolder(root), batch_size=8, shuffle=True, transform=transform,
        reduced_dct=False, generator=torch.Generator().manual_seed(3)), DecodeError)
    assert [step[0] for step in actual] == [step[0] for step in expected]
    assert "error" in [step[0] for step in expected]
    for expected_step, actual_step in zip(expected, actual, strict=True):
        if expected_step[0] == "error":
            assert torch.equal(actual_step[1], expected_step[1])
        else:
            assert torch.equal(actual_step[2], expected_step[2])
            assert torch.equal(actual_step[1], expected_step[1])


def test_on_error_skip_drops_and_counts_the_file(photos_with_a_truncated_file):
    root, _ = photos_with_a_truncated_file
    loader = PIMDataLoader(ImageFolder(root), batch_size=8, num_workers=2,
                           transform=PIPELINES["train_f32"], on_error="skip")
    batches = list(loader)
    assert sum(len(labels) for _, labels in batches) == len(loader.dataset) - 1
    assert loader.stats()[-1].skipped_samples == 1


@pytest.mark.parametrize("name", ["train_f32", "val_f32", "uint8_bicubic_vflip"])
def test_channels_last_batches_hold_the_same_values(photos, name):
    transform = PIPELINES[name]
    expected, _ = pimloader_batches(photos, transform, 0, reduced_dct=False)
    actual, loader = pimloader_batches(photos, transform, 0, reduced_dct=False,
                                       memory_format=torch.channels_last)
    for (expected_images, _), (images, _) in paired(expected, actual):
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert not images.is_contiguous()
        assert torch.equal(images, expected_images)
    assert loader.stats()[-1].shared_batches == len(actual)


def test_memory_format_is_checked(photos):
    with pytest.raises(ValueError, match="memory_format"):
        PIMDataLoader(ImageFolder(photos), transform=PIPELINES["val_f32"],
                      memory_format=torch.preserve_format)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_transform_on_a_dataset_of_tensors_runs_as_python(num_workers):
    """Not an image folder: the loader's transform acts on each sample's image, as the
    same transform given to the dataset would (same seeds, same draws)."""
    images = torch.randint(0, 256, (12, 3, 40, 50), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()])

    class Pairs(torch.utils.data.Dataset):
        def __init__(self, transform=None):
            self.transform = transform

        def __len__(self):
            return len(images)

        def __getitem__(self, index):
            image = images[index]
            return (self.transform(image) if self.transform else image), index

    torch.manual_seed(3)
    expected = list(torch.utils.data.DataLoader(Pairs(transform), batch_size=4,
                                                num_workers=num_workers))
    torch.manual_seed(3)
    actual = list(PIMDataLoader(Pairs(), batch_size=4, num_workers=num_workers,
                                transform=transform))
    for (expected_images, expected_labels), (got_images, got_labels) in paired(expected,
                                                                                  actual):
        assert torch.equal(got_images, expected_images)
        assert torch.equal(got_labels, expected_labels)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", ["train_f32", "val_f32", "uint8_bicubic_vflip"])
def test_emulated_dpus_give_the_cpu_backends_batches(photos, name, num_workers):
    transform = PIPELINES[name]
    expected, _ = pimloader_batches(photos, transform, num_workers, backend="cpu")
    actual, loader = pimloader_batches(photos, transform, num_workers, backend="emulator",
                                       nr_dpus=7, nr_tasklets=11)
    for (expected_images, expected_labels), (images, labels) in paired(expected, actual):
        assert torch.equal(images, expected_images)
        assert torch.equal(labels, expected_labels)
    assert loader.stats()[-1].shared_batches == len(actual)


def test_upmem_backend_without_the_sdk_is_a_clear_error(photos):
    from pimloader import DpuBackendError
    with pytest.raises(DpuBackendError, match="UPMEM SDK"):
        PIMDataLoader(ImageFolder(photos), transform=PIPELINES["val_f32"], backend="upmem")


def test_make_seekable_command_line(photos, tmp_path, capsys):
    from pimloader.make_seekable import main
    assert main([str(photos), str(tmp_path / "copy"), "--threads", "2"]) == 0
    assert "JPEGs rewritten" in capsys.readouterr().out
    assert ImageFolder(tmp_path / "copy").classes == ImageFolder(photos).classes
    assert main([str(photos), str(tmp_path / "copy")]) == 1
    assert "exists (pass --overwrite)" in capsys.readouterr().err
    assert main([str(tmp_path / "missing"), str(tmp_path / "other")]) == 1
    assert "is not a directory" in capsys.readouterr().err
