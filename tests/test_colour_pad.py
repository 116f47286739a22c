"""Padding and colour in the fused kernel, against torchvision as the oracle.

References: torchvision v2's functional ops on uint8 CHW tensors (`pad`, `resized_crop`,
`adjust_brightness` / `adjust_contrast` / `adjust_saturation`, `rgb_to_grayscale`), v1's
tensor ops for v1 transforms, and torch's DataLoader over a torchvision ImageFolder with the
same pipeline and seeds for the loader end to end. Padding is pure indexing and the colour
arithmetic is torch's float32 one, so the outputs must be identical, not merely close.
"""
from __future__ import annotations

import itertools
import re
import warnings

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torchvision.transforms import functional as F1
from torchvision.transforms.v2 import functional as F

from pimloader.backends import kernels as K
from pimloader.backends.select import Backends
from pimloader.pipelines.images import ImagePipeline, lookup_table
from pimloader.pipelines.runs import RunBatcher
from pimloader.transforms import lower
from pimloader.transforms.params import MAX_COLOUR_OPS, apply_colour, apply_geometry
from test_image_pipeline import (MEAN, STD, level_differences, photos,  # noqa: F401 (fixture)
                                 pimloader_batches, torchvision_batches)
from test_kernels import PHOTOS

RGB_PHOTOS = {name: photo for name, photo in PHOTOS.items() if photo.ndim == 3}
PHOTO = next(iter(RGB_PHOTOS.values()))       # a real photograph, HWC uint8
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
MODES = ["constant", "edge", "reflect", "symmetric"]
V2_OPS = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast,
          "saturation": F.adjust_saturation, "grayscale": F.rgb_to_grayscale}


def chw(hwc: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(hwc)).permute(2, 0, 1)


def memory_order(image: torch.Tensor) -> str:
    """How torch holds a CHW image: "HWC" where its channels are adjacent (channels-last),
    else "CHW" (the kernel's `torch_layouts`)."""
    return "HWC" if image.shape[-3] > 1 and image.stride(-3) == 1 else "CHW"


def kernel(images, boxes, size, *, dtype=torch.uint8, layout="NCHW", lut=None, **extras):
    """The fused kernel's batch (NCHW view), out poisoned so that every value is written."""
    packed, _ = K.pack_batch(images, boxes, size, out_dtype=dtype, **extras)
    channels = int(packed.extras[0]["out_channels"]) if packed.extras is not None else 3
    shape = (len(images), channels, *size)
    out = torch.full(shape if layout == "NCHW" else (len(images), *size, channels), 7,
                     dtype=dtype)
    K.resized_crop_batch(images, boxes, size, out, layout=layout, lut=lut, **extras)
    return out if layout == "NCHW" else out.permute(0, 3, 1, 2)


# ---- colour: the kernel against torchvision's functional ops -------------------------------

colour_ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(["brightness", "contrast", "saturation"]),
              st.floats(0.0, 2.5, allow_nan=False)),
    st.tuples(st.just("grayscale"), st.sampled_from([1, 3]))), min_size=1, max_size=5)


@st.composite
def colour_cases(draw):
    h, w = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    top, left = draw(st.integers(0, PHOTO.shape[0] - h)), draw(st.integers(0, PHOTO.shape[1] - w))
    box_h = draw(st.integers(1, PHOTO.shape[0] - top))
    box_w = draw(st.integers(1, PHOTO.shape[1] - left))
    return (top, left, box_h, box_w), (h, w), draw(colour_ops), draw(st.booleans())


@FAST
@given(colour_cases())
# 6 values, all past torch's last vector step: its scalar code rounds values 1..4 twice
@example(((210, 0, 1, 1), (1, 2), [("contrast", 1.192092896e-07)], False))
def test_colour_ops_match_torchvision_v2(case):
    box, size, ops, hflip = case
    resized = F.resized_crop(chw(PHOTO), *box, list(size), antialias=True)
    resized = F.horizontal_flip(resized) if hflip else resized
    expected = apply_colour(resized, ops)
    actual = kernel([PHOTO], [box], size, hflip=[hflip], colours=[ops],
                    torch_layouts=[("HWC", memory_order(resized))])
    assert torch.equal(actual[0], expected), (ops, (actual[0].int() - expected.int()).abs().max())


