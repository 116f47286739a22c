"""The DPU JPEG decoder's statuses (include/pim_jpeg.h's pim_jpeg_status_t): what each code
means, which are errors of the kernel (a DpuKernelError naming the DPU), which are errors of a
file's data (a DecodeError naming the file), and RANGE: not an error, a file whose blocks
leave the range where libjpeg-turbo's C and SIMD IDCTs agree, which the host then decodes
(`host_decode`, counted as the decode fallback `RANGE_REASON`; docs/dpu.md "Exact on every
file it takes").
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pimloader.decode import decode_jpeg
from pimloader.decode.errors import DecodeError, _fail
from pimloader.errors import DpuKernelError

STATUS_OK = 0x600D600D
STATUS = np.dtype([(f, "<u4") for f in ("code", "batch_id", "interval", "detail", "mcus", "blocks",
                                         "ac_coefficients", "entropy_bytes")])
WORK_FIELDS = ("mcus", "blocks", "ac_coefficients", "entropy_bytes")

KERNEL_ERRORS = {   # pim_jpeg_status_t.code: PIM_JPEG_ERR_HEADER (1) to PIM_JPEG_ERR_RANGE (10)
    1: "the chunk's header is invalid", 2: "the kernel was built for other NR_TASKLETS or stack",
    3: "an image descriptor, interval or table is invalid",
    4: "bad Huffman code", 5: "a block's coefficients run past the 64th",
    6: "the data ended inside an MCU", 7: "the data goes on past the interval's last MCU",
    8: "a marker inside a restart interval", 9: "one MCU or row segment does not fit WRAM",
    10: "a block leaves the range where libjpeg-turbo's C and SIMD IDCTs agree",
}
DATA_ERRORS = (4, 5, 6, 7, 8)   # errors of a file's data: a DecodeError naming the file
RANGE = 10                      # not an error: the host decodes the image
RANGE_REASON = "idct range"     # its decode_fallbacks reason
ERROR_NAMES = ("HEADER", "BUILD", "IMAGE", "HUFFMAN", "COEFFICIENTS", "SHORT", "LONG", "MARKER", "WRAM", "RANGE")


def _describe(code: int, detail: int) -> str:
    """An image status as words: the error, and where (its detail field)."""
    what = KERNEL_ERRORS.get(code, f"status 0x{code:x}")
    if code == 7:
        return f"{what} ({detail} bits unused)"
    return f"{what} at MCU {detail}" if code in DATA_ERRORS else f"{what} (detail {detail})"


def image_status(statuses: np.ndarray, k: Optional[int], batch_id: int) -> np.ndarray:
    """The chunk's status (k None) or image k's, from a DPU's gathered status block."""
    at = 0 if k is None else (k + 1) * STATUS.itemsize
    return statuses[at:at + STATUS.itemsize].view(STATUS)[0]


def check_status(status, batch_id: int, dpu: int, names: Sequence, image: bool):
    """Raises DpuKernelError unless the kernel wrote `status` in batch `batch_id` and it is
    OK or (an image's) an error of the file's data (codes 4..8) or RANGE; returns it."""
    code = int(status["code"])
    data_error = image and (code in DATA_ERRORS or code == RANGE)
    if (code != STATUS_OK and not data_error) or int(status["batch_id"]) != batch_id:
        what = KERNEL_ERRORS.get(code, f"no status written (code 0x{code:x})")
        listed = ", ".join(str(name) for name in names)
        raise DpuKernelError(f"JPEG kernel on DPU {dpu} ({'images ' + listed if listed else 'no images'}): {what} "
                             f"(detail {int(status['detail'])})", code, dpu)
    return status


def host_decode(image) -> np.ndarray:
    """The prepared image's box decoded on the host, shaped as the kernel's output: what an
    image the kernel stopped for RANGE becomes (a DecodeError naming it if corrupt)."""
    pixels = decode_jpeg(image.data, image.box, channels=None, name=image.name)
    return pixels if image.channels == 3 else pixels.reshape(pixels.shape[:2])


def data_error(status, name, dpu: int) -> Optional[DecodeError]:
    """The DecodeError naming the file of an image status that is an error of its data
    (None for OK and RANGE)."""
    code = int(status["code"])
    if code in (STATUS_OK, RANGE):
        return None
    return _fail(name, f"DPU decoder: {_describe(code, int(status['detail']))} in restart interval "
                       f"{int(status['interval'])} (DPU {dpu})")


__all__ = ["STATUS", "STATUS_OK", "WORK_FIELDS", "KERNEL_ERRORS", "DATA_ERRORS", "RANGE", "RANGE_REASON",
           "ERROR_NAMES", "image_status", "check_status", "data_error", "host_decode"]
