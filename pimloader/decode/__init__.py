"""Step 4 of the flow, decode: encoded bytes -> uint8 HWC pixels.

- `jpeg`: region-of-interest, DCT-scaled and seeking JPEG decodes on libjpeg-turbo (and
  other formats through Pillow), into reused buffers;
- `seekable`: lossless copies of JPEGs (and of whole folders) with restart markers, from
  which a crop decodes alone;
- `encode`: JPEG encoding with libjpeg's every option (tests, dataset makers).
"""
from .encode import encode_jpeg
from .jpeg import *  # noqa: F401,F403  (the decoders, listed in jpeg.__all__)
from .jpeg import __all__ as _decoders
from .seekable import SeekableCopy, SeekInfo, add_restart_markers, make_seekable, seek_info

__all__ = [*_decoders, "encode_jpeg", "SeekInfo", "seek_info", "add_restart_markers",
           "SeekableCopy", "make_seekable"]
