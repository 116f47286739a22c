"""Step 4 of the flow, decode: encoded bytes -> uint8 HWC pixels, or float32 audio samples.

- `jpeg`: region-of-interest, DCT-scaled and seeking JPEG decodes on libjpeg-turbo (and
  other formats through Pillow), into reused buffers;
- `seekable`: lossless copies of JPEGs (and of whole folders) with restart markers, from
  which a crop decodes alone;
- `audio`: WAV, FLAC and the other formats of libsndfile -> float32 [channels, frames];
- `encode`: JPEG encoding with libjpeg's every option (tests, dataset makers);
- `errors`: DecodeError and the decompression-bomb limit (`MAX_IMAGE_PIXELS`);
- `audio_limits`: what an audio header may ask for (libsndfile's ranges, `MAX_AUDIO_SAMPLES`).
"""
import sys
import types

import numpy as np
from PIL import Image as _PILImage

from . import audio_limits as _audio_limits
from .audio import decode_audio
from .encode import encode_jpeg
from .errors import AudioBombError, AudioBombWarning
from .jpeg import *  # noqa: F401,F403  (the decoders, listed in jpeg.__all__)
from .jpeg import __all__ as _decoders
from .seekable import (SeekableCopy, SeekInfo, add_restart_markers, make_seekable, seek_index,
                       seek_info, seekable_version)

__all__ = [*_decoders, "decode_audio", "encode_jpeg", "SeekInfo", "seek_info", "seek_index",
           "add_restart_markers", "seekable_version", "SeekableCopy", "make_seekable",
           "MAX_IMAGE_PIXELS", "MAX_AUDIO_SAMPLES", "AudioBombError", "AudioBombWarning"]


class _DecodeModule(types.ModuleType):
    """Makes `pimloader.decode.MAX_IMAGE_PIXELS`, the decoders' decompression-bomb limit,
    read and write Pillow's `PIL.Image.MAX_IMAGE_PIXELS`, so that the two names cannot
    disagree (why one setting: `jpeg`'s module doc); and `MAX_AUDIO_SAMPLES`, its audio
    twin (audio_limits.py), checked as it is set."""

    @property
    def MAX_IMAGE_PIXELS(self):  # noqa: N802 - Pillow's name
        return _PILImage.MAX_IMAGE_PIXELS

    @MAX_IMAGE_PIXELS.setter
    def MAX_IMAGE_PIXELS(self, value) -> None:  # noqa: N802
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, np.integer)) or value < 1):
            raise ValueError("MAX_IMAGE_PIXELS must be a positive number of pixels, or None "
                             f"for no limit; got {value!r}")
        _PILImage.MAX_IMAGE_PIXELS = None if value is None else int(value)

    @property
    def MAX_AUDIO_SAMPLES(self):  # noqa: N802 - MAX_IMAGE_PIXELS's twin
        return _audio_limits.sample_limit()

    @MAX_AUDIO_SAMPLES.setter
    def MAX_AUDIO_SAMPLES(self, value) -> None:  # noqa: N802
        _audio_limits.set_sample_limit(value)


sys.modules[__name__].__class__ = _DecodeModule
