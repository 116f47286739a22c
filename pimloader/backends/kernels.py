"""Python side of the fused CPU crop + resize + flip + convert kernel (`pimloader._kernels`).

The host does everything that needs floating point, once, in numpy or torch:

- `axis_table` computes the int16 fixed-point filter weights of one resampled axis exactly as
  torch's uint8 antialias path does (the path torchvision v2 `resize` takes on uint8 CPU
  tensors), so the integer kernel reproduces torchvision's output bit for bit;
- `normalize_lut` builds the per-channel 256-entry tables that turn a resized uint8 level
  into the bit pattern of `ToDtype(dtype, scale=True)` then `Normalize(mean, std)`,
  computed with the very torch operations torchvision uses;
- `pack_batch` turns per-sample crop boxes, flips and sources into the `pim_sample_t`
  descriptors of include/pim_params.h plus one buffer of (shared) axis tables, and,
  for samples that pad their source or adjust colours, the `pim_extra_t` records of
  csrc/include/pim_extra.h.

`run_packed` hands those to the C kernel, which processes the whole batch in one call with
the GIL released (cffi API mode) and writes each sample straight into its slot of `out`.
`resized_crop_batch` does both for the common case.

Crop boxes lie inside their image, or inside its padded extension when the sample pads.
"""
from __future__ import annotations

import array
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from pimloader import _kernels

ffi = _kernels.ffi
lib = _kernels.lib

INTERPOLATIONS = {"bilinear": lib.PIM_INTERP_BILINEAR, "bicubic": lib.PIM_INTERP_BICUBIC}
LAYOUTS = ("NCHW", "NHWC")
# output dtype -> (element bytes, numpy type of the lookup table's bit patterns)
OUT_DTYPES = {
    torch.uint8: (1, None),
    torch.float16: (2, np.uint16),
    torch.bfloat16: (2, np.uint16),
    torch.float32: (4, np.uint32),
}

# numpy mirror of pim_sample_t (include/pim_params.h); its field names, offsets and sizes are
# checked against the C struct (cffi) at import, and pack_batch fills it by field name.
# Tables and descriptors are built little-endian, the byte order of every host we target.
SAMPLE_DTYPE = np.dtype([
    ("src_offset", "<u8"), ("dst_offset", "<u8"),
    ("xtab_offset", "<u4"), ("ytab_offset", "<u4"),
    ("src_h", "<u4"), ("src_w", "<u4"), ("src_stride", "<u4"),
    ("crop_top", "<u4"), ("crop_left", "<u4"), ("crop_h", "<u4"), ("crop_w", "<u4"),
    ("out_h", "<u4"), ("out_w", "<u4"),
    ("channels", "u1"), ("out_esize", "u1"), ("flags", "u1"), ("interp", "u1"),
])
AXIS_DTYPE = np.dtype([("n_in", "<u4"), ("n_out", "<u4"), ("taps", "<u4"), ("precision", "<u4")])
# numpy mirror of pim_extra_t (csrc/include/pim_extra.h)
COLOUR_OP_DTYPE = np.dtype([("factor", "<f8"), ("kind", "<u4"), ("channels", "<u4")])
EXTRA_DTYPE = np.dtype([
    ("image_top", "<u4"), ("image_left", "<u4"), ("image_h", "<u4"), ("image_w", "<u4"),
    ("pad_mode", "u1"), ("fill", "u1", (3,)), ("n_ops", "u1"), ("fused_mul_add", "u1"),
    ("out_channels", "u1"), ("reserved", "u1"),
    ("ops", COLOUR_OP_DTYPE, (lib.PIM_MAX_COLOUR_OPS,)),
])
PAD_MODES = {"constant": lib.PIM_PAD_CONSTANT, "edge": lib.PIM_PAD_EDGE,
             "reflect": lib.PIM_PAD_REFLECT, "symmetric": lib.PIM_PAD_SYMMETRIC}
