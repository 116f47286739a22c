"""Hue, channel permutation, RandomPhotometricDistort, and colour transforms before the
geometric ones, in the fused kernel, against torchvision as the oracle.

References: torchvision v2's functional ops on uint8 CHW tensors (`adjust_hue`,
`permute_channels`, and the ops of test_colour_pad.py), v1's tensor `adjust_hue` for v1
ColorJitter, the transforms themselves under the same seed for the plan's draws, and
torch's DataLoader over a torchvision ImageFolder (encoded photographs) or over a dataset of
uint8 tensors (in-memory images) for the loader end to end. The hue arithmetic is torch's
float32 sequence, so the outputs must be identical: `scripts/measure_hue.py` measures all
2^24 colours (0 values differ); here a sample of them and the photographs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from hypothesis import given
from hypothesis import strategies as st
from torchvision.transforms import functional as F1
from torchvision.transforms.v2 import functional as F

from pimloader.backends import kernels as K
from pimloader.transforms import lower
from pimloader.transforms.params import apply_colour, apply_geometry
from test_colour_pad import (FAST, FLAT, MODES, NEAR_MEAN, PHOTO, RGB_PHOTOS, chw, kernel,
                             memory_order, plan_kernel)
from test_image_pipeline import (MEAN, STD, photos,  # noqa: F401 (fixture)
                                 pimloader_batches, torchvision_batches)
from test_tensor_images import GREY, PHOTOS as TENSOR_PHOTOS, Images, both_loaders
from _helpers import assert_same_batches

HUES = [-0.5, -0.2371, 0.0, 0.013, 0.5]


def sampled_colours(count: int = 1 << 14) -> np.ndarray:
    """`count` random 24-bit colours plus the greys and the pure and mixed primaries (where
    HSV's max/min ties are), as an HWC image 256 pixels wide."""
    rng = np.random.default_rng(0)
    random = rng.integers(0, 256, (count, 3))
    levels = np.arange(256)
    zero = np.zeros(256, int)
    ties = [np.stack(channels, 1) for channels in (
        (levels, levels, levels), (levels, zero, zero), (zero, levels, zero),
        (zero, zero, levels), (levels, levels, zero), (levels, zero, levels),
        (zero, levels, levels), (levels, 255 - levels, levels))]
    return np.concatenate([random, *ties]).astype(np.uint8).reshape(-1, 256, 3)


COLOURS = sampled_colours()


# ---- hue and permutation: the kernel against torchvision's functional ops ------------------

@pytest.mark.parametrize("v1_arithmetic", [False, True])
def test_hue_is_torchvisions_on_sampled_colours(v1_arithmetic):
    """Measured bound: 0 levels (scripts/measure_hue.py, every 24-bit colour)."""
    adjust_hue = F1.adjust_hue if v1_arithmetic else F.adjust_hue
    size = COLOURS.shape[:2]
    for factor in HUES:
        expected = adjust_hue(chw(COLOURS), factor)
        actual = kernel([COLOURS], [(0, 0, *size)], size, colours=[[("hue", factor)]],
                        colour_v1=v1_arithmetic)[0]
        assert torch.equal(actual, expected), (factor, int((actual != expected).sum()))


@pytest.mark.parametrize("level", [0, 2])
def test_hue_on_photographs_after_resampling(level):
    try:
        K.lib.pim_cpu_simd(level)
        for name, photo in RGB_PHOTOS.items():
            box, size = (7, 11, photo.shape[0] - 30, photo.shape[1] - 20), (97, 131)
            resized = F.resized_crop(chw(photo), *box, list(size), antialias=True)
            for ops in ([("hue", 0.21)], [("saturation", 1.6), ("hue", -0.45)],
                        [("hue", 0.05), ("contrast", 0.7), ("permute", (2, 0, 1))]):
                actual = kernel([photo], [box], size, colours=[ops], hflip=[True])[0]
                expected = F.horizontal_flip(apply_colour(resized, ops))
                assert torch.equal(actual, expected), (name, ops)
    finally:
        K.lib.pim_cpu_simd(-1)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (2, 1, 0)])