NEAR_MEAN = 2.0 ** -23   # a blend this close to an integer mean lands on either side of it
                         # as it is rounded once or twice...
FLAT = np.empty((320, 400, 3), np.uint8)
FLAT[:] = (230, 200, 150)  # ...here: gray 203, and every blue or green value rounds apart


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("box", [(5, 9, 300, 280), (40, 0, 200, FLAT.shape[1])],
                         ids=["CHW", "HWC"])  # a crop of the full width stays channels-last
def test_values_past_torchs_vector_steps_round_as_torchs(box, threads):
    """torch rounds the multiply-adds of its vector steps once, and those of the values
    after the last whole step (of each thread's chunk, and of each row) as its scalar code
    does, twice for some in this torch build: the kernel rounds each value by its place in
    torch's tensor, CHW or channels-last, flipped or not, for any length and thread count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for size, flip in itertools.product([(1, 2), (3, 5), (13, 17), (150, 151)],
                                            ["none", "h", "v"]):
            resized = F.resized_crop(chw(FLAT), *box, list(size), antialias=True)
            resized = {"none": resized, "h": F.horizontal_flip(resized),
                       "v": F.vertical_flip(resized)}[flip]
            assert memory_order(resized) == ("HWC" if box[3] == FLAT.shape[1] else "CHW")
            for ops in ([("contrast", NEAR_MEAN)], [("saturation", NEAR_MEAN)],
                        [("brightness", 1.0), ("contrast", NEAR_MEAN)],
                        [("hue", 0.02), ("contrast", NEAR_MEAN)],
                        [("permute", (2, 1, 0)), ("contrast", NEAR_MEAN)]):
                actual = kernel([FLAT], [box], size, colours=[ops], hflip=[flip == "h"],
                                vflip=[flip == "v"],
                                torch_layouts=[("HWC", memory_order(resized))])[0]
                assert torch.equal(actual, apply_colour(resized, ops)), (size, flip, ops)
    finally:
        torch.set_num_threads(previous)


@FAST
@given(colour_cases())
def test_colour_ops_match_torchvision_v1_with_separate_rounding(case):
    box, size, ops, _ = case
    ops = [(k, v) for k, v in ops if k != "grayscale"] + [("grayscale", 3)]
    expected = apply_colour(F.resized_crop(chw(PHOTO), *box, list(size), antialias=True),
                            ops, v1=True)
    actual = kernel([PHOTO], [box], size, colours=[ops], fused_mul_add=False)
    assert torch.equal(actual[0], expected)


def test_each_colour_op_on_whole_photographs():
    """Every op alone and a jitter of all, on each photograph at 224x224: identical."""
    for name, photo in RGB_PHOTOS.items():
        box, size = (0, 0, *photo.shape[:2]), (224, 224)
        resized = F.resized_crop(chw(photo), *box, list(size), antialias=True)
        for ops in ([("brightness", 1.37)], [("contrast", 0.61)], [("saturation", 1.8)],
                    [("grayscale", 1)], [("grayscale", 3)],
                    [("saturation", 0.3), ("brightness", 0.7), ("contrast", 1.4)]):
            actual = kernel([photo], [box], size, colours=[ops])[0]
            assert torch.equal(actual, apply_colour(resized, ops)), (name, ops)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_colour_at_every_simd_level(level):
    """The AVX2 colour steps (level 2: 8 pixels at a time, the rest by the scalar code)
    and the scalar ones give torchvision's bytes, with and without fused multiply-adds."""
    programs = ([("saturation", 1.8), ("contrast", 0.61)], [("grayscale", 1)],
                [("grayscale", 3), ("brightness", 1.2)], [("contrast", 2.2), ("saturation", 0.3)])
    try:
        assert K.lib.pim_cpu_simd(level) <= level
        for size in [(224, 224), (13, 17), (1, 7), (9, 9), (3, 40)]:
            box = (5, 9, 300, 280)
            resized = F.resized_crop(chw(PHOTO), *box, list(size), antialias=True)
            for ops in programs:
                actual = kernel([PHOTO], [box], size, colours=[ops])[0]
                assert torch.equal(actual, apply_colour(resized, ops)), (size, ops)
                v1_ops = [op for op in ops if op[0] != "grayscale"] + [("grayscale", 3)]
                actual = kernel([PHOTO], [box], size, colours=[v1_ops], fused_mul_add=False)[0]
                assert torch.equal(actual, apply_colour(resized, v1_ops, v1=True)), (size, v1_ops)
    finally:
        K.lib.pim_cpu_simd(-1)


