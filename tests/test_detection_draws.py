"""RandomIoUCrop's draw as the probe runs it (numpy box tests) against torchvision's own
make_params: the same parameters and the same RNG state after, over many boxes and seeds."""
from __future__ import annotations

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from pimloader.transforms._draw import iou_crop_params


def random_boxes(generator: torch.Generator, height: int, width: int, fmt) -> torch.Tensor:
    count = int(torch.randint(1, 12, (1,), generator=generator))
    xy = torch.rand(count, 2, generator=generator) * torch.tensor([width, height])
    wh = torch.rand(count, 2, generator=generator) * torch.tensor([width, height]) / 2
    wh[torch.rand(count, generator=generator) < 0.15] = 0.0            # degenerate
    xy[torch.rand(count, generator=generator) < 0.15] = 0.0            # on the border
    boxes = torch.cat([xy, wh], 1).round(decimals=2)
    boxes = tv_tensors.BoundingBoxes(boxes, format="XYWH", canvas_size=(height, width))
    return v2.ConvertBoundingBoxFormat(fmt)(boxes)


@pytest.mark.parametrize("fmt", ["XYXY", "XYWH", "CXCYWH"])
@pytest.mark.parametrize("options", [None, [0.1, 0.5, 0.9, 1.0]])   # 1.0 ends the loop
def test_iou_crop_draws_are_torchvisions(fmt, options):
    step = v2.RandomIoUCrop(sampler_options=options)
    generator = torch.Generator().manual_seed(11)
    for seed in range(40):
        height, width = (int(v) for v in torch.randint(40, 700, (2,), generator=generator))
        boxes = random_boxes(generator, height, width, fmt)
        flat = [tv_tensors.Image(torch.zeros(3, height, width, dtype=torch.uint8)), boxes]
        torch.manual_seed(seed)
        want = step.make_params(flat)
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = iou_crop_params(step, flat)
        assert torch.equal(torch.get_rng_state(), state), f"seed {seed}: RNG state"
        assert got.keys() == want.keys(), f"seed {seed}"
        for key in want:
            if isinstance(want[key], torch.Tensor):
                assert torch.equal(got[key], want[key]), f"seed {seed}: {key}"
            else:
                assert got[key] == want[key], f"seed {seed}: {key}"


def test_integer_boxes_take_torchvisions_own_draw():
    boxes = tv_tensors.BoundingBoxes(torch.tensor([[2, 3, 40, 50]]), format="XYXY",
                                     canvas_size=(60, 80))
    flat = [tv_tensors.Image(torch.zeros(3, 60, 80, dtype=torch.uint8)), boxes]
    step = v2.RandomIoUCrop()
    torch.manual_seed(3)
    want = step.make_params(flat)
    torch.manual_seed(3)
    got = iou_crop_params(step, flat)
    assert got.keys() == want.keys()
