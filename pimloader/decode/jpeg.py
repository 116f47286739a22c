"""Image decoding for pimloader: JPEG in native code (libjpeg-turbo), other formats by Pillow.

JPEGs are decoded by `pimloader._jpeg` (csrc/jpeg_decode.c) on the system libjpeg-turbo:

- straight into a caller's uint8 HWC buffer (`out=`: a numpy array or CPU tensor, e.g. a
  slot of a staging buffer; rows may be strided, pixels must be packed);
- over a region of interest only (`box=(top, left, height, width)`): the rows above the box
  are skipped (`jpeg_skip_scanlines`), the columns outside it are not transformed
  (`jpeg_crop_scanline`, widened to iMCU boundaries plus one column of upsampling context)
  and decoding stops after the box's last row.  The result is bit-identical to decoding the
  whole image and cropping (tests/test_decode.py checks this).  Progressive JPEGs work as
  well; libjpeg entropy-decodes all their scans up front, so for them a box saves only the
  IDCT, upsampling and colour conversion outside it;
- into a caller's reusable buffer with the decoded margin columns kept, the box returned
  as a strided view (`decode_jpeg_into`, what the loader uses: nothing is copied out);
- from the restart intervals around the box only, when the file has restart markers at a
  suitable interval (`add_restart_markers` writes such a copy losslessly, `seek_info`
  tells): bit-identical too, and the rows above the box are not entropy-decoded;
- at a reduced DCT scale M/8 (`decode_jpeg_scaled`): each 8x8 block is inverse-transformed
  straight to MxM pixels, which is much cheaper than decoding at full size and shrinking.
  The pixels differ slightly from a full decode followed by a resize, so it is an option
  for random training crops, not for deterministic pipelines (see `pick_scale`).

Colour: YCbCr/RGB JPEGs give RGB; greyscale JPEGs give RGB (`channels=3`, the default) or
one channel (`channels=1`, or `channels=None` for "native"); CMYK and YCCK JPEGs are
converted to RGB exactly as Pillow's `Image.open(...).convert("RGB")` does (Pillow, and
this module, assume Adobe's inverted CMYK polarity).  EXIF orientation is not applied
(neither Pillow's convert nor torchvision's ImageFolder applies it).  The DCT method is
libjpeg's accurate integer IDCT with fancy upsampling, Pillow's and torchvision's defaults,
so that full decodes match Pillow's bit for bit where both use libjpeg-turbo.

Errors: libjpeg's fatal errors come back as `DecodeError` (a ValueError) whose message names
the sample (`name=`) and gives libjpeg's message.  With `strict=True` (the default) data
that decodes only partly is an error too: a file cut short inside its image data ("Premature
end of JPEG file (Corrupt JPEG data: premature end of data segment)"), a progressive file
missing scans, corrupt entropy data (bad Huffman code, lost restart markers) - where
libjpeg itself only warns and fills the missing blocks with grey.  A file that lacks just its
final EOI marker, with all its data present, is not an error.  In strict mode a file with
no EOI marker after its image data is always decoded whole, even for a small box, so that
truncation below the box is found too (data appended after the EOI, such as a preview, is
fine); damage elsewhere inside a complete file can go
unnoticed when a box does not need the damaged part (the box's pixels are then exactly
right).  With `strict=False`, lost data gives a `DecodeWarning` and the grey-filled image.

Other formats (PNG, ...) go through Pillow: `Image.open(...)`, crop, `convert("RGB")` (or
"L"), with failures raised as the same `DecodeError`; `strict` does not apply to them
(Pillow raises for truncated files unless `ImageFile.LOAD_TRUNCATED_IMAGES` is set).

Decompression bombs: as Pillow, an image whose header promises more than
`MAX_IMAGE_PIXELS` pixels (width x height) gets a `DecompressionBombWarning`, and one of
more than twice as many is refused with a `DecompressionBombError` (a DecodeError naming the
file, the pixel count and the limit), read from the header before anything is allocated
for decoding it: a 30 kB JPEG claiming 60000x60000 pixels would otherwise make the decoder
ask for about 10 GiB (21 GiB of coefficients for a progressive one). Every entry point
applies it (`image_size`, the decoders, `add_restart_markers`; the Pillow path by Pillow's
own check). The limit *is* Pillow's setting, `PIL.Image.MAX_IMAGE_PIXELS` (89,478,485 unless
changed): `pimloader.decode.MAX_IMAGE_PIXELS` reads and sets that same value (an int, or
None for no limit). One setting, not two, because torchvision's image folders decode with
Pillow, so code that raises or lifts Pillow's limit for its large images loads them the
same way here, and PNGs (decoded by Pillow, which checks its own setting) cannot disagree
with JPEGs. PIMDataLoader hands the value in force when an epoch starts to its workers
(under spawn and forkserver too, which would otherwise start from Pillow's default).

Threads: cffi calls in API mode release the GIL for the duration of the C call (cffi's
documentation: "C function calls are done with the GIL released"), and each call owns its
libjpeg state, so several threads can decode at once.
"""
from __future__ import annotations