COLOUR_OPS = {"brightness": lib.PIM_COLOUR_BRIGHTNESS, "contrast": lib.PIM_COLOUR_CONTRAST,
              "saturation": lib.PIM_COLOUR_SATURATION, "grayscale": lib.PIM_COLOUR_GRAYSCALE}


def _check_layouts() -> None:
    if sys.byteorder != "little" or array.array("I").itemsize != 4:
        raise ImportError("pimloader's kernels need a little-endian host with 32-bit C ints")
    for ctype, dtype in (("pim_sample_t", SAMPLE_DTYPE), ("pim_axis_t", AXIS_DTYPE),
                         ("pim_colour_op_t", COLOUR_OP_DTYPE), ("pim_extra_t", EXTRA_DTYPE)):
        if ffi.sizeof(ctype) != dtype.itemsize:
            raise ImportError(f"{ctype} is {ffi.sizeof(ctype)} bytes in C but "
                              f"{dtype.itemsize} in pimloader.backends.kernels: rebuild the extension")
        c_fields = ffi.typeof(ctype).fields
        if [name for name, _ in c_fields] != list(dtype.names):
            raise ImportError(f"{ctype} has fields {[name for name, _ in c_fields]} in C but "
                              f"{list(dtype.names)} in pimloader.backends.kernels: rebuild or update it")
        for name, field in c_fields:
            at, size = dtype.fields[name][1], dtype.fields[name][0].itemsize
            if (field.offset, ffi.sizeof(field.type)) != (at, size):
                raise ImportError(f"{ctype}.{name} is {ffi.sizeof(field.type)} bytes at {field.offset} in "
                                  f"C but {size} bytes at {at} in Python")


_check_layouts()


# ---- filter weights -------------------------------------------------------------------

def _linear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _cubic(x: np.ndarray) -> np.ndarray:
    # Keys' cubic with a = -0.5, as torch (antialias=True) and Pillow; same operation order
    a = -0.5
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


_FILTERS = {"bilinear": (2, _linear), "bicubic": (4, _cubic)}


def axis_weights(n_in: int, n_out: int, interpolation: str = "bilinear"):
    """Antialiased resampling of one axis from n_in to n_out samples, as torch computes it
    for uint8 input: returns (first, count, weights int16 [n_out, K], precision).

    Mirrors `_compute_indices_min_size_weights_aa` and `_compute_index_ranges_int16_weights`
    of ATen's UpSampleKernel.cpp in float64, operation for operation (sequential sums
    included), so that the rounded int16 weights are the same numbers."""
    if interpolation not in _FILTERS:
        raise ValueError(f"interpolation must be one of {sorted(_FILTERS)}, got {interpolation!r}")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"axis sizes must be positive, got {n_in} -> {n_out}")
    interp_size, filt = _FILTERS[interpolation]
    scale = float(n_in) / float(n_out)
    support = (interp_size * 0.5) * scale if scale >= 1.0 else interp_size * 0.5
    k_max = int(math.ceil(support)) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0

    i = np.arange(n_out, dtype=np.float64)
    center = scale * (i + 0.5)
    first = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    end = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), n_in)
    count = np.clip(end - first, 0, k_max)

    j = np.arange(k_max, dtype=np.int64)
    used = j[None, :] < count[:, None]
    pos = (j[None, :] + first[:, None]).astype(np.float64)
    w = np.where(used, filt((pos - center[:, None] + 0.5) * invscale), 0.0)
    total = np.zeros(n_out)
    for col in range(k_max):  # left to right, as the C++ loop adds them
        total = total + w[:, col]
    nonzero = total != 0.0
    w = np.where(nonzero[:, None], w / np.where(nonzero, total, 1.0)[:, None], w)
    w_max = float(w[nonzero].max()) if nonzero.any() else 0.0

    precision = 0
    while precision < 22:
        if int(0.5 + w_max * (1 << (precision + 1))) >= (1 << 15):
            break
        precision += 1
    v = w * float(1 << precision)
    w16 = np.where(v < 0, np.trunc(-0.5 + v), np.trunc(0.5 + v)).astype(np.int16)
    return first.astype(np.uint32), count.astype(np.uint32), w16, precision


