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


def torchvision_batches(root, transform, num_workers, seed=0, batch_size=8,
                        loader=tensor_loader):
    dataset = torchvision.datasets.ImageFolder(root, transform=transform, loader=loader)
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
    from pimloader.backends.cpu import CpuImageKernel
    monkeypatch.setattr(CpuImageKernel, "RUN_ROWS", 3)
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


@pytest.fixture(scope="module")
def large_photos(tmp_path_factory):
    """Photos large enough that RandomResizedCrop boxes are mostly 2-8 times the output, so
    that reduced_dct="auto" decodes them at 1/2, 1/4 or 1/8 scale: mosaics of 2x2
    scikit-image photographs resized (Lanczos) to 1600x1200, 1200x1600 and 1536x1024, saved
    by Pillow as 4:2:0, 4:2:2, 4:4:4, progressive and greyscale JPEGs. Every side is a
    multiple of 8 (see pillow_draft_scale)."""
    import io

    import numpy as np
    import skimage.data
    from PIL import Image
    sources = [Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
               for name in ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry")]
    rng = np.random.default_rng(9)
    root = tmp_path_factory.mktemp("large_photos") / "set"
    kinds = [dict(subsampling=2), dict(subsampling=1), dict(subsampling=0),
             dict(subsampling=2, progressive=True), dict(subsampling=2, grey=True)]
    for index in range(24):
        width, height = [(1600, 1200), (1200, 1600), (1536, 1024)][index % 3]
        mosaic = Image.new("RGB", (width, height))
        for k, source in enumerate(rng.permutation(len(sources))[:4]):
            tile = sources[source].resize((width // 2, height // 2), Image.Resampling.LANCZOS)
            mosaic.paste(tile, ((k % 2) * (width // 2), (k // 2) * (height // 2)))
        kind = dict(kinds[index % len(kinds)])
        if kind.pop("grey", False):
            mosaic = mosaic.convert("L")
        buffer = io.BytesIO()
        mosaic.save(buffer, "JPEG", quality=int(rng.integers(80, 96)), **kind)
        path = root / f"class{index % 2}" / f"{index:02d}.JPEG"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buffer.getvalue())
    return root


class _DrawRecorder:
    """Drop-in geometric transforms for the oracle run under torch's DataLoader: the same
    classes' own draws (make_params, torch.rand(1) < p) from the same random state, with the
    parameters recorded per sample instead of applied."""

    def __init__(self, transform):
        recorder = self
        self.samples = []

        class Crop(type(transform.transforms[0])):
            def transform(self, inpt, params):
                recorder.samples.append(dict(path=inpt.filename, box=(
                    params["top"], params["left"], params["height"], params["width"]),
                    flips=[]))
                inpt.close()  # never decoded: the oracle decodes it at Pillow's scale
                return inpt

        def flip(kind):
            class Flip(kind):
                def transform(self, inpt, params):
                    recorder.samples[-1]["flips"].append(kind)
                    return inpt
            return Flip

        rrc = transform.transforms[0]
        steps = [Crop(rrc.size, rrc.scale, rrc.ratio, rrc.interpolation, rrc.antialias)]
        for step in transform.transforms[1:]:
            if isinstance(step, (v2.RandomHorizontalFlip, v2.RandomVerticalFlip)):
                steps.append(flip(type(step))(step.p))
        self.transform = v2.Compose(steps + [lambda image: 0])


def lazy_pil(path):
    """The file opened, not decoded: RandomResizedCrop draws from its size alone, and the
    oracle asks Pillow for a DCT-scaled decode later."""
    from PIL import Image
    return Image.open(path)


def pillow_draft_scale(path, box, size):
    """Pillow's own choice of DCT scaling for a crop `box` (top, left, height, width) that
    is resampled to `size`, and its decode at that scale (uint8 CHW).

    Image.draft("RGB", request) picks the largest reduction 1/s (s in 8, 4, 2, 1) with
    s <= min(W // request_w, H // request_h). Requesting the whole image at the size that
    makes the box `size`, rounded up, gives s <= min(box_w / out_w, box_h / out_h), which
    is pimloader's documented rule (the largest reduction that keeps the scaled box at
    least the output size, none under 2x) exactly when W and H are multiples of 8."""
    import math

    import numpy as np
    from PIL import Image
    _, _, height, width = box
    with Image.open(path) as image:
        full_w, full_h = image.size
        assert full_w % 8 == 0 and full_h % 8 == 0
        image.draft("RGB", (math.ceil(full_w * size[1] / width),
                            math.ceil(full_h * size[0] / height)))
        s = full_w // image.size[0]
        assert image.size == (full_w // s, full_h // s)
        pixels = np.asarray(image.convert("RGB"))
    return s, torch.from_numpy(pixels.copy()).permute(2, 0, 1)


@pytest.mark.parametrize("name, reductions", [("train_f32", {2, 4}),
                                              ("uint8_bicubic_vflip", {2, 4, 8})])
def test_reduced_dct_path_is_pillows_scaled_decode_resized_by_torchvision(
        large_photos, name, reductions, monkeypatch):
    """reduced_dct="auto" (the default for RandomResizedCrop) against an independent oracle:
    torchvision's draws (torch's DataLoader, same seeds), Pillow's DCT-scaled decode of the
    file at the scale Pillow's draft() picks for that crop (the same libjpeg-turbo scaled
    IDCT: bit-identical to pimloader's scaled region, test_bit_identical_to_pillow_here),
    then torchvision's resized_crop of the box in that scaled image. The only approximation
    of the path is the scaled box rounded to whole pixels: checked within half a pixel of
    the exact box, and the oracle resamples the box pimloader rounded to. Samples whose
    crop is under twice the output are decoded exactly: checked too."""
    from pimloader import decode
    from PIL import features
    if not features.check_feature("libjpeg_turbo"):
        pytest.skip("Pillow is built without libjpeg-turbo: its IDCT and upsampling differ")
    calls = []
    real_decode_jpeg_scaled = decode.decode_jpeg_scaled

    def recording_decode_jpeg_scaled(data, box=None, **options):
        scaled = real_decode_jpeg_scaled(data, box, **options)
        calls.append(dict(path=options["name"], box=tuple(box), scale=scaled.scale,
                          int_box=scaled.int_box()))
        return scaled

    monkeypatch.setattr(decode, "decode_jpeg_scaled", recording_decode_jpeg_scaled)
    transform = PIPELINES[name]
    actual, _ = pimloader_batches(large_photos, transform, 0)  # reduced_dct="auto"
    recorder = _DrawRecorder(transform)
    torchvision_batches(large_photos, recorder.transform, 0, loader=lazy_pil)
    draws = recorder.samples
    images = [image for images, _ in actual for image in images]
    assert len(draws) == len(images) == 24

    rrc = transform.transforms[0]
    size = list(rrc.size)
    elementwise = [step for step in transform.transforms
                   if isinstance(step, (v2.ToDtype, v2.Normalize))]
    scales = []
    for draw, image in zip(draws, images, strict=True):
        top, left, height, width = draw["box"]
        s, pixels = pillow_draft_scale(draw["path"], draw["box"], size)
        scales.append(s)
        if s == 1:
            box = draw["box"]
        else:
            call = calls.pop(0)
            assert (call["path"], call["box"]) == (draw["path"], draw["box"])
            assert call["scale"] == 8 // s, (call, s)  # pimloader's pick is Pillow's
            # the box in the scaled image, from the region's whole-pixel origin
            y0, x0 = top // s, left // s
            box_top, box_left, box_height, box_width = call["int_box"]
            box = (y0 + box_top, x0 + box_left, box_height, box_width)
            exact = (top / s, left / s, (top + height) / s, (left + width) / s)
            rounded = (box[0], box[1], box[0] + box[2], box[1] + box[3])
            assert box_height >= 1 and box_width >= 1
            assert all(abs(r - e) <= 0.5 for r, e in zip(rounded, exact)), (rounded, exact)
        expected = v2.functional.resized_crop(pixels, *box, size,
                                              interpolation=rrc.interpolation,
                                              antialias=rrc.antialias)
        for kind in draw["flips"]:
            expected = (v2.functional.horizontal_flip if kind is v2.RandomHorizontalFlip
                        else v2.functional.vertical_flip)(expected)
        for step in elementwise:
            expected = step(expected)
        assert image.dtype == expected.dtype
        assert torch.equal(image, expected), (draw, s, (image.double() - expected.double())
                                              .abs().max())
    assert calls == []  # every scaled decode was one of the oracle's reduced samples
    reduced = sum(s > 1 for s in scales)
    assert reduced >= 0.75 * len(scales), scales  # the path is what most samples take
    assert reductions <= set(scales), scales  # 1/2 and 1/4 (and 1/8 for 96-pixel outputs)


def test_reduced_dct_stays_close_to_the_exact_path(large_photos):
    """What reduced_dct costs in accuracy on photos where it applies: against the exact
    path (equal to torchvision, test_exact_decoding_path_matches_torchvision), the mean
    error stays within a few uint8 levels (docs/transforms.md). The fixture photos of the
    other tests are too small for any crop to take the path."""
    transform = PIPELINES["train_f32"]
    exact, _ = pimloader_batches(large_photos, transform, 0, reduced_dct=False)
    reduced, _ = pimloader_batches(large_photos, transform, 0)  # "auto"
    differences = torch.cat([level_differences(a, b, normalized=True)
                             for (a, _), (b, _) in paired(exact, reduced)])
    assert 0 < differences.mean() < 3, differences.mean()  # 1.8 levels here (21 of 24 reduced)


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


@pytest.fixture(params=["half", "headless"])
def photos_with_a_half_file(photos, tmp_path, request):
    """A JPEG cut in half: its header reads (its crop is drawn), its pixels do not decode;
    or ("headless") one whose header does not read: nothing is drawn for it."""
    root = tmp_path / "half"
    shutil.copytree(photos, root)
    victim = sorted(root.glob("class001/*.JPEG"))[1]
    data = victim.read_bytes()
    victim.write_bytes(data[:len(data) // 2] if request.param == "half"
                       else b"\xff\xd8\xff\xe0" + bytes(200))
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


def test_make_seekable_reports_its_progress_file_by_file(photos, tmp_path):
    from pimloader.decode import make_seekable
    calls = []
    make_seekable(photos, tmp_path / "copy", progress=lambda done, total: calls.append(
        (done, total)))
    files = [path for path in photos.rglob("*") if path.is_file()]
    assert calls == [(done, len(files)) for done in range(1, len(files) + 1)]
    with pytest.raises(TypeError, match="progress must be callable"):
        make_seekable(photos, tmp_path / "other", progress=True)
