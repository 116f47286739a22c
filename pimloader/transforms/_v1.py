"""torchvision v1 colour transforms as v2 ones: v1's own draws and v1's tensor arithmetic,
so that a v1 pipeline lowers to the same plan machinery as a v2 one."""
from __future__ import annotations

import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.transforms import functional as F1

class _V1ColorJitter(v2.ColorJitter):
    """v1 ColorJitter as a v2 transform: drawn by v1's `get_params` (the same calls as
    v2's make_params), computed by v1's functional ops (separately rounded arithmetic)."""

    v1_arithmetic = True   # the draws' colour ops compute as v1's (transforms/_draw.py)

    def __init__(self, v1_step) -> None:
        super().__init__()
        self.v1_step = v1_step
        for name in ("brightness", "contrast", "saturation", "hue"):
            value = getattr(v1_step, name)
            setattr(self, name, None if value is None else tuple(value))

    def make_params(self, flat_inputs):
        step = self.v1_step
        fn_idx, b, c, s, h = step.get_params(step.brightness, step.contrast, step.saturation,
                                             step.hue)
        return dict(fn_idx=fn_idx, brightness_factor=b, contrast_factor=c,
                    saturation_factor=s, hue_factor=h)

    def transform(self, inpt, params):
        return _v1_jitter(inpt, params)


def _v1_jitter(image, params):
    adjust = [(F1.adjust_brightness, "brightness_factor"), (F1.adjust_contrast, "contrast_factor"),
              (F1.adjust_saturation, "saturation_factor"), (F1.adjust_hue, "hue_factor")]
    for fn_id in params["fn_idx"].tolist():
        fn, key = adjust[fn_id]
        if params[key] is not None:
            image = fn(image, params[key])
    return image


class _V1Grayscale(v2.Grayscale):
    """v1 Grayscale: v1's tensor arithmetic."""

    v1_arithmetic = True

    def transform(self, inpt, params):
        return F1.rgb_to_grayscale(inpt, num_output_channels=self.num_output_channels)


class _V1RandomGrayscale(v2.RandomGrayscale):
    """v1 RandomGrayscale: the same draw (torch.rand(1) < p), v1's tensor arithmetic."""

    v1_arithmetic = True

    def transform(self, inpt, params):
        return F1.rgb_to_grayscale(inpt, num_output_channels=params["num_input_channels"])



class ToTensorOnTensors:
    """v1 ToTensor as it acts on a uint8 HWC array, applied to a CHW tensor."""

    def __call__(self, image):
        return v1.ToTensor()(image.permute(1, 2, 0).numpy())