def test_permute_is_torchvisions(order):
    expected = F.permute_channels(F.resized_crop(chw(PHOTO), 0, 0, 200, 200, [50, 40]),
                                  list(order))
    actual = kernel([PHOTO], [(0, 0, 200, 200)], (50, 40), colours=[[("permute", order)]])
    assert torch.equal(actual[0], expected)


def test_one_channel_images_keep_hue_and_permutation_as_torchvision_does():
    """torchvision leaves a one-channel image's hue alone (as PIL does); Grayscale(3)
    repeats the channel; contrast takes the channel's own mean."""
    grey = np.ascontiguousarray(PHOTO[:120, :150, :1])
    ops = [("hue", 0.3), ("contrast", 1.4), ("grayscale", 3), ("hue", -0.2),
           ("permute", (1, 2, 0))]
    for where in ("colours", "source_colours"):
        actual = kernel([grey], [(5, 6, 100, 120)], (40, 50), **{where: [ops]})[0]
        image = chw(grey)
        if where == "source_colours":
            expected = F.resized_crop(apply_colour(image, ops), 5, 6, 100, 120, [40, 50])
        else:
            expected = apply_colour(F.resized_crop(image, 5, 6, 100, 120, [40, 50]), ops)
        assert torch.equal(actual, expected), where


# ---- colour on the source: the kernel against torchvision in pipeline order ----------------

source_ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(["brightness", "contrast", "saturation"]),
              st.floats(0.0, 2.0, allow_nan=False)),
    st.tuples(st.just("hue"), st.floats(-0.5, 0.5, allow_nan=False)),
    st.tuples(st.just("permute"), st.permutations([0, 1, 2]).map(tuple))),
    min_size=1, max_size=4)


@st.composite
def source_cases(draw):
    mode = draw(st.sampled_from([None, *MODES]))
    h, w = draw(st.integers(2, 60)), draw(st.integers(2, 60))
    padding = None
    pad = (0, 0, 0, 0)
    if mode is not None:
        limit = {"reflect": (h - 1, w - 1), "symmetric": (h, w)}.get(mode, (20, 20))
        pad = (draw(st.integers(0, limit[0])), draw(st.integers(0, limit[1])),
               draw(st.integers(0, limit[0])), draw(st.integers(0, limit[1])))
        padding = (*pad, mode, tuple(draw(st.integers(0, 255)) for _ in range(3)))
    H, W = h + pad[0] + pad[2], w + pad[1] + pad[3]
    top, left = draw(st.integers(0, H - 1)), draw(st.integers(0, W - 1))
    box = (top, left, draw(st.integers(1, H - top)), draw(st.integers(1, W - left)))
    at = (draw(st.integers(0, PHOTO.shape[0] - h)), draw(st.integers(0, PHOTO.shape[1] - w)))
    size = (draw(st.integers(1, 20)), draw(st.integers(1, 20)))
    return (at, h, w), padding, box, size, draw(source_ops), draw(st.lists(
        st.tuples(st.just("hue"), st.floats(-0.5, 0.5, allow_nan=False)), max_size=1))


@FAST
@given(source_cases(), st.booleans())
def test_source_colour_then_pad_crop_resize_is_torchvisions(case, hflip):
    """Colour first (contrast over the whole image), then padding that stays uncoloured,
    then the crop, the resampling, the flip and the colour ops after them."""
    (at, h, w), padding, box, size, ops, after = case
    image = PHOTO[at[0]:at[0] + h, at[1]:at[1] + w]
    coloured = apply_colour(chw(image), ops)
    if padding is not None:
        top, left, bottom, right, mode, fill = padding
        coloured = F.pad(coloured, [left, top, right, bottom], padding_mode=mode,
                         fill=list(fill) if mode == "constant" else None)
    resized = F.resized_crop(coloured, *box, list(size), antialias=True)
    resized = F.horizontal_flip(resized) if hflip else resized
    expected = apply_colour(resized, after)
    actual = kernel([image], [box], size, hflip=[hflip], paddings=[padding],
                    source_colours=[ops], colours=[after],
                    torch_layouts=[(memory_order(chw(image)), memory_order(resized))])[0]
    assert torch.equal(actual, expected), (ops, padding)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("order", ["HWC", "CHW"])