@lru_cache(maxsize=4096)
def axis_table(n_in: int, n_out: int, interpolation: str = "bilinear", start: int = 0,
               count: Optional[int] = None) -> bytes:
    """The pim_axis_t table (header, ranges, padded int16 weights) mapping n_in -> n_out.

    With `start`/`count`, only outputs start..start+count-1 of that resampling (a window of
    the resized axis, e.g. CenterCrop after Resize): the same weights and precision as the
    whole axis, so the window equals cropping the full resize. Built in C (csrc/
    axis_tables.c, about 1 us); `reference_axis_table` is the same in numpy."""
    count, kind = _check_axis_request(n_in, n_out, interpolation, start, count)
    size = lib.pim_axis_table(n_in, n_out, kind, start, count, ffi.NULL, 0)
    if size == 0:
        raise MemoryError(f"no memory for the {n_in} -> {n_out} axis table")
    table = bytearray(size)
    lib.pim_axis_table(n_in, n_out, kind, start, count, ffi.from_buffer(table), size)
    return bytes(table)


def _check_axis_request(n_in, n_out, interpolation, start, count) -> tuple[int, int]:
    if interpolation not in _FILTERS:
        raise ValueError(f"interpolation must be one of {sorted(_FILTERS)}, got {interpolation!r}")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"axis sizes must be positive, got {n_in} -> {n_out}")
    count = n_out - start if count is None else count
    if not (0 <= start and 1 <= count and start + count <= n_out):
        raise ValueError(f"window {start}..{start + count} outside the {n_out} outputs")
    if n_in == n_out and (start, count) != (0, n_out):
        raise ValueError("a window of an axis that is not resampled is a crop of the box")
    return count, INTERPOLATIONS[interpolation]


