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
The tables are computed in tables.py and the structs' numpy mirrors are in structs.py; this
module re-exports both, as the one Python API of the kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np
import torch

from .structs import (AXIS_DTYPE, COLOUR_OP_DTYPE, COLOUR_OPS, EXTRA_DTYPE,  # noqa: F401
                      INTERPOLATIONS, LAYOUTS, OUT_DTYPES, PAD_MODES, SAMPLE_DTYPE, ffi, lib)
from .outputs import out_address, out_pointer, out_span, output_pitch  # noqa: F401
from .tables import (axis_table, axis_weights, lut_from_fn, normalize_lut,  # noqa: F401
                     reference_axis_table)
from . import torch_loops


# ---- batches --------------------------------------------------------------------------

@dataclass
class PackedBatch:
    """Everything the kernel reads besides pixels: descriptors and the axis tables."""
    samples: np.ndarray  # SAMPLE_DTYPE [n]
    tables: np.ndarray   # uint8, 8-byte aligned entries
    extras: Optional[np.ndarray] = None  # EXTRA_DTYPE [n]: padding and colour (CPU only)
    out_strides: Optional[tuple] = None  # element strides of a strided output (CPU only);
                                         # None: a contiguous one


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


@lru_cache(maxsize=1)
def torch_sum_lanes() -> int:
    """The vector width (floats) of torch's CPU float32 sum, asked of torch itself: the one
    whose cascade (`lib.pim_torch_sum_u8`) gives torch.sum's results on probes where the
    widths disagree; 0 (the kernel then sums exactly) if none does."""
    rng = np.random.default_rng(0)
    probes = [rng.integers(0, 256, 187_507, dtype=np.uint8) for _ in range(6)]
    threads = torch.get_num_threads()
    sums = [torch.from_numpy(probe).to(torch.float32).sum().item() for probe in probes]
    for lanes in (8, 16, 4):
        if all(lib.pim_torch_sum_u8(ffi.from_buffer(probe), len(probe), threads, lanes) == sum_
               for probe, sum_ in zip(probes, sums)):
            return lanes
    return 0


def pack_extras(n: int, channels: int, paddings=None, colours=None,
                image_sizes=None, fused_mul_add: Optional[bool] = None,
                source_colours=None, colour_v1: bool = False, torch_layouts=None):
    """The pim_extra_t records of n samples (None when none pads or adjusts colours), and
    the channel count of their outputs.

    paddings[i]: None or (top, left, bottom, right, mode, fill): the sample's source padded
        by those amounts in `mode` (PAD_MODES; `fill`, per channel, for "constant"), its box
        being in the padded image's coordinates. image_sizes[i] is the unpadded (h, w).
    colours[i]: None or a sequence of colour ops, applied in order after resampling:
        ("brightness" | "contrast" | "saturation", factor >= 0), ("hue", -0.5..0.5),
        ("grayscale", output channels) and ("permute", (c0, c1, c2)) (output channel k is
        input channel ck).
    source_colours[i]: None or colour ops applied before padding and resampling, to the
        decoded image (contrast takes the mean of the whole image; padding is not coloured).
    fused_mul_add: None follows torch (`torch_fuses_multiply_add`); False gives torchvision
        v1's arithmetic (products and sums rounded separately).
    colour_v1: torchvision v1's colour arithmetic (no fused multiply-adds, v1's hue).
    torch_layouts[i]: None or (source, resampled), each "CHW" or "HWC": the memory order of
        the tensor torchvision's colour ops would get, before resampling (the decoded image)
        and after; None is ("CHW", "CHW"). torch rounds some values of its loops differently
        by their place (csrc/include/pim_torch_loops.h). "HWC" (channels-last) is what
        pil_to_tensor / ToImage give, and what resize gives for such an image when the
        crop spans its full width; decode_image and most resized crops give "CHW"."""
    paddings = [None] * n if paddings is None else list(paddings)
    colours = _per_sample(colours, n, "colours")
    source_colours = _per_sample(source_colours, n, "source_colours")
    layouts = _torch_layouts(torch_layouts, n)
    if len(paddings) != n:
        raise ValueError(f"paddings need one entry per sample ({n})")
    if not any(paddings) and not any(colours) and not any(source_colours):
        return None, channels
    if colour_v1:
        fused_mul_add = False
    fused = torch_fuses_multiply_add() if fused_mul_add is None else bool(fused_mul_add)
    extras = np.zeros(n, EXTRA_DTYPE)
    out_channels = set()
    for i, (padding, source, ops) in enumerate(zip(paddings, source_colours, colours)):
        extra = extras[i]
        if padding is not None:
            _pack_padding(extra, padding, image_sizes[i], channels, i)
        out = _pack_colour(extra, source + ops, channels, i)
        extra["n_source_ops"] = len(source)
        extra["out_channels"] = out
        extra["fused_mul_add"] = fused
        extra["hue_v1"] = bool(colour_v1)
        extra["sum_lanes"] = torch_sum_lanes()
        extra["sum_threads"] = torch.get_num_threads()  # this process's, where torch would run
        extra["torch_layout"] = layouts[i]
        out_channels.add(int(out))
    if len(out_channels) != 1:
        raise ValueError(f"the samples' colour ops leave {sorted(out_channels)} channels; "
                         f"one batch needs one channel count")
    return extras, out_channels.pop()


