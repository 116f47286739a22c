"""Random draws and small formulas that DALI has no single operator for, written with DALI's
own arithmetic on its graph nodes (they run inside the DALI pipeline, on its threads).

The DALI peers of the detection and audio benchmarks (peer_dali_detection.py,
peer_dali_audio.py) call these by name in their pipelines and print their source with the
pipeline, so that what runs is what is shown. Importing this module needs DALI.
"""
from __future__ import annotations

import numpy as np
import nvidia.dali.math as dmath
from nvidia.dali import fn, types

# The 3! channel orders as 3x3 matrices on the pixel's (R, G, B): out = M @ in.
CHANNEL_ORDERS = np.array([np.eye(3)[list(order)] for order in
                           [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]],
                          dtype=np.float32)


def maybe(probability, drawn, otherwise):
    """`drawn` with `probability`, else `otherwise`: one coin per sample."""
    coin = fn.random.coin_flip(probability=probability)
    return coin * drawn + (1 - coin) * otherwise


def grey_mean(images):
    """The mean of each image's grey levels (ITU-R 601 weights), the contrast centre of
    torchvision's adjust_contrast."""
    channel = fn.reductions.mean(images, axis_names="HW", dtype=types.FLOAT)
    return 0.299 * channel[0] + 0.587 * channel[1] + 0.114 * channel[2]


def channel_permutation(probability):
    """A channel-order matrix for fn.coord_transform: with `probability` a uniformly drawn
    order of the 6 (identity included, as torch.randperm(3) may give), else identity."""
    stay = 1 - probability + probability / 6
    return fn.random.choice(types.Constant(CHANNEL_ORDERS),
                            p=[stay] + [probability / 6] * 5)


def window(audio, length: int):
    """`length` samples of the clip at a whole-sample offset drawn uniformly: of a longer
    clip, a window starting at 0..excess; a shorter one lands after 0..missing zeros, zeros
    after it too."""
    excess = audio.shape(dtype=types.FLOAT) - length
    steps = dmath.floor(fn.random.uniform(range=[0.0, 1.0]) * (dmath.abs(excess) + 1))
    offset = steps * ((excess >= 0) * 2 - 1)
    return fn.slice(audio, start=fn.cast(offset, dtype=types.INT32), shape=[length], axes=[0],
                    out_of_bounds_policy="pad", fill_values=0.0)


def time_shift(audio, max_shift: int):
    """The clip moved by a whole number of samples drawn in [-max_shift, max_shift],
    zeros entering, its length kept."""
    shift = fn.random.uniform(values=[float(step) for step in range(-max_shift, max_shift + 1)])
    return fn.slice(audio, start=fn.cast(-shift, dtype=types.INT32), shape=audio.shape(dtype=types.INT32), axes=[0],
                    out_of_bounds_policy="pad", fill_values=0.0)


def gain(audio, low_db: float, high_db: float, probability: float):
    """The clip times 10^(g/20), g uniform in [low_db, high_db], with `probability`."""
    gain_db = maybe(probability, fn.random.uniform(range=[low_db, high_db]), 0.0)
    return audio * dmath.pow(10.0, gain_db / 20.0)


def mix_noise(audio, noise, low_db: float, high_db: float, probability: float):
    """`noise` (as long as the clip) scaled to a signal-to-noise ratio uniform in
    [low_db, high_db] and added, with `probability`."""
    snr = fn.random.uniform(range=[low_db, high_db])
    scale = dmath.sqrt(fn.reductions.mean_square(audio) * dmath.pow(10.0, -snr / 10.0)
                       / fn.reductions.mean_square(noise))
    return audio + maybe(probability, scale, 0.0) * noise


def top_db(decibels, limit: float):
    """Each spectrogram's dB floored at its own maximum minus `limit` (torchaudio's top_db)."""
    return dmath.max(decibels, fn.reductions.max(decibels) - limit)


def mask(features, axis: str, max_width: float, size: int):
    """torchaudio's mask_along_axis draws: width = floor(u1 * max_width), start =
    floor(u2 * (size - u1 * max_width)); that band of `axis` set to 0."""
    drawn = fn.random.uniform(range=[0.0, max_width])
    start = dmath.floor(fn.random.uniform(range=[0.0, 1.0]) * (size - drawn))
    return fn.erase(features, anchor=start, shape=dmath.floor(drawn), axis_names=axis,
                    fill_value=0.0)
