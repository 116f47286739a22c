"""The kernels' C structs and constants as numpy sees them, checked against the C build.

Every numpy mirror of a struct of csrc/include (pim_sample_t, pim_axis_t, pim_extra_t, ...)
must have the C struct's fields, in order, at the same offsets and sizes: checked at import
through cffi, so a header edited without this file fails loudly instead of packing garbage.
"""
from __future__ import annotations

import array
import sys

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
COLOUR_OP_DTYPE = np.dtype([("factor", "<f8"), ("kind", "<u4"), ("channels", "u1"),
                            ("order", "u1", (3,))])
EXTRA_DTYPE = np.dtype([
    ("image_top", "<u4"), ("image_left", "<u4"), ("image_h", "<u4"), ("image_w", "<u4"),
    ("pad_mode", "u1"), ("fill", "u1", (3,)), ("n_ops", "u1"), ("fused_mul_add", "u1"),
    ("out_channels", "u1"), ("n_source_ops", "u1"), ("hue_v1", "u1"),
    ("sum_lanes", "u1"), ("torch_layout", "u1"), ("reserved", "u1"), ("sum_threads", "<u4"),
    ("ops", COLOUR_OP_DTYPE, (lib.PIM_MAX_COLOUR_OPS,)),
])
PAD_MODES = {"constant": lib.PIM_PAD_CONSTANT, "edge": lib.PIM_PAD_EDGE,
             "reflect": lib.PIM_PAD_REFLECT, "symmetric": lib.PIM_PAD_SYMMETRIC}
COLOUR_OPS = {"brightness": lib.PIM_COLOUR_BRIGHTNESS, "contrast": lib.PIM_COLOUR_CONTRAST,
              "saturation": lib.PIM_COLOUR_SATURATION, "grayscale": lib.PIM_COLOUR_GRAYSCALE,
              "hue": lib.PIM_COLOUR_HUE, "permute": lib.PIM_COLOUR_PERMUTE}


def _check_layouts() -> None:
    if sys.byteorder != "little" or array.array("I").itemsize != 4:
        raise ImportError("pimloader's kernels need a little-endian host with 32-bit C ints")
    for ctype, dtype in (("pim_sample_t", SAMPLE_DTYPE), ("pim_axis_t", AXIS_DTYPE),
                         ("pim_colour_op_t", COLOUR_OP_DTYPE), ("pim_extra_t", EXTRA_DTYPE)):
        if ffi.sizeof(ctype) != dtype.itemsize:
            raise ImportError(f"{ctype} is {ffi.sizeof(ctype)} bytes in C but "
                              f"{dtype.itemsize} in pimloader.backends.structs: rebuild the extension")
        c_fields = ffi.typeof(ctype).fields
        if [name for name, _ in c_fields] != list(dtype.names):
            raise ImportError(f"{ctype} has fields {[name for name, _ in c_fields]} in C but "
                              f"{list(dtype.names)} in pimloader.backends.structs: rebuild or update it")
        for name, field in c_fields:
            at, size = dtype.fields[name][1], dtype.fields[name][0].itemsize
            if (field.offset, ffi.sizeof(field.type)) != (at, size):
                raise ImportError(f"{ctype}.{name} is {ffi.sizeof(field.type)} bytes at {field.offset} in "
                                  f"C but {size} bytes at {at} in Python")


_check_layouts()