def _per_sample(ops, n: int, name: str) -> list:
    ops = [[]] * n if ops is None else [list(sample) if sample else [] for sample in ops]
    if len(ops) != n:
        raise ValueError(f"{name} need one entry per sample ({n})")
    return ops


def _torch_layouts(layouts, n: int) -> list:
    """pim_extra_t's torch_layout per sample (PIM_TORCH_HWC_* bits)."""
    layouts = [None] * n if layouts is None else list(layouts)
    if len(layouts) != n:
        raise ValueError(f"torch_layouts need one entry per sample ({n})")
    bits = []
    for i, pair in enumerate(layouts):
        source, resampled = ("CHW", "CHW") if pair is None else pair
        if source not in ("CHW", "HWC") or resampled not in ("CHW", "HWC"):
            raise ValueError(f"sample {i}: torch layouts {pair!r} are not a pair of "
                             f"'CHW' / 'HWC'")
        bits.append((lib.PIM_TORCH_HWC_SOURCE if source == "HWC" else 0)
                    | (lib.PIM_TORCH_HWC_RESAMPLED if resampled == "HWC" else 0))
    return bits


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
        elif kind == "permute":
            if sorted(int(c) for c in value) != [0, 1, 2]:
                raise ValueError(f"sample {i}: channel order {tuple(value)} is not a "
                                 f"permutation of (0, 1, 2)")
            op["order"] = [int(c) for c in value]
        elif kind == "hue":
            if not -0.5 <= value <= 0.5:
                raise ValueError(f"sample {i}: hue factor {value} is not in [-0.5, 0.5]")
            op["factor"] = value
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
               fused_mul_add: Optional[bool] = None, source_colours=None,
               colour_v1: bool = False, out_strides=None,
               torch_layouts=None) -> tuple[PackedBatch, list]:
    """Descriptors for cropping box i = (top, left, height, width) of images[i] (HWC uint8),
    resizing it to size = (out_h, out_w), flipping it and writing it to slot i of an output
    batch of `layout` and `out_dtype`. Returns the packed batch and the HWC arrays.

    windows: None, or per sample (resized_h, resized_w, top, left): resize box i to
    resized_h x resized_w and keep only the `size` window at (top, left) of it (then flip),
    as torchvision's Resize followed by a crop computes it.

    paddings, colours, fused_mul_add, source_colours, colour_v1, torch_layouts: see
    `pack_extras` (CPU kernel only). With padding, a box is in the coordinates of the padded image.

    out_strides: None for a contiguous output batch, else its element strides (CPU kernel
    only): each sample's slot is then a strided view, e.g. the top-left (C, h, w) corner of
    a (C, H, W) image of a padded batch (`output_pitch`)."""
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
                                       [a.shape[:2] for a in arrays], fused_mul_add,
                                       source_colours, colour_v1, torch_layouts)
    slot_bytes = out_h * out_w * out_channels * esize
    if out_strides is not None:
        output_pitch(out_strides, layout, esize, out_channels)   # checked here, used by run
        slot_bytes = int(out_strides[0]) * esize
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
    strides = None if out_strides is None else tuple(int(v) for v in out_strides)
    return PackedBatch(samples, tables, extras, strides), arrays


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
    pitch = ffi.NULL
    if packed.out_strides is None:
        dst, dst_bytes = out_pointer(out)
    else:
        dst, dst_bytes, pitch = _strided_out(out, packed, channels_of(packed))
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
        torch_loops.install()
    channels = channels_of(packed)
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
                                 tables.nbytes, lut_ptr, dst, dst_bytes, pitch, err, 512)
    if rc == -1:
        raise MemoryError(ffi.string(err).decode())
    if rc != 0:
        raise ValueError(f"fused crop/resize kernel: {ffi.string(err).decode()}")