def test_source_values_round_by_their_place_in_the_decoded_image(order, threads):
    """The source ops round each value as torch's loops over the decoded image do (its
    place there, not in the box: test_colour_pad's vector steps and tails), through padding
    that repeats or mirrors it; 150 x 151 x 3 values make 3 chunks on 3 threads."""
    image = FLAT[:150, :151]
    tensor = chw(image) if order == "HWC" else chw(image).contiguous()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for padding in [None, (1, 2, 6, 5, "reflect", (0, 0, 0)), (3, 0, 2, 7, "edge", (0, 0, 0)),
                        (2, 4, 4, 1, "constant", (9, 8, 7))]:
            top, left, bottom, right, mode, fill = padding or (0, 0, 0, 0, None, None)
            box = (0, 0, 150 + top + bottom, 151 + left + right)
            for ops in ([("contrast", NEAR_MEAN)], [("brightness", 1.0), ("contrast", NEAR_MEAN)],
                        [("saturation", NEAR_MEAN), ("contrast", NEAR_MEAN)]):
                expected = apply_colour(tensor, ops)
                if padding is not None:
                    expected = F.pad(expected, [left, top, right, bottom], padding_mode=mode,
                                     fill=list(fill) if mode == "constant" else None)
                actual = kernel([image], [box], box[2:], paddings=[padding], source_colours=[ops],
                                torch_layouts=[(order, memory_order(expected))])[0]
                assert torch.equal(actual, expected), (padding, ops)
    finally:
        torch.set_num_threads(previous)