def reference_axis_table(n_in: int, n_out: int, interpolation: str = "bilinear",
                         start: int = 0, count: Optional[int] = None) -> bytes:
    """axis_table from the numpy transcription of torch's steps (axis_weights): the oracle
    the C builder is tested against."""
    count, _ = _check_axis_request(n_in, n_out, interpolation, start, count)
    header = np.zeros(1, AXIS_DTYPE)
    header["n_in"], header["n_out"] = n_in, count
    if n_in == n_out:  # not resampled (torch skips this pass): header only
        return header.tobytes()
    first, taps_used, w16, precision = axis_weights(n_in, n_out, interpolation)
    first, taps_used, w16 = (a[start:start + count] for a in (first, taps_used, w16))
    taps = -(-w16.shape[1] // 4) * 4
    header["taps"], header["precision"] = taps, precision
    ranges = np.stack([first, taps_used], axis=1).astype("<u4")
    weights = np.zeros((count, taps), "<i2")
    weights[:, :w16.shape[1]] = w16
    raw = weights.tobytes()
    raw += b"\0" * (-len(raw) % 8)
    return header.tobytes() + ranges.tobytes() + raw


# ---- conversion tables ----------------------------------------------------------------

def lut_from_fn(fn: Callable[[torch.Tensor], torch.Tensor], channels: int,
                dtype: torch.dtype) -> np.ndarray:
    """Lookup table of `fn` applied to every uint8 level of every channel: fn receives a
    uint8 tensor [channels, 1, 256] (a 1 x 256 image whose pixels are the levels 0..255) and
    returns a tensor of `dtype` of the same shape. Returns channels x 256 bit patterns."""
    if dtype not in OUT_DTYPES or OUT_DTYPES[dtype][1] is None:
        raise ValueError(f"lookup tables are for float16, bfloat16 and float32, not {dtype}")
    levels = torch.arange(256, dtype=torch.uint8).view(1, 1, 256).repeat(channels, 1, 1)
    values = fn(levels)
    if values.dtype != dtype or tuple(values.shape) != (channels, 1, 256):
        raise ValueError(f"fn returned {values.dtype} {tuple(values.shape)}, expected {dtype} "
                         f"{(channels, 1, 256)}")
    bits = values.contiguous().view(torch.int16 if OUT_DTYPES[dtype][0] == 2 else torch.int32)
    return np.ascontiguousarray(bits.numpy().reshape(channels, 256).view(OUT_DTYPES[dtype][1]))


def normalize_lut(channels: int, dtype: torch.dtype, mean: Optional[Sequence[float]] = None,
                  std: Optional[Sequence[float]] = None, scale: bool = True) -> np.ndarray:
    """Table for torchvision v2 `ToDtype(dtype, scale=scale)` followed, if mean and std are
    given, by `Normalize(mean, std)`, with the same torch operations
    (`to(dtype).mul_(1 / 255)`, then `sub(mean).div_(std)` in `dtype`)."""
    if (mean is None) != (std is None):
        raise ValueError("give both mean and std, or neither")
    if std is not None and not all(std):
        raise ValueError("std evaluated to zero, leading to division by zero.")

    def fn(x: torch.Tensor) -> torch.Tensor:
        x = x.to(dtype)
        if scale:
            x = x.mul_(1.0 / 255)
        if mean is not None:
            m = torch.as_tensor(mean, dtype=dtype).view(-1, 1, 1)
            s = torch.as_tensor(std, dtype=dtype).view(-1, 1, 1)
            x = x.sub(m).div_(s)
        return x

    return lut_from_fn(fn, channels, dtype)


# ---- batches --------------------------------------------------------------------------

@dataclass
class PackedBatch:
    """Everything the kernel reads besides pixels: descriptors and the axis tables."""
    samples: np.ndarray  # SAMPLE_DTYPE [n]
    tables: np.ndarray   # uint8, 8-byte aligned entries
    extras: Optional[np.ndarray] = None  # EXTRA_DTYPE [n]: padding and colour (CPU only)


@lru_cache(maxsize=1)
def torch_fuses_multiply_add() -> bool:
    """Whether torch rounds `x.add_(y, alpha=k)` once (a fused multiply-add), as its
    vectorised CPU kernels do where the CPU has FMA: asked of torch itself, on the blend
    torchvision's colour ops compute."""
    x = torch.arange(256, dtype=torch.uint8)
    y = torch.arange(256, dtype=torch.float32).flip(0).mul_(0.7)
    for ratio in (0.3, 0.55, 1.35):
        fused_or_not = x.mul(ratio).add_(y, alpha=1.0 - ratio).numpy()
        separate = (x.numpy().astype(np.float32) * np.float32(ratio)
                    + np.float32(1.0 - ratio) * y.numpy())
        if not np.array_equal(fused_or_not, separate):
            return True
    return False


def pack_extras(n: int, channels: int, paddings=None, colours=None,
                image_sizes=None, fused_mul_add: Optional[bool] = None):
    """The pim_extra_t records of n samples (None when none pads or adjusts colours), and
    the channel count of their outputs.

    paddings[i]: None or (top, left, bottom, right, mode, fill): the sample's source padded
        by those amounts in `mode` (PAD_MODES; `fill`, per channel, for "constant"), its box
        being in the padded image's coordinates. image_sizes[i] is the unpadded (h, w).
    colours[i]: None or a sequence of ("brightness" | "contrast" | "saturation", factor) and
        ("grayscale", output channels) ops, applied in order after resampling.
    fused_mul_add: None follows torch (`torch_fuses_multiply_add`); False gives torchvision
        v1's arithmetic (products and sums rounded separately)."""
    paddings = [None] * n if paddings is None else list(paddings)
    colours = [None] * n if colours is None else [list(ops) if ops else None for ops in colours]
    if len(paddings) != n or len(colours) != n:
        raise ValueError(f"paddings and colours need one entry per sample ({n})")
    if not any(paddings) and not any(colours):
        return None, channels
    fused = torch_fuses_multiply_add() if fused_mul_add is None else bool(fused_mul_add)
    extras = np.zeros(n, EXTRA_DTYPE)
    out_channels = set()
    for i, (padding, ops) in enumerate(zip(paddings, colours)):
        extra = extras[i]
        if padding is not None:
            _pack_padding(extra, padding, image_sizes[i], channels, i)
        extra["out_channels"] = _pack_colour(extra, ops or [], channels, i)
        extra["fused_mul_add"] = fused
        out_channels.add(int(extra["out_channels"]))
    if len(out_channels) != 1:
        raise ValueError(f"the samples' colour ops leave {sorted(out_channels)} channels; "
                         f"one batch needs one channel count")
    return extras, out_channels.pop()


def _pack_padding(extra, padding, image_size, channels: int, i: int) -> None:
    top, left, bottom, right, mode, fill = padding
    if mode not in PAD_MODES:
        raise ValueError(f"sample {i}: padding mode must be one of {sorted(PAD_MODES)}, "
                         f"got {mode!r}")
    if min(top, left, bottom, right) < 0:
        raise ValueError(f"sample {i}: negative padding {padding[:4]}")
    fill = [int(v) for v in np.broadcast_to(np.asarray(fill, dtype=np.int64), (channels,))]
    if not all(0 <= v <= 255 for v in fill):
        raise ValueError(f"sample {i}: fill {fill} is not uint8")
    extra["pad_mode"] = PAD_MODES[mode]
    extra["image_top"], extra["image_left"] = top, left
    extra["image_h"], extra["image_w"] = image_size
    extra["fill"][:channels] = fill


def _pack_colour(extra, ops, channels: int, i: int) -> int:
    if len(ops) > lib.PIM_MAX_COLOUR_OPS:
        raise ValueError(f"sample {i}: {len(ops)} colour ops, at most "
                         f"{lib.PIM_MAX_COLOUR_OPS} fuse")
    for k, (kind, value) in enumerate(ops):
        if kind not in COLOUR_OPS:
            raise ValueError(f"sample {i}: colour op must be one of {sorted(COLOUR_OPS)}, "
                             f"got {kind!r}")
        op = extra["ops"][k]
        op["kind"] = COLOUR_OPS[kind]
        if kind == "grayscale":
            if value not in (1, 3):
                raise ValueError(f"sample {i}: grayscale to {value} channels (1 or 3)")
            op["channels"] = channels = value
        else:
            if not value >= 0:
                raise ValueError(f"sample {i}: {kind} factor {value} is not non-negative")
            op["factor"] = value
    extra["n_ops"] = len(ops)
    return channels


def _as_hwc(image) -> np.ndarray:
    arr = image.numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] not in (1, 3):
        raise ValueError(f"images must be uint8 HWC (or HW) with 1 or 3 channels, got "
                         f"{arr.dtype} {arr.shape}")
    if arr.strides[2] != 1 or arr.strides[1] != arr.shape[2] or arr.strides[0] < 0:
        arr = np.ascontiguousarray(arr)  # pixels must be interleaved, rows forward
    return arr