def test_one_channel_colour_follows_torchvision():
    """After Grayscale(1): saturation leaves the image alone, contrast takes its own mean."""
    box, size = (10, 20, 200, 150), (31, 17)
    resized = F.resized_crop(chw(PHOTO), *box, list(size), antialias=True)
    ops = [("grayscale", 1), ("saturation", 0.2), ("contrast", 1.7), ("brightness", 0.9),
           ("grayscale", 3)]
    assert torch.equal(kernel([PHOTO], [box], size, colours=[ops])[0],
                       apply_colour(resized, ops))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_colour_then_normalised_float_output(dtype, layout):
    boxes = [(0, 0, 300, 300), (50, 60, 120, 200)]
    ops = [[("contrast", 1.3), ("saturation", 0.5)], [("brightness", 1.2)]]
    lut = K.normalize_lut(3, dtype, MEAN, STD)
    actual = kernel([PHOTO, PHOTO], boxes, (40, 56), dtype=dtype, layout=layout, lut=lut,
                    colours=ops)
    for i, box in enumerate(boxes):
        u8 = apply_colour(F.resized_crop(chw(PHOTO), *box, [40, 56], antialias=True), ops[i])
        expected = F.normalize(F.to_dtype(u8, dtype, scale=True), MEAN, STD)
        assert torch.equal(actual[i], expected)


def test_grayscale_to_one_channel_writes_one_channel_slots():
    lut = K.normalize_lut(1, torch.float32, [0.5], [0.25])
    actual = kernel([PHOTO] * 3, [(0, 0, 100, 100)] * 3, (20, 30), dtype=torch.float32,
                    lut=lut, colours=[[("grayscale", 1)]] * 3, hflip=[True, False, True])
    assert actual.shape == (3, 1, 20, 30)
    u8 = F.rgb_to_grayscale(F.resized_crop(chw(PHOTO), 0, 0, 100, 100, [20, 30],
                                           antialias=True))
    expected = F.normalize(F.to_dtype(u8, torch.float32, scale=True), [0.5], [0.25])
    assert torch.equal(actual[1], expected)
    assert torch.equal(actual[0], F.horizontal_flip(expected))


def test_fused_multiply_add_choice_follows_torch():
    x = torch.arange(256, dtype=torch.uint8)[None, None].expand(3, 4, 256).contiguous()
    photo = x.permute(1, 2, 0).numpy()
    expected = F.adjust_saturation(F.adjust_contrast(x, 0.77), 1.31)
    ops = [("contrast", 0.77), ("saturation", 1.31)]
    assert torch.equal(kernel([photo], [(0, 0, 4, 256)], (4, 256), colours=[ops])[0], expected)


def test_colour_programs_are_checked():
    with pytest.raises(ValueError, match="colour op must be one of"):
        K.pack_batch([PHOTO], [(0, 0, 9, 9)], (4, 4), colours=[[("posterize", 4)]])
    with pytest.raises(ValueError, match="hue factor 0.7 is not in"):
        K.pack_batch([PHOTO], [(0, 0, 9, 9)], (4, 4), colours=[[("hue", 0.7)]])
    with pytest.raises(ValueError, match="not a permutation"):
        K.pack_batch([PHOTO], [(0, 0, 9, 9)], (4, 4), colours=[[("permute", (0, 0, 2))]])
    with pytest.raises(ValueError, match="not non-negative"):
        K.pack_batch([PHOTO], [(0, 0, 9, 9)], (4, 4), colours=[[("contrast", -0.5)]])
    with pytest.raises(ValueError, match="one batch needs one channel count"):
        K.pack_batch([PHOTO] * 2, [(0, 0, 9, 9)] * 2, (4, 4),
                     colours=[[("grayscale", 1)], None])
    with pytest.raises(ValueError, match="at most"):
        K.pack_batch([PHOTO], [(0, 0, 9, 9)], (4, 4),
                     colours=[[("brightness", 1.0)] * (MAX_COLOUR_OPS + 1)])
    assert MAX_COLOUR_OPS == K.lib.PIM_MAX_COLOUR_OPS