import io
import warnings
from typing import Any, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pimloader._jpeg import ffi, lib

from .dct_scale import _check_scale, pick_scale, scaled_size
from .errors import (DecodeError, DecodeWarning, DecompressionBombError,  # noqa: F401
                     DecompressionBombWarning, _bomb_error, _check_pixels, _describe, _fail,
                     _max_pixels, _pixel_limit, _translate_pillow_bomb, _warn_if_large)

__all__ = [
    "DecodeError", "DecodeWarning", "DecompressionBombError", "DecompressionBombWarning",
    "JpegHeader", "ScaledImage",
    "is_jpeg", "read_header", "image_size", "scaled_size", "scaled_region", "pick_scale",
    "decode_jpeg", "decode_jpeg_into", "decode_jpeg_scaled", "decode_image",
    "decode_image_scaled",
]

Box = Tuple[int, int, int, int]  # (top, left, height, width), as torchvision's crop params

# libjpeg's J_COLOR_SPACE values (jpeglib.h)
_JCS = {0: "UNKNOWN", 1: "GRAY", 2: "RGB", 3: "YCbCr", 4: "CMYK", 5: "YCCK"}
_JCS_VALUE = {v: k for k, v in _JCS.items()}
_GREY_PIL_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


class JpegHeader(NamedTuple):
    height: int
    width: int
    components: int        # 1, 3 or 4
    colorspace: str        # "GRAY", "YCbCr", "RGB", "CMYK", "YCCK" or "UNKNOWN"
    progressive: bool


class ScaledImage(NamedTuple):
    """A DCT-scaled decode: `image` at `scale`/8 of full size, covering at least the
    requested box, which lies at `box` = (top, left, height, width) in `image`'s pixel
    coordinates (fractional: resample from exactly this box)."""
    image: Any
    scale: int
    box: Tuple[float, float, float, float]

    def int_box(self) -> Box:
        """`box` rounded to whole pixels (for resamplers that take integer crops)."""
        top, left, height, width = self.box
        img_h, img_w = self.image.shape[:2]
        y0 = min(max(int(round(top)), 0), img_h - 1)
        x0 = min(max(int(round(left)), 0), img_w - 1)
        y1 = min(max(int(round(top + height)), y0 + 1), img_h)
        x1 = min(max(int(round(left + width)), x0 + 1), img_w)
        return (y0, x0, y1 - y0, x1 - x0)


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------
def _as_bytes_like(data):
    """bytes / bytearray / memoryview / 1-D uint8 array or CPU tensor -> a buffer."""
    if hasattr(data, "numpy") and not isinstance(data, np.ndarray):  # torch.Tensor
        data = data.numpy()
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            data = data.view(np.uint8)
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        return data.reshape(-1)
    return data


def _buffer(data, name=None):
    data = _as_bytes_like(data)
    size = len(memoryview(data).cast("B"))
    if size == 0:
        raise _fail(name, "empty data (0 bytes)")
    return data, ffi.from_buffer("uint8_t[]", data), size


_SOI_THEN_MARKER = b"\xff\xd8\xff"


def is_jpeg(data) -> bool:
    """True when the data starts with a JPEG SOI marker followed by another marker."""
    if type(data) is bytes:   # (the loader asks several times a sample: bytes and
        return data[:3] == _SOI_THEN_MARKER   # byte memoryviews without a cast)
    if type(data) is memoryview and data.itemsize == 1 and data.ndim == 1:
        return data[:3].tobytes() == _SOI_THEN_MARKER
    return bytes(memoryview(_as_bytes_like(data)).cast("B")[:3]) == _SOI_THEN_MARKER


