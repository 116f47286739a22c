"""Many samples' RandomResizedCrop (+ RandomHorizontalFlip) draws at once, the same numbers
torch draws, without a dozen torch calls per sample.

Per sample, torchvision's RandomResizedCrop calls `uniform_` twice per attempt (an area
scale, a log aspect ratio, then `exp_`), `randint` twice for the accepted box, and a flip
calls `torch.rand(1)`: about 30 us of dispatch for a few 32-bit numbers of the default
generator's MT19937 stream. Here the generator's state is read once per chunk of samples
(`torch.get_rng_state()`), its MT19937 stream continued here in numpy (the twist and the
tempering over whole arrays), each number turned into a draw as ATen does it, the samples'
draws walked through in Python in torchvision's order, and the state after the numbers
they used written back, so that torch's generator stands where the per-sample calls would
have left it.

What "as ATen does it" means is checked against torch on this machine before the first use
(`agrees_with_torch`): the state layout, uniform_'s rounding (a fused multiply-add, or
not), randint's modulo, and that `torch.exp` over many values gives each value's `exp_` of
one element. Where any check fails, or the default dtype is not float32, or the plan is not
exactly these steps with their own draws, or another thread of the process could draw in
between (the main process with threads of its own: num_workers=0), `draw_many` answers None
and the caller draws sample by sample as before.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torchvision.transforms.v2 as v2
from torchvision.transforms.v2 import InterpolationMode

from .params import Geometry, SampleParams, _replace

STATE_BYTES = 5056        # CPUGeneratorImpl's legacy state: seed, left, seeded, next, key[624]
MT_WORDS = 624
TWENTY_FOUR_BITS = 0xFFFFFF
MAX_DRAWS_PER_SAMPLE = 23  # 10 rejected attempts (2 each), a box (2), a flip (1)


# -- the generator's stream ---------------------------------------------------------------

MATRIX_A = np.uint32(0x9908B0DF)
UPPER, LOWER = np.uint32(0x80000000), np.uint32(0x7FFFFFFF)
SHIFT = 397


def _twist(key: np.ndarray) -> np.ndarray:
    """The next 624 words of MT19937's state, `key[i] = key[i + 397] ^ twist(key[i],
    key[i + 1])` in order, computed in the four stretches whose inputs are already known."""
    new = np.empty_like(key)
    old = np.concatenate([key, key[:1]])

    def stretch(first: int, stop: int, far: np.ndarray, following: np.ndarray) -> None:
        y = (old[first:stop] & UPPER) | (following & LOWER)
        new[first:stop] = far ^ (y >> np.uint32(1)) ^ ((y & np.uint32(1)) * MATRIX_A)

    rest = MT_WORDS - SHIFT   # 227
    stretch(0, rest, old[SHIFT:MT_WORDS], old[1:rest + 1])
    stretch(rest, 2 * rest, new[0:rest], old[rest + 1:2 * rest + 1])
    stretch(2 * rest, MT_WORDS - 1, new[rest:SHIFT - 1], old[2 * rest + 1:MT_WORDS])
    stretch(MT_WORDS - 1, MT_WORDS, new[SHIFT - 1:SHIFT], new[0:1])
    return new


def _temper(words: np.ndarray) -> np.ndarray:
    y = words ^ (words >> np.uint32(11))
    y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    return y ^ (y >> np.uint32(18))


class Stream:
    """The default generator's next 32-bit numbers, taken in order (torch's MT19937 state,
    continued here); `commit(used)` moves torch's generator past the first `used`."""

    def __init__(self, count: int) -> None:
        self.state = torch.get_rng_state().numpy()
        left = int(self.state[8:12].view(np.int32)[0])
        position = int(self.state[16:24].view(np.uint64)[0])
        self.keys = [self.state[24:24 + 8 * MT_WORDS].view(np.uint64).astype(np.uint32)]
        self.start = MT_WORDS if left == 1 else position   # where the stream starts in keys[0]
        self.raw = np.empty(0, np.uint32)
        self.extend(count)

    def extend(self, count: int) -> None:
        """count numbers more."""
        parts = [self.raw]
        wanted = len(self.raw) + count
        taken = len(self.raw)
        while taken < wanted:
            block = len(self.keys) - 1
            at = self.start + taken - block * MT_WORDS   # within the newest key
            if at >= MT_WORDS:
                self.keys.append(_twist(self.keys[-1]))
                continue
            part = _temper(self.keys[-1][at:at + wanted - taken])
            parts.append(part)
            taken += len(part)
        self.raw = np.concatenate(parts)

    def commit(self, used: int) -> None:
        """Leave torch's generator after the first `used` numbers (torch's left + next = 625)."""
        block, position = divmod(self.start + used, MT_WORDS)
        if position == 0 and block > 0:   # at the end of a key: torch twists on its next draw
            block, position = block - 1, MT_WORDS
        out = self.state.copy()
        out[24:24 + 8 * MT_WORDS] = self.keys[block].astype(np.uint64).view(np.uint8)
        out[8:12] = np.array([MT_WORDS + 1 - position], np.int32).view(np.uint8)
        out[16:24] = np.array([position], np.uint64).view(np.uint8)
        torch.set_rng_state(torch.from_numpy(out))


def uniform32(raw: np.ndarray, low: float, high: float, fused: bool = True) -> np.ndarray:
    """float32 `uniform_(low, high)` of each 32-bit number: x = (raw & 2^24-1) / 2^24, then
    x * (high - low) + low rounded once to float32 (`fused`: a multiply-add; else the
    product is rounded first)."""
    x = (raw & TWENTY_FOUR_BITS).astype(np.float64) * 2.0 ** -24
    low32 = np.float32(low)
    span = np.float64(np.float32(np.float32(high) - low32))
    if not fused:
        return (x * span).astype(np.float32) + low32
    product = x * span                    # exact: 24 x 24 bits
    total = product + np.float64(low32)   # rounded to double: fix float32 ties below
    error = (product - (total - (total - product))) + (np.float64(low32) - (total - product))
    return _round_to_float32(total, error)


def _round_to_float32(total: np.ndarray, error: np.ndarray) -> np.ndarray:
    """float32 of the exact total + error (|error| below half an ulp of the double total):
    the plain conversion, except where the double total lies exactly halfway between two
    float32s and the error says which way the exact value lies."""
    rounded = total.astype(np.float32)
    bits = total.view(np.uint64) & np.uint64((1 << 29) - 1)
    halfway = (bits == np.uint64(1 << 28)) & (error != 0)
    if halfway.any():
        towards = np.where(error[halfway] > 0, np.inf, -np.inf)
        below_or_above = np.nextafter(total[halfway], towards)
        rounded[halfway] = below_or_above.astype(np.float32)
    return rounded


# -- the check against torch --------------------------------------------------------------

@lru_cache(maxsize=None)
def rounding() -> str | None:
    """How torch's uniform_ rounds on this machine ("fused" or "plain"), None when the
    emulation does not reproduce torch's draws here (then nothing is drawn in batches)."""
    saved = torch.get_rng_state()
    try:
        return _probe()
    except Exception:   # a state layout or engine this module does not know
        return None
    finally:
        torch.set_rng_state(saved)


def agrees_with_torch() -> bool:
    return rounding() is not None


def _probe() -> str | None:
    if torch.get_rng_state().numel() != STATE_BYTES:
        return None
    count = 4096
    stream = Stream(count)
    drawn = torch.empty(count, dtype=torch.float32).uniform_(0.08, 1.0).numpy()
    mode = next((mode for mode in ("fused", "plain")
                 if np.array_equal(uniform32(stream.raw, 0.08, 1.0, mode == "fused"), drawn)),
                None)
    return mode if mode is not None and _one_by_one_agrees(mode == "fused") else None


def _one_by_one_agrees(fused: bool) -> bool:
    """One-element uniform_, exp_ and randint calls, and the generator's position after
    them, are what the stream and the batched exp give."""
    low, high = math.log(3 / 4), math.log(4 / 3)
    start = torch.get_rng_state()
    stream = Stream(512)
    one = torch.empty(1)
    singles = [one.uniform_(low, high).item() for _ in range(256)]
    exps = [torch.tensor([value]).exp_().item() for value in singles]
    ints = [torch.randint(0, 97 + k, size=(1,)).item() for k in range(256)]
    following = torch.rand(4)
    ours = uniform32(stream.raw[:256], low, high, fused)
    torch.set_rng_state(start)
    stream.commit(512)
    return (ours.tolist() == singles
            and torch.exp(torch.from_numpy(ours)).tolist() == exps
            and [int(raw) % (97 + k) for k, raw in enumerate(stream.raw[256:])] == ints
            and torch.equal(torch.rand(4), following))


# -- the draws ----------------------------------------------------------------------------

def draw_many(plan, sizes: list, channels: int) -> list | None:
    """[SampleParams] of images of `sizes` [(height, width)] drawn in order, as
    `plan.draw` would draw them one by one; None when this plan or machine needs that.
    (`channels`: as plan.draw's; the steps drawn here do not depend on it.)"""
    steps = plan.native_steps
    if not _batchable(tuple(steps)) or torch.get_default_dtype() != torch.float32 \
            or not _generator_is_ours() or not agrees_with_torch():
        return None
    crop, flip = steps[0], (steps[1] if len(steps) > 1 else None)
    walk = Walk(crop, flip, len(sizes), rounding() == "fused")
    drawn = [walk.sample(height, width) for height, width in sizes]
    walk.stream.commit(walk.used)
    return drawn


def _generator_is_ours() -> bool:
    """Whether no other thread may draw from the default generator between reading its
    state and writing it back: in a loader worker (its threads are the loader's, which draw
    nothing), or in a process with one thread (else, numbers another thread drew in between
    would be drawn again)."""
    import threading

    from torch.utils.data import get_worker_info
    return get_worker_info() is not None or threading.active_count() == 1


def _batchable(steps: tuple) -> bool:
    """RandomResizedCrop, then optionally RandomHorizontalFlip, both with their own draws."""
    from ._draw import _own_draw, draw_horizontal_flip, draw_resized_crop
    from .registry import op_of
    if not 1 <= len(steps) <= 2 or not _own_draw(steps[0], v2.RandomResizedCrop) \
            or op_of(steps[0]).draw is not draw_resized_crop:
        return False
    return len(steps) == 1 or (_own_draw(steps[1], v2.RandomHorizontalFlip)
                               and op_of(steps[1]).draw is draw_horizontal_flip)


class Walk:
    """The samples' draws from one stream: each number's value as a scale, as an aspect
    ratio (its exp) and as a flip test, computed for the whole stream at once."""

    def __init__(self, crop, flip, samples: int, fused: bool) -> None:
        self.crop, self.flip, self.fused = crop, flip, fused
        self.template = _template(crop)
        self.flip_p = None if flip is None else np.float32(flip.p)   # torch compares in float32
        self.stream = Stream(6 * samples + MAX_DRAWS_PER_SAMPLE)
        self.used = 0
        self._values()

    def _values(self) -> None:
        raw = self.stream.raw
        low, high = self.crop._log_ratio.tolist()
        self.raw = raw.tolist()
        self.scales = uniform32(raw, *self.crop.scale, self.fused).tolist()
        self.ratios = torch.exp(torch.from_numpy(uniform32(raw, low, high, self.fused))).tolist()
        self.units = uniform32(raw, 0.0, 1.0, self.fused).tolist()

    def take(self, values: str):
        """The next number of the stream as `values` ("raw", "scales", "ratios" or "units"),
        the stream grown first when it ran out."""
        if self.used == len(self.raw):
            self.stream.extend(6 * MAX_DRAWS_PER_SAMPLE)
            self._values()
        self.used += 1
        return getattr(self, values)[self.used - 1]

    def sample(self, height: int, width: int) -> SampleParams:
        """The next sample's draw, for an image of height x width."""
        box = self._box(height, width)
        steps = [(self.crop, dict(zip(("top", "left", "height", "width"), box)))]
        flipped = False
        if self.flip is not None:
            flipped = not self.take("units") >= self.flip_p
            steps.append((self.flip, {} if flipped else None))
        return SampleParams(steps, _geometry(self.template, height, width, box, flipped))

    def _box(self, height: int, width: int) -> tuple:
        """torchvision's RandomResizedCrop.make_params, number by number."""
        area = height * width
        for _ in range(10):
            target_area = area * self.take("scales")
            aspect_ratio = self.take("ratios")
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                top = self.take("raw") % (height - h + 1)
                left = self.take("raw") % (width - w + 1)
                return top, left, h, w
        from ._draw import _central_crop_params
        params = _central_crop_params(self.crop.ratio, height, width)
        return params["top"], params["left"], params["height"], params["width"]


def _template(crop) -> Geometry:
    """The Geometry every draw of `crop` shares: resized to its size, all of it kept."""
    out = tuple(crop.size)
    return Geometry((0, 0, *out), out, (0, 0, *out), interpolation=InterpolationMode(
        crop.interpolation), antialias=bool(crop.antialias))


def _geometry(template: Geometry, height: int, width: int, box: tuple,
              flipped: bool) -> Geometry | None:
    """What draw_sample fuses for this draw, Geometry.identity(height, width).crop(*box)
    .resize(...) and a flip: the template with the box, the flip and the source's size
    when the box is a non-empty part of the image (None, as Geometry.crop refuses it, for
    the empty box of the central fallback on a sliver of an image)."""
    top, left, h, w = box
    if top < 0 or left < 0 or h <= 0 or w <= 0 or top + h > height or left + w > width:
        return None
    return _replace(template, box=box, hflip=flipped, source=(height, width))