def pack_batch(images: Sequence, boxes, size: Sequence[int], *, hflip=None, vflip=None,
               interpolation: str = "bilinear", layout: str = "NCHW",
               out_dtype: torch.dtype = torch.float32,
               windows=None, paddings=None, colours=None,
               fused_mul_add: Optional[bool] = None) -> tuple[PackedBatch, list]:
    """Descriptors for cropping box i = (top, left, height, width) of images[i] (HWC uint8),
    resizing it to size = (out_h, out_w), flipping it and writing it to slot i of an output
    batch of `layout` and `out_dtype`. Returns the packed batch and the HWC arrays.

    windows: None, or per sample (resized_h, resized_w, top, left): resize box i to
    resized_h x resized_w and keep only the `size` window at (top, left) of it (then flip),
    as torchvision's Resize followed by a crop computes it.

    paddings, colours, fused_mul_add: see `pack_extras` (CPU kernel only). With padding, a
    box is in the coordinates of the padded image."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {sorted(INTERPOLATIONS)}, "
                         f"got {interpolation!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"output dtype must be one of {list(OUT_DTYPES)}, got {out_dtype}")
    out_h, out_w = (int(v) for v in size)
    if out_h < 1 or out_w < 1:
        raise ValueError(f"output size must be positive, got {size}")
    arrays = [_as_hwc(im) for im in images]
    n = len(arrays)
    boxes = np.asarray(boxes, dtype=np.int64).reshape(n, 4).tolist()
    hflip = [False] * n if hflip is None else [bool(f) for f in np.broadcast_to(hflip, (n,))]
    vflip = [False] * n if vflip is None else [bool(f) for f in np.broadcast_to(vflip, (n,))]
    esize = OUT_DTYPES[out_dtype][0]
    channels = arrays[0].shape[2] if n else 0
    extras, out_channels = pack_extras(n, channels, paddings, colours,
                                       [a.shape[:2] for a in arrays], fused_mul_add)
    slot_bytes = out_h * out_w * out_channels * esize
    nhwc = lib.PIM_FLAG_NHWC if layout == "NHWC" else 0

    chunks: list = []
    table_at: dict = {}
    used = 0

    def table(n_in: int, n_out: int, start: int, count: int) -> int:
        nonlocal used
        key = (n_in, n_out, start, count)
        at = table_at.get(key)
        if at is None:
            raw = axis_table(n_in, n_out, interpolation, start, count)
            at = table_at[key] = used
            chunks.append(raw)
            used += len(raw)
        return at

    # the per-sample fields of pim_sample_t, named in _PER_SAMPLE (the others are the batch's)
    rows = []
    windows = [None] * n if windows is None else list(windows)
    for i, (arr, (top, left, h, w)) in enumerate(zip(arrays, boxes)):
        ih, iw, c = arr.shape
        if extras is not None and extras[i]["pad_mode"]:
            ih, iw = _padded_size(ih, iw, paddings[i])
        y_axis, top, h = _windowed_axis(top, h, out_h, windows[i], 0)
        x_axis, left, w = _windowed_axis(left, w, out_w, windows[i], 1)
        if c != channels:
            raise ValueError(f"image {i} has {c} channels, image 0 has {channels}")
        if h < 1 or w < 1 or top < 0 or left < 0 or top + h > ih or left + w > iw:
            raise ValueError(f"image {i}: crop box top={top} left={left} height={h} width={w} "
                             f"is not inside the {ih}x{iw} image (give `paddings` for "
                             f"a box in a padded image)")
        flags = (lib.PIM_FLAG_HFLIP if hflip[i] else 0) | (lib.PIM_FLAG_VFLIP if vflip[i] else 0)
        rows.append((i * slot_bytes, table(*x_axis), table(*y_axis), ih, iw, arr.strides[0], top,
                     left, h, w, nhwc | flags))
    samples = np.zeros(n, SAMPLE_DTYPE)  # src_offset 0: each sample's source is its own array
    columns = np.array(rows, dtype=np.int64).reshape(n, len(_PER_SAMPLE))
    for k, name in enumerate(_PER_SAMPLE):
        samples[name] = columns[:, k]
    samples["out_h"], samples["out_w"] = out_h, out_w
    samples["channels"], samples["out_esize"] = channels, esize
    samples["interp"] = INTERPOLATIONS[interpolation]
    tables = np.frombuffer(b"".join(chunks) or b"\0" * 8, np.uint8)
    return PackedBatch(samples, tables, extras), arrays


_PER_SAMPLE = ("dst_offset", "xtab_offset", "ytab_offset", "src_h", "src_w", "src_stride", "crop_top",
               "crop_left", "crop_h", "crop_w", "flags")


def _padded_size(height: int, width: int, padding) -> tuple[int, int]:
    top, left, bottom, right = padding[:4]
    return height + top + bottom, width + left + right


def _windowed_axis(start: int, length: int, out: int, window, axis: int):
    """(table arguments, box start, box length) for one axis of a sample.

    A window of a resampled axis is a slice of that axis' table; a window of an axis that
    is not resampled is simply a narrower crop box."""
    if window is None:
        return (length, out, 0, out), start, length
    resized, offset = window[axis], window[2 + axis]
    if length == resized:
        return (out, out, 0, out), start + offset, out
    return (length, resized, offset, out), start, length


def out_address(out) -> tuple[int, int]:
    """(address, byte length) of a C-contiguous CPU torch tensor or writeable numpy array."""
    if isinstance(out, torch.Tensor):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("out must be a contiguous CPU tensor")
        return out.data_ptr(), out.numel() * out.element_size()
    if isinstance(out, np.ndarray):
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writeable C-contiguous array")
        return out.ctypes.data, out.nbytes
    raise TypeError(f"out must be a torch.Tensor or numpy.ndarray, not {type(out).__name__}")


def _out_pointer(out) -> tuple:
    """(cffi uint8_t *, byte length) of `out` (see out_address)."""
    address, nbytes = out_address(out)
    return ffi.cast("uint8_t *", address), nbytes


def _address(array: np.ndarray):
    """A cffi uint8_t * to array's first element (kept valid by the caller's reference)."""
    if array.flags.c_contiguous:
        return ffi.cast("uint8_t *", ffi.from_buffer(array))
    return ffi.cast("uint8_t *", array.ctypes.data)


def run_packed(packed: PackedBatch, arrays: Sequence[np.ndarray], out,
               lut: Optional[np.ndarray] = None) -> None:
    """Run the kernel over a packed batch; out is the whole output batch (contiguous). The C
    code checks every descriptor and table against the buffers before writing anything."""
    samples, tables = packed.samples, packed.tables
    n = len(samples)
    if len(arrays) != n:
        raise ValueError(f"{len(arrays)} images for {n} descriptors")
    if n == 0:
        return
    if samples.dtype != SAMPLE_DTYPE or not samples.flags.c_contiguous:
        samples = np.ascontiguousarray(samples, dtype=SAMPLE_DTYPE)
    if tables.dtype != np.uint8 or not tables.flags.c_contiguous:
        tables = np.ascontiguousarray(tables, dtype=np.uint8)
    dst, dst_bytes = _out_pointer(out)
    srcs = ffi.new("uint8_t *[]", [_address(a) for a in arrays])
    src_bytes = ffi.new("uint64_t[]", [(a.shape[0] - 1) * a.strides[0] + a.shape[1] * a.shape[2]
                                       for a in arrays])
    extras = packed.extras
    extras_ptr = ffi.NULL
    if extras is not None:
        extras = np.ascontiguousarray(extras, dtype=EXTRA_DTYPE)
        if len(extras) != n:
            raise ValueError(f"{len(extras)} extras for {n} descriptors")
        extras_ptr = ffi.cast("pim_extra_t *", ffi.from_buffer(extras))
    channels = int(samples[0]["channels"] if extras is None else extras[0]["out_channels"])
    lut_ptr = ffi.NULL
    if lut is not None:
        lut = np.ascontiguousarray(lut)
        need = 256 * channels * int(samples[0]["out_esize"])
        if lut.nbytes < need:
            raise ValueError(f"lookup table of {lut.nbytes} bytes, {need} needed")
        lut_ptr = ffi.cast("void *", ffi.from_buffer(lut))
    err = ffi.new("char[]", 512)
    rc = lib.pim_cpu_crop_resize(ffi.cast("pim_sample_t *", ffi.from_buffer(samples)),
                                 extras_ptr, n, srcs, src_bytes, ffi.cast("uint8_t *", ffi.from_buffer(tables)),
                                 tables.nbytes, lut_ptr, dst, dst_bytes, err, 512)
    if rc == -1:
        raise MemoryError(ffi.string(err).decode())
    if rc != 0:
        raise ValueError(f"fused crop/resize kernel: {ffi.string(err).decode()}")


def resized_crop_batch(images: Sequence, boxes, size: Sequence[int], out, *, hflip=None,
                       vflip=None, interpolation: str = "bilinear", layout: str = "NCHW",
                       lut: Optional[np.ndarray] = None, windows=None, paddings=None,
                       colours=None, fused_mul_add: Optional[bool] = None):
    """Fused torchvision-v2 `resized_crop` (antialias=True) + flips + conversion, for a batch.

    images  sequence of uint8 HWC (or HW) arrays/tensors, 1 or 3 channels, all alike
    boxes   [n, 4] crop boxes (top, left, height, width), inside their images
    size    (out_h, out_w)
    out     contiguous batch to fill: [n, C, out_h, out_w] (NCHW) or [n, out_h, out_w, C]
            (NHWC), torch tensor or numpy array, dtype uint8, float16, bfloat16 or float32
    lut     for float outputs: `normalize_lut(...)` / `lut_from_fn(...)` of that dtype
    paddings, colours, fused_mul_add: padding of the sources and colour ops (`pack_extras`);
            C is then the channel count after the colour ops
    Returns out."""
    packed, arrays, lut = checked_batch(
        images, boxes, size, out, hflip=hflip, vflip=vflip, interpolation=interpolation,
        layout=layout, lut=lut, windows=windows, paddings=paddings, colours=colours,
        fused_mul_add=fused_mul_add)
    run_packed(packed, arrays, out, lut)
    return out


def checked_batch(images: Sequence, boxes, size: Sequence[int], out, *, hflip=None,
                  vflip=None, interpolation: str = "bilinear", layout: str = "NCHW",
                  lut: Optional[np.ndarray] = None, windows=None, paddings=None, colours=None,
                  fused_mul_add: Optional[bool] = None):
    """(packed batch, HWC sources, lookup table) for `resized_crop_batch`'s arguments,
    every argument checked against `out` (its dtype, shape and the table it needs): what
    every backend runs."""
    if isinstance(out, torch.Tensor):
        dtype = out.dtype
    else:
        dtype = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float16): torch.float16,
                 np.dtype(np.float32): torch.float32}.get(np.asarray(out).dtype)
    if dtype not in OUT_DTYPES:
        raise ValueError(f"output dtype must be one of {list(OUT_DTYPES)}, got {out.dtype}")
    packed, arrays = pack_batch(images, boxes, size, hflip=hflip, vflip=vflip,
                                interpolation=interpolation, layout=layout, out_dtype=dtype,
                                windows=windows, paddings=paddings, colours=colours,
                                fused_mul_add=fused_mul_add)
    n = len(arrays)
    c = arrays[0].shape[2] if n else 0
    if packed.extras is not None:
        c = int(packed.extras[0]["out_channels"])
    oh, ow = (int(v) for v in size)
    want = (n, c, oh, ow) if layout == "NCHW" else (n, oh, ow, c)
    if n and tuple(out.shape) != want:
        raise ValueError(f"out has shape {tuple(out.shape)}, {layout} batch needs {want}")
    if dtype == torch.uint8:
        if lut is not None:
            raise ValueError("uint8 output takes no lookup table")
    else:
        want_lut = OUT_DTYPES[dtype][1]
        if lut is None or lut.dtype != want_lut or lut.shape != (c, 256):
            raise ValueError(f"{dtype} output needs a [{c}, 256] {np.dtype(want_lut)} lookup "
                             f"table (normalize_lut / lut_from_fn)")
        lut = np.ascontiguousarray(lut)
    return packed, arrays, lut


def check_mul_8x8() -> int:
    """Mismatches between the DPU-style 8x8-bit product and the native one (0 expected)."""
    return int(lib.pim_check_mul_8x8())


__all__ = ["axis_weights", "axis_table", "lut_from_fn", "normalize_lut", "pack_batch",
           "pack_extras", "run_packed", "resized_crop_batch", "PackedBatch", "SAMPLE_DTYPE",
           "AXIS_DTYPE", "EXTRA_DTYPE", "PAD_MODES", "COLOUR_OPS", "check_mul_8x8",
           "torch_fuses_multiply_add"]