def _check_box(box, height: int, width: int) -> Box:
    top, left, h, w = (int(v) for v in box)
    if h < 1 or w < 1 or top < 0 or left < 0 or top + h > height or left + w > width:
        raise ValueError(f"box (top, left, height, width) = {tuple(box)} is not inside the "
                         f"{height}x{width} image")
    return top, left, h, w


def _prepare_out(out, shape: Tuple[int, int, int]):
    """-> (numpy view to write, object to return). Pixels packed, rows may be strided."""
    if out is None:
        array = np.empty(shape, np.uint8)
        return array, array
    if hasattr(out, "numpy") and not isinstance(out, np.ndarray):  # torch.Tensor (CPU)
        array = out.detach().numpy()
    elif isinstance(out, np.ndarray):
        array = out
    else:
        raise TypeError(f"out must be a numpy array or a CPU tensor, not {type(out).__name__}")
    if array.dtype != np.uint8:
        raise ValueError(f"out must be uint8, not {array.dtype}")
    if array.ndim == 2 and shape[2] == 1:
        array = array[:, :, None]
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(array.shape)}, the decoded box needs {shape}")
    if not array.flags.writeable:
        raise ValueError("out is read-only")
    row, pixel, channel = array.strides  # strides of length-1 axes do not matter
    if ((channel != 1 and shape[2] > 1) or (pixel != shape[2] and shape[1] > 1)
            or (row < shape[1] * shape[2] and shape[0] > 1)):
        raise ValueError("out must have packed pixels (strides (row, channels, 1)), "
                         f"not strides {array.strides}")
    return array, out


def _row_stride(array: np.ndarray) -> int:
    return array.strides[0] if array.shape[0] > 1 else array.shape[1] * array.shape[2]


def _pointer(array: np.ndarray):
    if array.flags.c_contiguous:   # (a tenth of the time of asking numpy for the address)
        return ffi.cast("uint8_t *", ffi.from_buffer(array, require_writable=True))
    return ffi.cast("uint8_t *", array.__array_interface__["data"][0])


# --------------------------------------------------------------------------------------
# Header, sizes, scale choice
# --------------------------------------------------------------------------------------
def _header_struct(data, name=None):
    """libjpeg's reading of the JPEG's markers (a pl_jpeg_header); DecodeError when they
    cannot be read."""
    data, buf, size = _buffer(data, name)
    hdr = ffi.new("pl_jpeg_header *")
    if lib.pl_jpeg_read_header(buf, size, hdr) != lib.PL_JPEG_OK:
        raise _fail(name, ffi.string(hdr.message).decode(errors="replace"))
    return hdr


def read_header(data, name=None) -> JpegHeader:
    """(height, width, components, colorspace, progressive) of a JPEG, from its markers
    only (no decoding).  Raises DecodeError for data that is not a readable JPEG."""
    hdr = _header_struct(data, name)
    return JpegHeader(hdr.height, hdr.width, hdr.components,
                      _JCS.get(hdr.colorspace, "UNKNOWN"), bool(hdr.progressive))


def image_size(data, name=None, *, warn: bool = True) -> Tuple[int, int]:
    """(height, width) of any image Pillow or libjpeg can read, without decoding pixels.
    As Pillow's Image.open, refuses an image over twice MAX_IMAGE_PIXELS, and warns above
    it (for a JPEG, unless `warn=False`: the loader's decode of the same image warns)."""
    if is_jpeg(data):
        hdr = _header_struct(data, name)   # (no JpegHeader: asked once a sample)
        _check_pixels(name, hdr.height, hdr.width, _pixel_limit(), warn=warn)
        return hdr.height, hdr.width
    from PIL import Image
    try:
        with Image.open(io.BytesIO(bytes(memoryview(_as_bytes_like(data)).cast("B")))) as im:
            width, height = im.size
    except Image.DecompressionBombError as exc:
        raise _translate_pillow_bomb(name, exc) from exc
    except Exception as exc:  # Pillow raises many types for bad data
        raise _fail(name, f"{type(exc).__name__}: {exc}", exc) from exc
    return height, width


