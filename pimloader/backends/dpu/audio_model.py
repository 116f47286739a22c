"""A bit-exact model, in numpy integers, of the DPU log-mel kernel (dpu_src/audio_features.c).

Same operations in the same order, vectorised over a clip's frames: the tests assert that
the emulator's output equals `model_features` bit for bit, and that both are within the
stated dB tolerance of torchaudio's float MelSpectrogram + AmplitudeToDB. docs/audio.md
("DPU kernel") explains the formats; the comments name the kernel's functions.

Per frame (all integers; E is the frame's block exponent, value = integer * 2^E):
  v[j] = pcm[idx(j)] * window[j]                     Q15 x Q15, |v| < 2^30
  a[j] = round(v[j] / 2^sh), sh = bitlen(max|v|) - 14 so that |a| <= 2^14
  per FFT stage of radix r: s = shift that keeps r * 1.5 * max|a| below 32000,
       a = round(a / 2^s), radix-r butterfly, twiddle by W_L^(n1 q) (Q15, rounded)
  P[k] = re^2 + im^2 of bin k, scaled to 40 bits     uint64
  mel[m] = sum_k w[m, k] * P[k]                      uint64, w in Q(mel_q)
  L = log2(mel) + 2E - mel_q                         Q16, table + linear interpolation
  dB = 3 L + (L * 675 >> 16) - offset                Q16 dB (10 log10 2 = 3 + 675 / 2^16)
then per clip: top_db clamp, masks; output int32 Q16 dB, [frames, n_mels].
"""
from __future__ import annotations

import numpy as np

from .audio_tables import DB_PER_LOG2_FRAC_Q16, MAX_MASKS, DpuMelSpec, DpuMelTables

HEADROOM = 1 << 30   # the stage rule's bound on a butterfly's output magnitude
INPUT_BITS = 28      # windowed samples are scaled to |a| <= 2^28


def round_shift(x: np.ndarray, s) -> np.ndarray:
    """round(x / 2^s) for s >= 0 (x * 2^-s for s < 0): the kernel's rshift_round."""
    s = np.asarray(s, np.int64)
    pos = np.maximum(s, 0)
    right = (x + ((np.int64(1) << pos) >> 1)) >> pos
    return np.where(s >= 0, right, x << np.maximum(-s, 0))


def mul_q15(x: np.ndarray, c) -> np.ndarray:
    """mul_q15: round(x * c / 2^15), int32 x by Q15 c (two 16x16 products on the DPU)."""
    return (x * np.asarray(c, np.int64) + (1 << 14)) >> 15