def test_the_c_side_checks_extras_before_writing():
    packed, arrays = K.pack_batch([PHOTO], [(0, 0, 9, 9)], (4, 4), out_dtype=torch.uint8,
                                  colours=[[("brightness", 1.5)]])
    out = torch.full((1, 3, 4, 4), 7, dtype=torch.uint8)
    packed.extras["ops"][0, 0]["kind"] = 9
    with pytest.raises(ValueError, match="unknown kind 9"):
        K.run_packed(packed, arrays, out)
    packed.extras["ops"][0, 0]["kind"] = K.COLOUR_OPS["brightness"]
    packed.extras["out_channels"] = 1
    with pytest.raises(ValueError, match="out_channels 1, the colour ops leave 3"):
        K.run_packed(packed, arrays, out)
    assert bool((out == 7).all())


# ---- padding: the kernel against torchvision's pad -----------------------------------------

@st.composite
def padding_cases(draw):
    mode = draw(st.sampled_from(MODES))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    limit = {"reflect": (h - 1, w - 1), "symmetric": (h, w)}.get(mode, (15, 15))
    top, bottom = (draw(st.integers(0, limit[0])) for _ in range(2))
    left, right = (draw(st.integers(0, limit[1])) for _ in range(2))
    fill = tuple(draw(st.integers(0, 255)) for _ in range(3))
    H, W = h + top + bottom, w + left + right
    box_top, box_left = draw(st.integers(0, H - 1)), draw(st.integers(0, W - 1))
    box = (box_top, box_left, draw(st.integers(1, H - box_top)),
           draw(st.integers(1, W - box_left)))
    size = (draw(st.integers(1, 14)), draw(st.integers(1, 14)))
    at = (draw(st.integers(0, PHOTO.shape[0] - h)), draw(st.integers(0, PHOTO.shape[1] - w)))
    return (at, h, w), (top, left, bottom, right, mode, fill), box, size


@FAST
@given(padding_cases(), st.booleans())
def test_padding_matches_torchvision(case, vflip):
    (at, h, w), padding, box, size = case
    image = PHOTO[at[0]:at[0] + h, at[1]:at[1] + w]    # a view: rows have the photo's stride
    top, left, bottom, right, mode, fill = padding
    padded = F.pad(chw(image), [left, top, right, bottom], fill=list(fill), padding_mode=mode) \
        if mode == "constant" else F.pad(chw(image), [left, top, right, bottom],
                                         padding_mode=mode)
    expected = F.resized_crop(padded, *box, list(size), antialias=True)
    actual = kernel([image], [box], size, vflip=[vflip], paddings=[padding])[0]
    assert torch.equal(actual, F.vertical_flip(expected) if vflip else expected)


def test_padding_and_colour_in_one_call_with_plain_samples():
    boxes = [(-5 + 5, 0, 60, 70), (3, 4, 50, 40), (0, 0, 120, 90)]
    paddings = [(5, 9, 5, 9, "reflect", (0, 0, 0)), None, (30, 0, 0, 0, "constant", (9, 8, 7))]
    colours = [[("saturation", 0.4)], None, [("brightness", 1.9)]]
    image = PHOTO[:90, :90]
    actual = kernel([image] * 3, boxes, (33, 33), paddings=paddings, colours=colours)
    for i, (box, padding, ops) in enumerate(zip(boxes, paddings, colours)):
        source = chw(image)
        if padding is not None:
            top, left, bottom, right, mode, fill = padding
            source = F.pad(source, [left, top, right, bottom],
                           fill=list(fill) if mode == "constant" else None, padding_mode=mode)
        expected = F.resized_crop(source, *box, [33, 33], antialias=True)
        assert torch.equal(actual[i], apply_colour(expected, ops or [])), i


def test_padding_beyond_torchs_limits_is_refused():
    with pytest.raises(ValueError, match="too large for an extent of 4 in reflect mode"):
        kernel([PHOTO[:4, :4]], [(0, 0, 8, 8)], (8, 8), paddings=[(4, 0, 0, 4, "reflect", 0)])
    with pytest.raises(ValueError, match="not inside the 12x4 image"):
        kernel([PHOTO[:4, :4]], [(0, 0, 13, 4)], (8, 8), paddings=[(4, 0, 4, 0, "edge", 0)])


# ---- lowering: the plan's draws replayed by torchvision, and the kernel on them ------------