def scaled_region(box: Optional[Sequence[int]], scale: int, height: int, width: int):
    """Map a full-resolution box to scale/8.

    Returns (region, frac_box): `region` = (top, left, height, width), the whole pixels
    of the scaled image that cover the box (what a scaled decode writes), and `frac_box`,
    the box in `region`'s coordinates (floats; full-resolution x maps to x * scale / 8).
    """
    sh, sw = scaled_size(height, width, scale)
    top, left, h, w = _check_box(box, height, width) if box is not None else (0, 0, height, width)
    y0, x0 = top * scale // 8, left * scale // 8
    y1 = min(sh, -(-(top + h) * scale // 8))
    x1 = min(sw, -(-(left + w) * scale // 8))
    f = scale / 8.0
    return (y0, x0, y1 - y0, x1 - x0), (top * f - y0, left * f - x0, h * f, w * f)


# --------------------------------------------------------------------------------------
# JPEG
# --------------------------------------------------------------------------------------
def _jpeg_call(data, buf, size, region, scale, channels, out, strict, roi, name,
               seek_index=None):
    """Decode `region` (scaled coordinates, or None = whole image) into out; returns
    (returned object, pl_jpeg_result)."""
    if channels not in (None, 1, 3):
        raise ValueError(f"channels must be 3, 1 or None (native), not {channels!r}")
    limit, checked = _pixel_limit(), False
    if region is None or channels != 3:
        hdr = ffi.new("pl_jpeg_header *")
        if lib.pl_jpeg_read_header(buf, size, hdr) != lib.PL_JPEG_OK:
            raise _fail(name, ffi.string(hdr.message).decode(errors="replace"))
        # before the output (the whole image, for region=None) is allocated
        _check_pixels(name, hdr.height, hdr.width, limit, stacklevel=4)
        checked = True
        grey = hdr.colorspace == _JCS_VALUE["GRAY"]
        if channels == 1 and not grey:
            raise ValueError(f"channels=1 needs a greyscale JPEG; {_describe(name)} is "
                             f"{_JCS.get(hdr.colorspace, 'UNKNOWN')}")
        n_channels = 1 if (channels == 1 or (channels is None and grey)) else 3
        if region is None:
            region = (0, 0) + scaled_size(hdr.height, hdr.width, scale)
    else:
        n_channels = 3
    top, left, height, width = region
    array, result = _prepare_out(out, (height, width, n_channels))
    req = ffi.new("pl_jpeg_request *", {
        "scale_num": scale, "top": top, "left": left, "height": height, "width": width,
        "channels": 0 if channels is None else channels, "strict": 1 if strict else 0,
        "roi": 1 if roi else 0, "seek": 1 if roi else 0, "max_pixels": _max_pixels(limit)})
    index = _set_seek_index(req, seek_index)
    res = ffi.new("pl_jpeg_result *")
    stride = _row_stride(array)
    nbytes = (height - 1) * stride + width * n_channels
    rc = lib.pl_jpeg_decode(buf, size, req, _pointer(array), stride, nbytes, res)
    del index
    _check_result(rc, res, name, stacklevel=4, limit=None if checked else limit)
    return result, res


def _set_seek_index(req, seek_index):
    """Points the request at a seek index (None: none); returns what keeps it alive."""
    if seek_index is None:
        return None
    if not isinstance(seek_index, (bytes, bytearray, memoryview)):
        raise TypeError(f"seek_index must be bytes from pimloader.decode.seek_index or None, "
                        f"not {type(seek_index).__name__}")
    index = ffi.from_buffer(seek_index)
    req.seek_index, req.seek_index_size = index, len(index)
    return index


def _check_result(rc: int, res, name, stacklevel: int, limit: Optional[int] = None) -> None:
    """Raise for a failed pl_jpeg_decode; warn when it lost data (strict=False), or (with
    the `limit` it was called with) when the image is over that limit."""
    if rc == lib.PL_JPEG_EBOMB:
        raise _bomb_error(name, res.image_height, res.image_width, limit)
    if rc == lib.PL_JPEG_EARG:
        raise ValueError(f"{_describe(name)}: {ffi.string(res.message).decode(errors='replace')}")
    if rc != lib.PL_JPEG_OK:
        raise _fail(name, ffi.string(res.message).decode(errors="replace"))
    if res.data_lost:
        warnings.warn(f"{_describe(name)}: {ffi.string(res.message).decode(errors='replace')}"
                      " (decoded with strict=False: missing blocks are grey)", DecodeWarning,
                      stacklevel=stacklevel)
    _warn_if_large(name, res.image_height, res.image_width, limit, stacklevel)


def decode_jpeg(data, box: Optional[Sequence[int]] = None, *, channels: Optional[int] = 3,
                out=None, strict: bool = True, roi: bool = True, name=None, seek_index=None):
    """Decode a JPEG (bytes-like, or a 1-D uint8 array/tensor) to a uint8 HWC array.

    box       (top, left, height, width) in pixels: decode only this crop (bit-identical
              to decoding all and cropping); None for the whole image.
    channels  3: RGB (greyscale expanded); 1: one channel (greyscale JPEGs only); None:
              native, 1 for greyscale JPEGs and 3 otherwise.
    out       where to write: a uint8 numpy array or CPU tensor of shape (h, w, channels)
              with packed pixels (rows may be strided); returned as given.
    strict    partly-decodable data (truncated, corrupt entropy data) raises DecodeError;
              False decodes what is there with a DecodeWarning.
    roi       False decodes the whole image and copies the box (the reference path).
    name      names the sample in error messages (a path, "sample 17").
    seek_index  the file's pimloader.decode.seek_index: the box is then decoded from the
              data of the rows around it only (same pixels). An index of other bytes is
              not used.
    """
    data, buf, size = _buffer(data, name)
    region = None
    if box is not None:
        if channels == 3:
            region = tuple(int(v) for v in box)
            if min(region[2:]) < 1 or min(region[:2]) < 0:
                raise ValueError(f"box {tuple(box)} is empty or negative")
        else:
            header = read_header(data, name)
            region = _check_box(box, header.height, header.width)
    return _jpeg_call(data, buf, size, region, 8, channels, out, strict, roi, name,
                      seek_index)[0]


def decode_jpeg_into(data, box: Sequence[int], buffer: np.ndarray, *, channels: int = 3,
                     strict: bool = True, name=None, seek_index=None
                     ) -> Tuple[np.ndarray, np.ndarray]:
    """decode_jpeg of `box` into a caller's reusable `buffer` (1-D uint8), without copying
    the box out of the columns libjpeg decodes around it (iMCU-aligned, plus upsampling
    context): the buffer holds the box's rows at that decoded width, packed, and the box
    is returned as a view with strided rows.  Same pixels as decode_jpeg.

    Returns (box view, buffer): `buffer` itself, or a larger one when it could not hold the
    rows (box height x image width x channels bytes), with room for the whole image; pass
    that one next time. `seek_index`: as decode_jpeg's."""
    if channels not in (1, 3):
        raise ValueError(f"channels must be 3 or 1, not {channels!r}")
    data, buf, size = _buffer(data, name)
    top, left, height, width = (int(v) for v in box)
    if min(height, width) < 1 or min(top, left) < 0:
        raise ValueError(f"box {tuple(box)} is empty or negative")
    limit = _pixel_limit()
    req = ffi.new("pl_jpeg_request *", {
        "scale_num": 8, "top": top, "left": left, "height": height, "width": width,
        "channels": channels, "strict": 1 if strict else 0, "roi": 1, "margin": 1,
        "seek": 1, "max_pixels": _max_pixels(limit)})
    index = _set_seek_index(req, seek_index)
    res = ffi.new("pl_jpeg_result *")
    rc = lib.pl_jpeg_decode(buf, size, req, _pointer(buffer), 0, buffer.nbytes, res)
    needed = height * res.scaled_width * channels
    if rc == lib.PL_JPEG_EARG and needed > buffer.nbytes:  # (a bomb is PL_JPEG_EBOMB)
        # room for any box of this image: a buffer sized to this box alone would be too
        # small again for the next, taller one
        buffer = np.empty(res.scaled_height * res.scaled_width * channels, np.uint8)
        rc = lib.pl_jpeg_decode(buf, size, req, _pointer(buffer), 0, buffer.nbytes, res)
    del index
    _check_result(rc, res, name, stacklevel=3, limit=limit)
    decoded_width = res.decoded_width
    rows = buffer[:height * decoded_width * channels].reshape(height, decoded_width, channels)
    offset = left - res.decoded_left
    return rows[:, offset:offset + width], buffer


def decode_jpeg_scaled(data, box: Optional[Sequence[int]] = None, *,
                       scale: Optional[int] = None, size: Optional[Sequence[int]] = None,
                       min_ratio: float = 2.0, channels: Optional[int] = 3, out=None,
                       strict: bool = True, roi: bool = True, name=None,
                       seek_index=None) -> ScaledImage:
    """Decode a JPEG at a reduced DCT scale, over the pixels a full-resolution `box` needs.

    Give `scale` (M, decode at M/8) or `size` = (out_height, out_width), the size the crop
    will be resampled to: then M = pick_scale(box, size, min_ratio=min_ratio) (8, i.e. an
    exact decode, when the crop is under `min_ratio` times the output size).
    Returns ScaledImage(image, scale, box): `image` covers `scaled_region(...)[0]` and the
    requested box lies at `box` (fractional) inside it.  `out` must have the region's shape.
    `seek_index`: as decode_jpeg's (the same pixels, from the data of the rows around the
    region only).
    """
    data, buf, nbytes = _buffer(data, name)
    header = read_header(data, name)
    full = _check_box(box, header.height, header.width) if box is not None else (
        0, 0, header.height, header.width)
    if scale is None:
        if size is None:
            raise ValueError("give scale or size")
        scale = pick_scale(full[2], full[3], int(size[0]), int(size[1]), min_ratio=min_ratio)
    _check_scale(scale)
    region, frac = scaled_region(full, scale, header.height, header.width)
    image = _jpeg_call(data, buf, nbytes, region, int(scale), channels, out, strict, roi,
                       name, seek_index)[0]
    return ScaledImage(image, int(scale), frac)


# --------------------------------------------------------------------------------------
# Any format
# --------------------------------------------------------------------------------------
def _decode_pil(data, box, channels, out, name):
    from PIL import Image
    if channels not in (None, 1, 3):
        raise ValueError(f"channels must be 3, 1 or None (native), not {channels!r}")
    raw = bytes(memoryview(_as_bytes_like(data)).cast("B"))
    try:
        im = Image.open(io.BytesIO(raw))
    except Image.UnidentifiedImageError as exc:
        raise _fail(name, "unknown image format (not a JPEG, and Pillow cannot identify it)",
                    exc) from exc
    except Image.DecompressionBombError as exc:  # Pillow's check, on its (= our) limit
        raise _translate_pillow_bomb(name, exc) from exc
    except Exception as exc:  # Pillow raises UnidentifiedImageError, OSError, SyntaxError...
        raise _fail(name, f"{type(exc).__name__}: {exc}", exc) from exc
    with im:
        width, height = im.size
        grey = im.mode in _GREY_PIL_MODES
        if channels == 1 and not grey:
            raise ValueError(f"channels=1 needs a greyscale image; {_describe(name)} is "
                             f"{im.mode}")
        crop = None
        if box is not None:
            top, left, h, w = _check_box(box, height, width)
            crop = (left, top, left + w, top + h)
        mode = "L" if (channels == 1 or (channels is None and grey)) else "RGB"
        try:
            # Conversions are per pixel, so cropping first gives convert-then-crop's pixels.
            part = im.crop(crop) if crop is not None else im
            pixels = np.asarray(part.convert(mode))
        except Exception as exc:  # OSError ("image file is truncated"), struct.error, ...
            raise _fail(name, f"{type(exc).__name__}: {exc}", exc) from exc
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if out is None:
        return np.ascontiguousarray(pixels)
    array, result = _prepare_out(out, pixels.shape)
    array[...] = pixels
    return result


def decode_image(data, box: Optional[Sequence[int]] = None, *, channels: Optional[int] = 3,
                 out=None, strict: bool = True, name=None):
    """Decode any image to uint8 HWC: JPEG natively (see decode_jpeg), anything else with
    Pillow (`Image.open`, crop, `convert("RGB")`).  Same arguments as decode_jpeg; every
    decoding failure is a DecodeError naming the sample."""
    if is_jpeg(data):
        return decode_jpeg(data, box, channels=channels, out=out, strict=strict, name=name)
    return _decode_pil(data, box, channels, out, name)


def decode_image_scaled(data, box: Optional[Sequence[int]] = None, *,
                        scale: Optional[int] = None, size: Optional[Sequence[int]] = None,
                        min_ratio: float = 2.0, channels: Optional[int] = 3, out=None,
                        strict: bool = True, name=None) -> ScaledImage:
    """decode_jpeg_scaled for JPEGs; other formats are decoded exactly (scale 8)."""
    if is_jpeg(data):
        return decode_jpeg_scaled(data, box, scale=scale, size=size, min_ratio=min_ratio,
                                  channels=channels, out=out, strict=strict, name=name)
    image = _decode_pil(data, box, channels, out, name)
    shape = image.shape
    return ScaledImage(image, 8, (0.0, 0.0, float(shape[0]), float(shape[1])))