def bit_length(x: np.ndarray) -> np.ndarray:
    """Bits of non-negative integers (0 for 0), exactly, for uint64 too."""
    x = np.asarray(x).astype(np.uint64)
    n = np.zeros(x.shape, np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        big = x >= (np.uint64(1) << np.uint64(step))
        x = np.where(big, x >> np.uint64(step), x)
        n += np.where(big, step, 0)
    return n + (x > 0)


def stage_shift(peak: np.ndarray, radix: int) -> np.ndarray:
    """The kernel's stage_shift: the least s >= 0 with 3 m / 2 + 2 <= HEADROOM / radix, m
    the largest component after the shift ((peak >> s) + 1 when s > 0): the butterfly's
    outputs (at most radix x 1.5 m, 1.5 > sqrt 2) then stay below 2^30."""
    limit = HEADROOM // radix
    peak = peak.astype(np.int64)
    s = np.zeros(peak.shape, np.int64)
    m = peak
    while True:
        over = (3 * m) // 2 + 2 > limit
        if not over.any():
            return s
        s = np.where(over, s + 1, s)
        m = np.where(s > 0, (peak >> s) + 1, peak)


def frame_indices(spec: DpuMelSpec, length: int) -> tuple:
    """[frames, n_fft] indices into the clip after center padding, and where they are valid
    (constant padding reads zeros)."""
    frames = spec.frames(length)
    idx = np.arange(frames)[:, None] * spec.hop_length + np.arange(spec.n_fft)[None, :] - spec.pad
    valid = (idx >= 0) & (idx < length)
    if spec.pad_mode == "reflect":
        idx = np.where(idx < 0, -idx, idx)
        idx = np.where(idx >= length, 2 * (length - 1) - idx, idx)
        valid = np.ones_like(valid)
    return np.clip(idx, 0, length - 1), valid


def windowed_frames(pcm: np.ndarray, tables: DpuMelTables) -> tuple:
    """fill_frame: windowed, block-normalised frames packed as N/2 complex values (even
    samples real, odd imaginary), and their exponents sh."""
    idx, valid = frame_indices(tables.spec, len(pcm))
    v = np.where(valid, pcm.astype(np.int64)[idx], 0) * tables.window.astype(np.int64)[None, :]
    peak = np.abs(v).max(axis=1)
    sh = np.where(peak > 0, bit_length(peak) - INPUT_BITS, 0)
    a = round_shift(v, sh[:, None])
    return a[:, 0::2], a[:, 1::2], sh


def _radix_butterfly(re: list, im: list, radix: int, twiddles: np.ndarray, step: int) -> tuple:
    """y_q = sum_j a_j W_r^(jq): radix 2 and 4 exactly; 3 and 5 with Q15 products, each
    rounded (W_r^t is twiddles[step * t] = c + i s, step = N / r), in the symmetric form:
    y_q, y_(r-q) = a_0 + sum_j c S_j +- i sum_j s D_j, S_j = a_j + a_(r-j), D_j = a_j - a_(r-j)."""
    if radix == 2:
        return [re[0] + re[1], re[0] - re[1]], [im[0] + im[1], im[0] - im[1]]
    if radix == 4:  # W_4 = -i
        s02r, s02i, d02r, d02i = re[0] + re[2], im[0] + im[2], re[0] - re[2], im[0] - im[2]
        s13r, s13i, d13r, d13i = re[1] + re[3], im[1] + im[3], re[1] - re[3], im[1] - im[3]
        return ([s02r + s13r, d02r + d13i, s02r - s13r, d02r - d13i],
                [s02i + s13i, d02i - d13r, s02i - s13i, d02i + d13r])
    h = radix // 2
    sr = [re[j] + re[radix - j] for j in range(1, h + 1)]
    si = [im[j] + im[radix - j] for j in range(1, h + 1)]
    dr = [re[j] - re[radix - j] for j in range(1, h + 1)]
    di = [im[j] - im[radix - j] for j in range(1, h + 1)]
    yr, yi = [re[0] + sum(sr)] + [None] * (radix - 1), [im[0] + sum(si)] + [None] * (radix - 1)
    for q in range(1, h + 1):
        even_r, even_i, odd_r, odd_i = re[0], im[0], 0, 0
        for j in range(1, h + 1):
            c, s = (int(v) for v in twiddles[step * ((j * q) % radix)])
            even_r, even_i = even_r + mul_q15(sr[j - 1], c), even_i + mul_q15(si[j - 1], c)
            odd_r, odd_i = odd_r + mul_q15(dr[j - 1], s), odd_i + mul_q15(di[j - 1], s)
        yr[q], yi[q] = even_r - odd_i, even_i + odd_r
        yr[radix - q], yi[radix - q] = even_r + odd_i, even_i - odd_r
    return yr, yi


def _peak(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    return np.maximum(np.abs(re).max(axis=1), np.abs(im).max(axis=1))


def fft_frames(re: np.ndarray, im: np.ndarray, tables: DpuMelTables) -> tuple:
    """fft_dif: the N/2-point complex FFT, every stage in place over all frames; returns
    (re, im, sum of the stage shifts). Its twiddles W_M^t are the table's W_N^(2t)."""
    n = tables.spec.n_fft
    size = n // 2
    shifts = np.zeros(len(re), np.int64)
    span = size
    for radix in tables.radices:
        m = span // radix
        s = stage_shift(_peak(re, im), radix)
        shifts += s
        base = (np.arange(0, size, span)[:, None] + np.arange(m)[None, :]).ravel()
        n1 = np.tile(np.arange(m), size // span)
        a_re = [round_shift(re[:, base + m * j], s[:, None]) for j in range(radix)]
        a_im = [round_shift(im[:, base + m * j], s[:, None]) for j in range(radix)]
        y_re, y_im = _radix_butterfly(a_re, a_im, radix, tables.twiddles, n // radix)
        out_re, out_im = np.empty_like(re), np.empty_like(im)
        for q in range(radix):
            tw = 2 * (size // span) * n1 * q
            c, s_ = tables.twiddles[tw, 0][None, :], tables.twiddles[tw, 1][None, :]
            z_re = np.where(tw == 0, y_re[q], mul_q15(y_re[q], c) - mul_q15(y_im[q], s_))
            z_im = np.where(tw == 0, y_im[q], mul_q15(y_re[q], s_) + mul_q15(y_im[q], c))
            out_re[:, base + m * q], out_im[:, base + m * q] = z_re, z_im
        re, im = out_re, out_im
        span = m
    return re, im, shifts


def real_spectrum(re: np.ndarray, im: np.ndarray, tables: DpuMelTables) -> tuple:
    """split_real: bins 0..N/2 of the real frame from its N/2-point FFT Z (in bin order):
    2 X[k] = E - i W_N^k O, E = Z[k] + conj Z[M-k], O = Z[k] - conj Z[M-k]; returns
    (re, im, shift) of 2 X after the stage rule (radix 4: |2 X| <= 4 |Z|)."""
    size = tables.spec.n_fft // 2
    pos = dif_positions(tables)
    s = stage_shift(_peak(re, im), 4)
    zr, zi = round_shift(re, s[:, None]), round_shift(im, s[:, None])
    k = np.arange(size + 1)
    ar, ai = zr[:, pos[k % size]], zi[:, pos[k % size]]
    br, bi = zr[:, pos[(size - k) % size]], -zi[:, pos[(size - k) % size]]
    er, ei, orr, oi = ar + br, ai + bi, ar - br, ai - bi
    c, s_ = tables.twiddles[k, 0][None, :], tables.twiddles[k, 1][None, :]
    return (er + mul_q15(orr, s_) + mul_q15(oi, c), ei + mul_q15(oi, s_) - mul_q15(orr, c), s)


def dif_positions(tables: DpuMelTables) -> np.ndarray:
    """Where the N/2-point FFT leaves each of its bins (the table's bin_pos, Nyquist dropped)."""
    return tables.bin_pos[:tables.spec.n_fft // 2].astype(np.int64)


def power_spectrum(xr: np.ndarray, xi: np.ndarray, power_bits: int) -> tuple:
    """power: exact re^2 + im^2 (three 16x16 products per square on the DPU), shifted right by
    ps = 2 bitlen(max component) + 1 - power_bits (when positive) to fit power_bits bits."""
    peak = _peak(xr, xi)
    ps = np.maximum(2 * bit_length(peak) + 1 - power_bits, 0)
    power = (xr.astype(object) ** 2 + xi.astype(object) ** 2)
    shifted = np.array([[int(p) >> int(sh) for p in row] for row, sh in zip(power, ps)], np.uint64)
    return shifted.reshape(xr.shape), ps


def mel_power(power: np.ndarray, tables: DpuMelTables) -> np.ndarray:
    """mel: uint64 [frames, n_mels] = sum of weight x power over each filter's bins, exact."""
    out = np.zeros((len(power), tables.spec.n_mels), np.uint64)
    at = 0
    for m, (first, count) in enumerate(tables.mel_ranges.astype(np.int64)):
        w = tables.mel_weights[at:at + count].astype(np.uint64)
        out[:, m] = (power[:, first:first + count] * w[None, :]).sum(axis=1, dtype=np.uint64)
        at += count
    return out


def log2_q16(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """log2_fixed: log2 of uint64 x > 0 in Q16 (int64); table lookup on the 8 bits after
    the leading one, linear interpolation on the next 16."""
    b = bit_length(x) - 1
    up = np.uint64(31) - np.minimum(b, 31).astype(np.uint64)
    down = np.maximum(b - 31, 0).astype(np.uint64)
    mant = ((x << up) >> down).astype(np.int64)          # top bit at bit 31
    frac = mant - (1 << 31)
    i = frac >> 23
    t = table.astype(np.int64)
    interp = t[i] + (((t[np.minimum(i + 1, 256)] - t[i]) * ((frac >> 7) & 0xFFFF)) >> 16)
    return (b << 16) + interp


def db_q16(log2_value: np.ndarray, offset_q16: int) -> np.ndarray:
    """to_db: 10 log10(2) L = 3 L + (L * 675 >> 16), minus the reference's dB."""
    return 3 * log2_value + ((log2_value * DB_PER_LOG2_FRAC_Q16) >> 16) - offset_q16


def clip_features(pcm: np.ndarray, gain: int, tables: DpuMelTables) -> np.ndarray:
    """One clip's Q16 dB before top_db and masks: int64 [frames, n_mels]."""
    re, im, sh = windowed_frames(pcm, tables)
    re, im, shifts = fft_frames(re, im, tables)
    xr, xi, split_shift = real_spectrum(re, im, tables)
    power, ps = power_spectrum(xr, xi, tables.power_bits)
    mel = mel_power(power, tables)
    # value = integer x 2^e: frames a / 2^(sh - 30 - g), every shift, 2 X, power, mel weights
    amplitude = sh + shifts + split_shift - 30 - int(gain) - 1
    exponent = 2 * amplitude + ps - tables.mel_q
    value = np.where(mel > 0, log2_q16(np.maximum(mel, np.uint64(1)), tables.log2_table)
                     + (exponent[:, None] << 16), tables.log2_amin_q16)
    return db_q16(np.maximum(value, tables.log2_amin_q16), tables.db_offset_q16)


def finish_clip(db: np.ndarray, tables: DpuMelTables, freq_masks: np.ndarray, time_masks: np.ndarray,
                mask_value_q16: int) -> np.ndarray:
    """top_db clamp over the clip, then the masks ([start, end) rows/columns set to the value)."""
    if tables.top_db_q16 >= 0:
        db = np.maximum(db, db.max() - tables.top_db_q16)
    frames = np.arange(db.shape[0])
    mels = np.arange(db.shape[1])
    for k in range(MAX_MASKS):
        f0, f1 = freq_masks[k]
        t0, t1 = time_masks[k]
        db = np.where(((mels >= f0) & (mels < f1))[None, :], mask_value_q16, db)
        db = np.where(((frames >= t0) & (frames < t1))[:, None], mask_value_q16, db)
    return db.astype(np.int32)


def model_features(pcm: np.ndarray, gains: np.ndarray, lengths: np.ndarray, tables: DpuMelTables,
                   freq_masks: np.ndarray, time_masks: np.ndarray, mask_value_q16: int = 0) -> list:
    """The kernel's output for each clip: int32 Q16 dB [frames, n_mels] (pcm: int16 [N, L],
    clip i uses pcm[i, :lengths[i]]; masks as `audio_tables.pack_masks` gives them)."""
    out = []
    for i in range(len(pcm)):
        clip = np.asarray(pcm[i, :int(lengths[i])], np.int16)
        tables.spec.check_length(len(clip), i)
        db = clip_features(clip, int(gains[i]), tables)
        out.append(finish_clip(db, tables, freq_masks[i], time_masks[i], mask_value_q16))
    return out