PIPELINES = {
    "jitter": v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(),
                          v2.ColorJitter(0.4, 0.4, 0.4)]),
    "jitter_ranges_gray": v2.Compose([
        v2.Resize(40), v2.CenterCrop(36), v2.ColorJitter(brightness=(0.2, 1.8), saturation=0.9),
        v2.RandomGrayscale(0.5), v2.ColorJitter(contrast=(0.5, 0.6))]),
    "gray1": v2.Compose([v2.RandomResizedCrop((30, 20)), v2.Grayscale(),
                         v2.ColorJitter(contrast=0.5)]),
    "cifar": v2.Compose([v2.RandomCrop(32, padding=4, padding_mode="reflect"),
                         v2.RandomHorizontalFlip()]),
    "pad_then_rrc": v2.Compose([v2.RandomVerticalFlip(), v2.Pad([3, 9, 20, 1], fill=(9, 200, 31)),
                                v2.RandomResizedCrop(40, scale=(0.02, 1.0))]),
    "pad_if_needed": v2.Compose([v2.RandomCrop((60, 300), pad_if_needed=True,
                                               padding_mode="symmetric"), v2.Resize((20, 25))]),
    "center_crop_larger": v2.Compose([v2.CenterCrop((50, 400)), v2.Grayscale(3)]),
    "edge_pads_compose": v2.Compose([v2.Pad(2, padding_mode="edge"),
                                     v2.RandomCrop(48, padding=[1, 5], padding_mode="edge")]),
    # no resampling: v1 resizes uint8 tensors through float, v2 does not
    "v1": v1.Compose([v1.Pad(2, fill=77), v1.RandomCrop(30), v1.ColorJitter(0.5, 0.5, 0.5),
                      v1.RandomGrayscale(0.5), v1.Grayscale(3)]),
}
SIZES = [(44, 52), (33, 80), (1, 1), (5, 3)]


def plan_kernel(plan, image_hwc, params):
    """The plan's fused step for one draw, through the run batcher (the CPU kernel)."""
    g = params.geometry
    pipeline = ImagePipeline(None, plan, lookup_table(plan) if plan.elementwise else None,
                             False, False)
    out = torch.empty((1, pipeline.out_channels, *g.size), dtype=plan.output_dtype)
    backends = Backends()
    runs = RunBatcher(backends.router(pipeline.backend), 1)
    runs.add(out, 0, image_hwc, g.box, g, "NCHW", pipeline.lut)
    runs.flush()
    backends.close()
    return out[0]


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("size", SIZES)
def test_plan_draws_and_kernel_reproduce_torchvision(name, size):
    pipeline = PIPELINES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back to Python
        plan = lower(pipeline)
    image = np.ascontiguousarray(PHOTO[:size[0], :size[1]])
    fused = drawn = 0
    for seed in range(8):
        torch.manual_seed(seed)
        try:
            expected = pipeline(chw(image))
        except (ValueError, RuntimeError, IndexError) as error:  # torchvision refuses the draw
            torch.manual_seed(seed)
            message = "out of bounds" if isinstance(error, IndexError) else str(error)[:30]
            with pytest.raises(type(error), match=re.escape(message)):
                plan.draw(*size).replay(chw(image))
            continue
        drawn += 1
        torch.manual_seed(seed)
        params = plan.draw(*size)
        assert torch.equal(params.replay(chw(image)), expected), seed
        assert torch.rand(1).item() == (torch.manual_seed(seed), pipeline(chw(image)),
                                        torch.rand(1).item())[2]  # same RNG state after
        if params.geometry is None:
            continue
        fused += 1
        assert torch.equal(apply_geometry(chw(image), params.geometry), expected), seed
        assert torch.equal(plan_kernel(plan, image, params), expected), seed
    assert fused == drawn or name == "pad_if_needed" and size == (1, 1)


def test_v1_colour_draws_are_v2s():
    jitter1, jitter2 = v1.ColorJitter(0.3, (0.5, 1.5), 0.9), v2.ColorJitter(0.3, (0.5, 1.5), 0.9)
    for seed in range(20):
        torch.manual_seed(seed)
        fn_idx, *factors = jitter1.get_params(jitter1.brightness, jitter1.contrast,
                                             jitter1.saturation, jitter1.hue)
        torch.manual_seed(seed)
        params = jitter2.make_params([])
        assert torch.equal(fn_idx, params["fn_idx"])
        assert factors == [params[f"{k}_factor"] for k in
                           ("brightness", "contrast", "saturation", "hue")]