def channels_of(packed: PackedBatch) -> int:
    """The channel count of a packed batch's outputs (after its colour ops)."""
    extras = packed.extras
    return int(packed.samples[0]["channels"] if extras is None else extras[0]["out_channels"])


def _strided_out(out, packed: PackedBatch, channels: int) -> tuple:
    """(cffi uint8_t *, byte span, pim_out_pitch_t *) of a strided `out` made for `packed`."""
    if not isinstance(out, torch.Tensor) or tuple(out.stride()) != packed.out_strides:
        strides = out.stride() if isinstance(out, torch.Tensor) else None
        raise ValueError(f"out has strides {strides}; the batch was packed for "
                         f"{packed.out_strides}")
    layout = "NHWC" if packed.samples[0]["flags"] & lib.PIM_FLAG_NHWC else "NCHW"
    pitch = ffi.new("pim_out_pitch_t *")
    pitch.row, pitch.plane = output_pitch(out.stride(), layout, out.element_size(), channels)
    address, nbytes = out_span(out)
    return ffi.cast("uint8_t *", address), nbytes, pitch


def resized_crop_batch(images: Sequence, boxes, size: Sequence[int], out, *, hflip=None,
                       vflip=None, interpolation: str = "bilinear", layout: str = "NCHW",
                       lut: Optional[np.ndarray] = None, windows=None, paddings=None,
                       colours=None, fused_mul_add: Optional[bool] = None,
                       source_colours=None, colour_v1: bool = False, torch_layouts=None):
    """Fused torchvision-v2 `resized_crop` (antialias=True) + flips + conversion, for a batch.

    images  sequence of uint8 HWC (or HW) arrays/tensors, 1 or 3 channels, all alike
    boxes   [n, 4] crop boxes (top, left, height, width), inside their images
    size    (out_h, out_w)
    out     batch to fill: [n, C, out_h, out_w] (NCHW) or [n, out_h, out_w, C] (NHWC),
            torch tensor or numpy array, dtype uint8, float16, bfloat16 or float32;
            contiguous, or (a torch tensor) a strided view whose rows are runs of adjacent
            elements, e.g. `padded[:, :, :h, :w]` of a padded batch (its rows are written
            with the view's row and plane pitch; nothing outside the view is touched)
    lut     for float outputs: `normalize_lut(...)` / `lut_from_fn(...)` of that dtype
    paddings, colours, fused_mul_add, source_colours, colour_v1, torch_layouts: padding
            of the sources and colour ops (`pack_extras`); C is then the channel count
            after them
    Returns out."""
    packed, arrays, lut = checked_batch(
        images, boxes, size, out, hflip=hflip, vflip=vflip, interpolation=interpolation,
        layout=layout, lut=lut, windows=windows, paddings=paddings, colours=colours,
        fused_mul_add=fused_mul_add, source_colours=source_colours, colour_v1=colour_v1,
        torch_layouts=torch_layouts)
    run_packed(packed, arrays, out, lut)
    return out


def checked_batch(images: Sequence, boxes, size: Sequence[int], out, *, hflip=None,
                  vflip=None, interpolation: str = "bilinear", layout: str = "NCHW",
                  lut: Optional[np.ndarray] = None, windows=None, paddings=None, colours=None,
                  fused_mul_add: Optional[bool] = None, source_colours=None,
                  colour_v1: bool = False, torch_layouts=None):
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
    strided = isinstance(out, torch.Tensor) and out.numel() and not out.is_contiguous()
    packed, arrays = pack_batch(images, boxes, size, hflip=hflip, vflip=vflip,
                                interpolation=interpolation, layout=layout, out_dtype=dtype,
                                windows=windows, paddings=paddings, colours=colours,
                                fused_mul_add=fused_mul_add, source_colours=source_colours,
                                colour_v1=colour_v1, torch_layouts=torch_layouts,
                                out_strides=out.stride() if strided else None)
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
           "torch_fuses_multiply_add", "torch_sum_lanes"]