def test_source_contrast_takes_the_whole_photographs_mean():
    """Full-sized photographs: a contrast before the crop blends with the mean of the whole
    image, not of the box (test_colour_pad's limit on the float32 sum applies)."""
    for name, photo in RGB_PHOTOS.items():
        ops = [("brightness", 1.13), ("contrast", 0.57), ("permute", (1, 2, 0))]
        box = (photo.shape[0] // 3, 0, photo.shape[0] // 2, photo.shape[1] // 4)
        expected = F.resized_crop(apply_colour(chw(photo), ops), *box, [64, 48])
        actual = kernel([photo], [box], (64, 48), source_colours=[ops])[0]
        assert torch.equal(actual, expected), name
        box_only = F.resized_crop(apply_colour(F.crop(chw(photo), *box), ops), 0, 0,
                                  *box[2:], [64, 48])
        assert not torch.equal(actual, box_only), name  # the mean is the whole image's


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_kernels_float32_sum_is_torchs(threads):
    """Contrast's mean: the kernel sums as torch's cascade does (exact sums would differ
    from torch's in the last place for about one image in six past 2^24)."""
    rng = np.random.default_rng(threads)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lanes = K.torch_sum_lanes()
        assert lanes in (4, 8, 16)
        for n in (1, 15, 16, 100, 32768, 40001, 187_500, 524_288, 1_000_003):
            values = rng.integers(0, int(rng.integers(1, 256)) + 1, n, dtype=np.uint8)
            expected = torch.from_numpy(values).to(torch.float32).sum().item()
            actual = K.lib.pim_torch_sum_u8(K.ffi.from_buffer(values), n, threads, lanes)
            assert actual == expected, (n, threads)
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("threads", [1, 2])
def test_contrast_on_whole_photographs_where_torchs_mean_is_not_the_exact_one(threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    rng = np.random.default_rng(7)
    inexact = 0
    photos = list(RGB_PHOTOS.items())
    try:
        for draw in range(150):
            if inexact == 3:
                break
            name, photo = photos[draw % len(photos)]
            brightness = float(rng.uniform(0.5, 1.5))
            image = F.adjust_brightness(chw(photo), brightness)
            gray = F.rgb_to_grayscale(image).to(torch.float32)
            inexact += gray.mean().item() != np.float32(
                np.float32(gray.double().sum().item()) / np.float32(gray.numel()))
            ops = [("brightness", brightness), ("contrast", float(rng.uniform(0.3, 1.7)))]
            size = photo.shape[:2]
            actual = kernel([photo], [(0, 0, *size)], size, source_colours=[ops])[0]
            assert torch.equal(actual, apply_colour(chw(photo), ops)), (name, ops)
    finally:
        torch.set_num_threads(previous)
    assert inexact == 3  # the case this test is for occurred


def test_a_source_grayscale_before_constant_padding_is_refused_by_the_kernel():
    packed, arrays = K.pack_batch([PHOTO[:20, :20]], [(0, 0, 24, 24)], (8, 8),
                                  out_dtype=torch.uint8, paddings=[(2, 2, 2, 2, "constant", 5)],
                                  source_colours=[[("grayscale", 1)]])
    with pytest.raises(ValueError, match="turn 3 channels into 1, and the constant padding"):
        K.run_packed(packed, arrays, torch.empty((1, 1, 8, 8), dtype=torch.uint8))


# ---- lowering: the plan's draws replayed by torchvision, and the kernel on them ------------

PIPELINES = {
    "jitter_then_rrc": v2.Compose([v2.ColorJitter(0.4, 0.4, 0.4, 0.2),
                                   v2.RandomResizedCrop(40), v2.RandomHorizontalFlip()]),
    "both_orders": v2.Compose([v2.RandomGrayscale(0.3), v2.ColorJitter(contrast=0.6),
                               v2.RandomCrop(40, padding=9, padding_mode="reflect"),
                               v2.RandomVerticalFlip(), v2.ColorJitter(0.3, 0.3, 0.3, 0.3)]),
    "ssd_like": v2.Compose([v2.RandomPhotometricDistort(p=0.6),
                            v2.Pad([20, 10], fill=(123, 117, 104)), v2.RandomCrop(56),
                            v2.RandomHorizontalFlip(), v2.Resize((30, 30))]),
    "distort_after": v2.Compose([v2.Resize(48), v2.CenterCrop(44),
                                 v2.RandomPhotometricDistort(p=0.8)]),
    "gray_first": v2.Compose([v2.Grayscale(), v2.ColorJitter(0.5, 0.5, 0.5, 0.5),
                              v2.RandomResizedCrop(24)]),
    "v1_hue": v1.Compose([v1.ColorJitter(0.3, 0.3, 0.3, 0.4), v1.Pad(5, fill=9),
                          v1.RandomCrop(40)]),
}
SIZES = [(70, 90), (60, 140)]


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("size", SIZES)
def test_plan_draws_and_kernel_reproduce_torchvision(name, size):
    pipeline = PIPELINES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back to Python
        plan = lower(pipeline)
    image = np.ascontiguousarray(PHOTO[:size[0], :size[1]])
    fused = 0
    for seed in range(10):
        torch.manual_seed(seed)
        expected = pipeline(chw(image))
        after = torch.rand(1)
        torch.manual_seed(seed)
        params = plan.draw(*size)
        assert torch.equal(torch.rand(1), after), seed  # the same RNG calls
        assert torch.equal(params.replay(chw(image)), expected), seed
        if params.geometry is None:
            continue
        fused += 1
        assert torch.equal(apply_geometry(chw(image), params.geometry), expected), seed
        assert torch.equal(plan_kernel(plan, image, params), expected), seed
    assert fused == 10


def test_geometry_after_colour_on_a_cropped_image_replays_with_torchvision():
    """A crop after colour ops that ran on an already cropped image has no fused form."""
    pipeline = v2.Compose([v2.RandomCrop(50), v2.ColorJitter(contrast=0.5),
                           v2.RandomResizedCrop(20)])
    plan = lower(pipeline)
    image = chw(PHOTO[:60, :70])
    torch.manual_seed(3)
    params = plan.draw(60, 70)
    assert params.geometry is None
    torch.manual_seed(3)
    assert torch.equal(params.replay(image), pipeline(image))


def test_photometric_distort_draws_for_the_images_channels():
    """make_params draws torch.randperm(channels): a one-channel draw consumes other
    numbers than a three-channel one, as torchvision's does."""
    distort = v2.RandomPhotometricDistort(p=1.0)
    plan = lower(distort)
    grey = torch.from_numpy(np.ascontiguousarray(PHOTO[:30, :40, :1])).permute(2, 0, 1)
    for channels, image in ((1, grey), (3, chw(PHOTO[:30, :40]))):
        torch.manual_seed(5)
        expected = distort(image)
        after = torch.rand(1)
        torch.manual_seed(5)
        params = plan.draw(30, 40, channels)
        assert torch.equal(torch.rand(1), after)
        assert torch.equal(params.replay(image), expected)
        kinds = [kind for kind, _ in params.geometry.source_colour]
        assert ("permute" in kinds) == (channels == 3)  # p=1: always drawn


# ---- the loader end to end ----------------------------------------------------------------

LOADER_PIPELINES = {
    "distort_first_f32": v2.Compose([
        v2.RandomPhotometricDistort(), v2.RandomResizedCrop(56), v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "jitter_pad_u8": v2.Compose([v2.ColorJitter(0.3, 0.3, 0.3, 0.3), v2.Pad([40, 8], fill=90),
                                 v2.RandomCrop(200), v2.Resize((48, 40)),
                                 v2.ColorJitter(hue=0.2)]),
    "v1_hue_f32": v1.Compose([v1.ColorJitter(0.4, 0.4, 0.4, 0.1), v1.CenterCrop(160),
                              v1.ConvertImageDtype(torch.float32)]),
}


@pytest.mark.parametrize("name, num_workers", [
    ("distort_first_f32", 0), ("distort_first_f32", 2), ("jitter_pad_u8", 2),
    ("v1_hue_f32", 2)])
def test_loader_matches_torchvision_on_photographs(photos, name, num_workers):  # noqa: F811
    transform = LOADER_PIPELINES[name]
    expected = torchvision_batches(photos, transform, num_workers)
    actual, loader = pimloader_batches(photos, transform, num_workers, reduced_dct=False)
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    for (expected_images, expected_labels), (images, labels) in zip(expected, actual,
                                                                    strict=True):
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected_images)
    assert loader.stats()[-1].shared_batches == len(actual)  # straight to slots
    plan = lower(transform)
    assert all(plan.draw(375, 500).geometry is not None for _ in range(10))  # all fused


def test_emulated_dpus_run_source_colour_on_the_cpu(photos):  # noqa: F811
    transform = LOADER_PIPELINES["jitter_pad_u8"]
    expected, _ = pimloader_batches(photos, transform, 0, backend="cpu")
    with pytest.warns(UserWarning, match="DPU kernel does not pad or adjust colours"):
        actual, _ = pimloader_batches(photos, transform, 0, backend="emulator", nr_dpus=3,
                                      nr_tasklets=4)
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    for (expected_images, _), (images, _) in zip(expected, actual, strict=True):
        assert torch.equal(images, expected_images)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_in_memory_grey_and_colour_images_match_torchvision(num_workers):
    """uint8 tensors from a dataset: one-channel images through Grayscale(3), hue and the
    distortion (randperm(1)), colour ones through jitter before the crop."""
    grey = v2.Compose([v2.RandomPhotometricDistort(p=0.7), v2.RandomResizedCrop(40),
                       v2.Grayscale(3), v2.ColorJitter(hue=0.3)])
    actual, expected, loader = both_loaders(Images, GREY, grey, num_workers)
    assert_same_batches(actual, expected, "grey")
    assert actual[0][0].shape[1] == 3 and loader.stats()[-1].kernel_samples == len(GREY)
    colour = v2.Compose([v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.RandomResizedCrop(48),
                         v2.RandomGrayscale(0.3)])
    actual, expected, loader = both_loaders(Images, TENSOR_PHOTOS, colour, num_workers)
    assert_same_batches(actual, expected, "colour")
    assert loader.stats()[-1].kernel_samples == len(TENSOR_PHOTOS)
