"""Lowering torchvision pipelines: the same random draws, and fused geometry that is exact.

Oracle: torchvision itself, run under the same torch seed as the plan's draw.
"""
import re
import warnings

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2

from pimloader.transforms import lower
from pimloader.transforms.params import apply_geometry

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BICUBIC = v2.InterpolationMode.BICUBIC

PIPELINES = {
    "train": v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
    "val": v2.Compose([v2.Resize(256), v2.CenterCrop(224),
                       v2.ToDtype(torch.float16, scale=True), v2.Normalize(MEAN, STD)]),
    "flips_then_crops": v2.Compose([
        v2.RandomHorizontalFlip(), v2.RandomVerticalFlip(), v2.RandomCrop(300),
        v2.Resize((100, 120)), v2.CenterCrop(90)]),
    "flip_before_bicubic_rrc": v2.Compose([
        v2.RandomHorizontalFlip(), v2.RandomResizedCrop(64, interpolation=BICUBIC)]),
    "resize_max_size": v2.Compose([v2.Resize(200, max_size=240), v2.RandomCrop(150)]),
    "uint8_only": v2.Compose([v2.RandomResizedCrop((31, 17), scale=(0.01, 1.0))]),
}


def image(height=375, width=500, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=generator)


def run_plan(plan, img, seed):
    """The plan's draw, replayed by torchvision, then its elementwise table."""
    torch.manual_seed(seed)
    params = plan.draw(*img.shape[-2:])
    out = params.replay(img)
    if plan.elementwise:
        table = plan.lookup_table(img.shape[0])
        out = torch.stack([table[c][out[c].long()] for c in range(img.shape[0])])
    return params, out


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("size", [(375, 500), (500, 333), (224, 224), (97, 61)])
def test_plan_reproduces_torchvision_under_the_same_seed(name, size):
    pipeline = PIPELINES[name]
    plan = lower(pipeline)
    assert not plan.tail
    img = image(*size)
    for seed in range(12):
        torch.manual_seed(seed)
        try:
            expected = pipeline(img)
        except ValueError as error:  # e.g. a crop larger than the image: the same error
            with pytest.raises(ValueError, match=re.escape(str(error))):
                run_plan(plan, img, seed)
            continue
        _, actual = run_plan(plan, img, seed)
        assert actual.dtype == expected.dtype == plan.output_dtype
        assert torch.equal(actual, expected), (name, size, seed)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_fused_geometry_equals_the_step_by_step_pipeline(name):
    plan = lower(PIPELINES[name])
    img = image()
    fused = 0
    for seed in range(30):
        torch.manual_seed(seed)
        params = plan.draw(*img.shape[-2:])
        if params.geometry is None:
            continue
        fused += 1
        assert torch.equal(apply_geometry(img, params.geometry), params.replay(img)), seed
    assert fused > 0


def test_fixed_output_size_is_known_at_lowering():
    assert lower(PIPELINES["train"]).output_size == (224, 224)
    assert lower(PIPELINES["val"]).output_size == (224, 224)
    assert lower(v2.Resize(256)).output_size is None
    assert lower(v2.Resize((20, 30))).output_size == (20, 30)


def test_v1_pipeline_draws_like_v1():
    pipeline = v1.Compose([v1.RandomResizedCrop(200), v1.RandomHorizontalFlip(),
                           v1.ToTensor(), v1.Normalize(MEAN, STD)])
    plan = lower(pipeline)
    assert not plan.tail and plan.output_dtype == torch.float32
    img = image()
    pil = v2.functional.to_pil_image(img)
    for seed in range(5):
        torch.manual_seed(seed)
        crop_v1 = v1.RandomResizedCrop.get_params(pil, (0.08, 1.0), (3 / 4, 4 / 3))
        flip_v1 = bool(torch.rand(1) < 0.5)
        params, _ = run_plan(plan, img, seed)
        (_, crop_params), (_, flip_params) = params.steps
        assert crop_v1 == (crop_params["top"], crop_params["left"],
                           crop_params["height"], crop_params["width"])
        assert flip_v1 == (flip_params is not None)


def test_v1_to_tensor_table_matches_v1_division():
    plan = lower(v1.Compose([v1.CenterCrop(8), v1.ToTensor()]))
    table = plan.lookup_table(3)
    ramp = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256).permute(1, 2, 0).numpy()
    assert torch.equal(table, v1.ToTensor()(ramp)[:, 0, :])


def test_unlowerable_transforms_form_a_python_tail_with_one_warning():
    pipeline = v2.Compose([v2.RandomResizedCrop(32), v2.RandomRotation(10),
                           v2.ToDtype(torch.float32, scale=True)])
    with pytest.warns(UserWarning, match="RandomRotation, ToDtype cannot be lowered"):
        plan = lower(pipeline)
    assert [type(t) for t in plan.tail] == [v2.RandomRotation, v2.ToDtype]
    assert len(plan.geometric) == 1


def test_geometry_after_elementwise_is_not_lowered():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = lower(v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.CenterCrop(8)]))
    assert [type(t) for t in plan.tail] == [v2.CenterCrop]
    assert len(caught) == 1


def test_padding_crop_fuses_into_a_padded_geometry():
    pipeline = v2.Compose([v2.CenterCrop(600)])  # larger than the image: pads with zeros
    plan = lower(pipeline)
    img = image()
    params, out = run_plan(plan, img, 0)
    assert params.geometry.padding is not None
    assert torch.equal(out, pipeline(img))
    assert torch.equal(apply_geometry(img, params.geometry), out)


@pytest.mark.parametrize("rrc", [v2.RandomResizedCrop(224),
                                 v2.RandomResizedCrop(32, scale=(0.5, 3.0), ratio=(0.2, 5.0)),
                                 v2.RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(3.0, 4.0))])
def test_fast_resized_crop_draw_is_make_params(rrc):
    """The plan's RandomResizedCrop draw: make_params' numbers and RNG state, call for call
    (fallback central crops included: tiny and extreme sizes, impossible ratios)."""
    from pimloader.transforms._draw import resized_crop_params
    sizes = [(375, 500), (500, 333), (1, 1), (1, 700), (700, 2), (3, 5), (224, 224)]
    for seed in range(150):
        height, width = sizes[seed % len(sizes)]
        torch.manual_seed(seed)
        expected = rrc.make_params([torch.empty((3, height, width), dtype=torch.uint8)])
        after = torch.rand(1)
        torch.manual_seed(seed)
        assert resized_crop_params(rrc, height, width) == expected, (seed, height, width)
        assert torch.equal(torch.rand(1), after)