def test_what_stays_python():
    cases = {
        "colour_after_float": (v2.Compose([v2.ToDtype(torch.float32, scale=True),
                                           v2.Grayscale()]), "Grayscale"),
        "normalize_3_after_gray_1": (v2.Compose([v2.Grayscale(), v2.Normalize(MEAN, STD)]),
                                     "Normalize"),
    }
    for name, (pipeline, first_tail) in cases.items():
        with pytest.warns(UserWarning, match=f"{first_tail}.* cannot be lowered"):
            plan = lower(pipeline)
        assert type(plan.tail[0]).__name__ == first_tail, name


def test_padding_after_a_resize_replays_with_torchvision():
    plan = lower(v2.Compose([v2.Resize(20), v2.Pad(3, padding_mode="reflect")]))
    image = chw(PHOTO[:30, :40])
    torch.manual_seed(0)
    params = plan.draw(30, 40)
    assert params.geometry is None  # pads a resampled image: not this kernel's job
    assert torch.equal(params.replay(image), F.pad(F.resize(image, 20), 3,
                                                   padding_mode="reflect"))


# ---- the loader end to end, against torch's DataLoader over torchvision -----------------

LOADER_PIPELINES = {
    "jitter_f32": v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(),
                              v2.ColorJitter(0.4, 0.4, 0.4), v2.RandomGrayscale(0.3),
                              v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "gray1_f16": v2.Compose([v2.Resize(48), v2.CenterCrop(40), v2.Grayscale(),
                             v2.ColorJitter(brightness=0.3, contrast=0.3),
                             v2.ToDtype(torch.float16, scale=True)]),
    "pad_u8": v2.Compose([v2.Pad([30, 10], fill=(200, 100, 0)),
                          v2.RandomResizedCrop(56, scale=(0.3, 1.0)),
                          v2.ColorJitter(saturation=(0.0, 2.0))]),
    "center_crop_larger_u8": v2.Compose([v2.CenterCrop(700), v2.Resize((40, 50))]),
    "v1_f32": v1.Compose([v1.Pad(4, fill=3), v1.RandomCrop(64), v1.ColorJitter(0.4, 0.4, 0.4),
                          v1.RandomGrayscale(0.3), v1.ConvertImageDtype(torch.float32)]),
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name", sorted(LOADER_PIPELINES))
def test_loader_matches_torchvision_on_photographs(photos, name, num_workers):  # noqa: F811
    transform = LOADER_PIPELINES[name]
    expected = torchvision_batches(photos, transform, num_workers)
    actual, loader = pimloader_batches(photos, transform, num_workers, reduced_dct=False)
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    for (expected_images, expected_labels), (images, labels) in zip(expected, actual,
                                                                    strict=True):
        assert torch.equal(labels, expected_labels)
        assert images.dtype == expected_images.dtype and images.shape == expected_images.shape
        assert torch.equal(images, expected_images)
    assert loader.stats()[-1].shared_batches == len(actual)  # straight to slots
    plan = lower(transform)
    assert all(plan.draw(375, 500).geometry is not None for _ in range(10))  # all fused


def test_channels_last_with_colour(photos):  # noqa: F811
    transform = LOADER_PIPELINES["gray1_f16"]
    expected, _ = pimloader_batches(photos, transform, 0)
    actual, _ = pimloader_batches(photos, transform, 0, memory_format=torch.channels_last)
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    for (expected_images, _), (images, _) in zip(expected, actual, strict=True):
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(images, expected_images)


def test_dpu_backend_runs_colour_and_padding_on_the_cpu(photos):  # noqa: F811
    transform = LOADER_PIPELINES["pad_u8"]
    expected, _ = pimloader_batches(photos, transform, 0, backend="cpu")
    with pytest.warns(UserWarning, match="DPU kernel does not pad or adjust colours"):
        actual, _ = pimloader_batches(photos, transform, 0, backend="emulator", nr_dpus=3,
                                      nr_tasklets=4)
    assert len(actual) == len(expected) > 0, (len(actual), len(expected))
    for (expected_images, _), (images, _) in zip(expected, actual, strict=True):
        assert torch.equal(images, expected_images)
