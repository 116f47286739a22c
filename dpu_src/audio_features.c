/* audio_features.c: log-mel spectrograms in dB from int16 PCM on a DPU (UPMEM DPU C),
 * integers only: torchaudio's MelSpectrogram(power=2) + AmplitudeToDB("power", top_db) +
 * FrequencyMasking / TimeMasking with the host's draws.
 *
 * Per frame t of clip i (docs/audio.md, "DPU kernel"; pimloader/backends/dpu/audio_model.py
 * is the bit-exact model of every step below):
 *   fill_frame    v[j] = pcm[idx(t hop + j - pad)] * window[j] (Q15 x Q15, 16x16 products),
 *                 idx reflecting (or zero) outside the clip; scaled by 2^-sh so that
 *                 |v| <= 2^28, and packed as N/2 complex values (even j real, odd j imaginary)
 *   fft_dif       the N/2-point complex FFT, decimation in frequency, radices 4, 2, 3, 5, in
 *                 place; before each stage, block floating point: every value shifted right
 *                 (rounded) by the least s that keeps the stage's outputs below 2^30
 *   split_real    the real N-point spectrum's bins 0..N/2 from it (times 2, after one more
 *                 shift): 2 X[k] = E - i W_N^k O, E = Z[k] + conj Z[M-k], O = Z[k] - conj Z[M-k]
 *   to_power      re^2 + im^2 exactly (64 bits from 16x16 products), shifted so that the
 *                 frame's largest fits power_bits (40) bits
 *   mel_row       sum of weight x power over each filter's bins (uint64 from 16x16 products),
 *                 log2 by table, + the frame's exponent, to dB (Q16), masks
 * Products of 32-bit values by Q15 constants are two 16x16 products (mul_q15): a DPU has no
 * 32x32 multiplier. Then per clip, with top_db: the clip's maximum (over the tasklets), the
 * clamp and the masks in a second pass over the clip's rows.
 *
 * Work split: the host spreads clips over DPUs; on a DPU, clips run one after the other and
 * each clip's frames are cut into NR_TASKLETS contiguous runs, one per tasklet. Every DMA is
 * 8-byte aligned, a multiple of 8 bytes and at most 2048 bytes.
 *
 * Build: dpu-upmem-dpurte-clang -O2 -DNR_TASKLETS=16 -DSTACK_SIZE_DEFAULT=1024
 *        -I include -o audio_features dpu_src/audio_features.c
 */
#include <stdint.h>

#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>
#include <mutex.h>

#include "pim_audio_dpu.h"
#include "pim_dpu_mram.h"

#ifndef NR_TASKLETS
#define NR_TASKLETS 1
#endif

#define INPUT_BITS 28          /* frames are scaled to |v| <= 2^28 */
#define HEADROOM (1u << 30)    /* a stage's outputs stay below 2^30 */
#define DB_PER_LOG2_FRAC_Q16 675 /* 10 log10(2) = 3 + 675 / 2^16 */

typedef struct {
    int32_t re, im;
} cpx_t;

__host pim_audio_args_t DPU_AUDIO_ARGS;

BARRIER_INIT(phase_barrier, NR_TASKLETS);
MUTEX_INIT(status_mutex);

static pim_audio_chunk_t header __dma_aligned;
static pim_audio_status_t status __dma_aligned;
static uint32_t chunk; /* MRAM address of this DPU's chunk */
static const int16_t *window;
static const int16_t *twiddles; /* (cos, -sin) pairs */
static const uint16_t *bin_pos, *mel_ranges, *mel_weights;
static const uint32_t *log2_table;
static int32_t tasklet_max[NR_TASKLETS]; /* each tasklet's largest dB of the current clip */
static int setup_ok; /* tasklet 0's verdict on the args, header and tables, for every tasklet */

#ifdef PIM_AUDIO_COUNT_WORK /* test builds: how often each unit of the cost model ran */
__host uint64_t work_counts[NR_TASKLETS][PIM_AUDIO_WORK_UNITS];
#define COUNT(unit, n) (work_counts[me()][PIM_AUDIO_WORK_##unit] += (n))
#else
#define COUNT(unit, n) ((void)0)
#endif

/* One tasklet's buffers and the clip it works on. */
typedef struct {
    cpx_t *x;                 /* n_fft / 2 + 1 slots: frame, spectrum, then power */
    int16_t *cache;           /* PCM bytes [cache_lo, cache_hi) of MRAM */
    uint32_t cache_lo, cache_hi, last;
    int32_t *row;             /* one output row */
    pim_audio_sample_t s;
    uint32_t pcm, pcm_end;    /* the clip's PCM in MRAM */
} work_t;

static void fail(uint32_t code, uint32_t sample, uint32_t detail)
{
    mutex_lock(status_mutex);
    if (status.code == PIM_AUDIO_STATUS_OK) {
        status.code = code;
        status.sample = sample;
        status.detail = detail;
    }
    mutex_unlock(status_mutex);
}



/* ---- integer arithmetic (audio_model.py names the same steps) ------------------------- */

/* round(x / 2^s) for s >= 0, x * 2^-s for s < 0 */
static inline int32_t rshift_round(int32_t x, int32_t s)
{
    COUNT(SCALE, 1);
    if (s <= 0)
        return (int32_t)((uint32_t)x << -s);
    return (x + (int32_t)((1u << s) >> 1)) >> s;
}

/* round(x * c / 2^15) for |x| < 2^31, c in Q15: two 16x16 products */
static inline int32_t mul_q15(int32_t x, int16_t c)
{
    COUNT(MUL_Q15, 1);
    const int16_t hi = (int16_t)(x >> 16);
    const uint16_t lo = (uint16_t)(x & 0xFFFF);
    return (int32_t)hi * c * 2 + (((int32_t)lo * c + (1 << 14)) >> 15);
}

/* x^2 exactly: three 16x16 products */
static inline uint64_t square(int32_t x)
{
    COUNT(SQUARE, 1);
    const uint32_t u = x < 0 ? (uint32_t)-x : (uint32_t)x;
    const uint16_t hi = (uint16_t)(u >> 16), lo = (uint16_t)(u & 0xFFFF);
    return ((uint64_t)((uint32_t)hi * hi) << 32) + ((uint64_t)((uint32_t)hi * lo) << 17) + (uint32_t)lo * lo;
}

/* p * w for p < 2^48: three 16x16 products */
static inline uint64_t mul_u48_u16(uint64_t p, uint16_t w)
{
    const uint16_t p2 = (uint16_t)(p >> 32), p1 = (uint16_t)(p >> 16), p0 = (uint16_t)p;
    return ((uint64_t)((uint32_t)p2 * w) << 32) + ((uint64_t)((uint32_t)p1 * w) << 16) + (uint32_t)p0 * w;
}

static inline uint32_t bit_length32(uint32_t x)
{
    return x ? 32u - (uint32_t)__builtin_clz(x) : 0u;
}

static inline uint32_t bit_length64(uint64_t x)
{
    const uint32_t hi = (uint32_t)(x >> 32);
    return hi ? 32u + bit_length32(hi) : bit_length32((uint32_t)x);
}

/* log2(x) in Q16 for x > 0: the 8 bits after the leading one index the table, the next 16
 * interpolate linearly */
static int32_t log2_q16(uint64_t x)
{
    const uint32_t b = bit_length64(x) - 1;
    const uint32_t mant = b <= 31 ? (uint32_t)x << (31 - b) : (uint32_t)(x >> (b - 31));
    const uint32_t frac = mant - 0x80000000u;
    const uint32_t i = frac >> 23, f = (frac >> 7) & 0xFFFF;
    const uint32_t t0 = log2_table[i], t1 = log2_table[i + 1];
    return (int32_t)((b << 16) + t0 + (((uint32_t)(uint16_t)(t1 - t0) * (uint16_t)f) >> 16));
}

/* 10 log10(2) L - offset, Q16: 3 L + (L * 675 >> 16), the product as two 16x16 ones */
static inline int32_t to_db(int32_t log2_value)
{
    const int16_t hi = (int16_t)(log2_value >> 16); /* |L| < 2^24 */
    const uint16_t lo = (uint16_t)(log2_value & 0xFFFF);
    return 3 * log2_value + (int32_t)hi * DB_PER_LOG2_FRAC_Q16 + ((lo * DB_PER_LOG2_FRAC_Q16) >> 16) -
           DPU_AUDIO_ARGS.db_offset_q16;
}

/* The least s >= 0 with 3 m / 2 + 2 <= HEADROOM / radix, m = the largest component after
 * the shift: a radix-r butterfly's outputs are at most r x 1.5 m (1.5 > sqrt 2). */
static int32_t stage_shift(uint32_t peak, uint32_t radix)
{
    const uint32_t limit = radix == 2 ? HEADROOM / 2 : radix == 3 ? HEADROOM / 3 : radix == 4 ? HEADROOM / 4
                                                                                              : HEADROOM / 5;
    int32_t s = 0;
    uint32_t m = peak;
    while ((3u * m) / 2u + 2u > limit) {
        s++;
        m = (peak >> s) + 1u;
    }
    return s;
}

static uint32_t peak_of(const cpx_t *x, uint32_t n)
{
    uint32_t peak = 0;
    COUNT(PEAK, 2 * n);
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t r = x[i].re < 0 ? (uint32_t)-x[i].re : (uint32_t)x[i].re;
        const uint32_t m = x[i].im < 0 ? (uint32_t)-x[i].im : (uint32_t)x[i].im;
        peak = r > peak ? r : peak;
        peak = m > peak ? m : peak;
    }
    return peak;
}

static inline cpx_t twiddle(cpx_t y, uint32_t m)
{
    const int16_t c = twiddles[2 * m], s = twiddles[2 * m + 1];
    const cpx_t z = {mul_q15(y.re, c) - mul_q15(y.im, s), mul_q15(y.re, s) + mul_q15(y.im, c)};
    return z;
}

/* ---- the FFT ------------------------------------------------------------------------- */

/* y_q = sum_j a_j W_4^(jq), W_4 = -i: additions only */
static void butterfly4(const cpx_t *a, cpx_t *y)
{
    COUNT(BF4, 1);
    const int32_t s02r = a[0].re + a[2].re, s02i = a[0].im + a[2].im;
    const int32_t d02r = a[0].re - a[2].re, d02i = a[0].im - a[2].im;
    const int32_t s13r = a[1].re + a[3].re, s13i = a[1].im + a[3].im;
    const int32_t d13r = a[1].re - a[3].re, d13i = a[1].im - a[3].im;
    y[0].re = s02r + s13r, y[0].im = s02i + s13i;
    y[1].re = d02r + d13i, y[1].im = d02i - d13r;
    y[2].re = s02r - s13r, y[2].im = s02i - s13i;
    y[3].re = d02r - d13i, y[3].im = d02i + d13r;
}

/* y_q = sum_j a_j W_r^(jq) for r = 3, 5 (W_r^t = twiddles[(N / r) t] = c + i s), using
 * W^(j(r-q)) = conj W^(jq): with S_j = a_j + a_(r-j), D_j = a_j - a_(r-j), j = 1..r/2,
 *   y_q, y_(r-q) = a_0 + sum_j c S_j +- i sum_j s D_j
 * (4 (r/2)^2 products per butterfly instead of 4 (r-1)^2), each product rounded */
static void butterfly_odd(const cpx_t *a, cpx_t *y, uint32_t r, uint32_t step)
{
    const uint32_t h = r / 2;
    cpx_t sum[2], dif[2]; /* S_j, D_j at j - 1 (h <= 2) */
    y[0] = a[0];
    for (uint32_t j = 1; j <= h; j++) {
        sum[j - 1].re = a[j].re + a[r - j].re, sum[j - 1].im = a[j].im + a[r - j].im;
        dif[j - 1].re = a[j].re - a[r - j].re, dif[j - 1].im = a[j].im - a[r - j].im;
        y[0].re += sum[j - 1].re, y[0].im += sum[j - 1].im;
    }
    for (uint32_t q = 1; q <= h; q++) {
        cpx_t even = a[0]; /* a_0 + sum_j c S_j */
        int32_t odd_re = 0, odd_im = 0; /* sum_j s D_j, rotated by i later */
        uint32_t t = 0; /* j q mod r */
        for (uint32_t j = 1; j <= h; j++) {
            t += q;
            t = t >= r ? t - r : t;
            COUNT(ODD_TERM, 1);
            const int16_t c = twiddles[2 * step * t], s = twiddles[2 * step * t + 1];
            even.re += mul_q15(sum[j - 1].re, c);
            even.im += mul_q15(sum[j - 1].im, c);
            odd_re += mul_q15(dif[j - 1].re, s);
            odd_im += mul_q15(dif[j - 1].im, s);
        }
        y[q].re = even.re - odd_im, y[q].im = even.im + odd_re;
        y[r - q].re = even.re + odd_im, y[r - q].im = even.im - odd_re;
    }
}

static void butterfly(const cpx_t *a, cpx_t *y, uint32_t r, uint32_t n_fft)
{
    if (r == 2) {
        COUNT(BF2, 1);
        y[0].re = a[0].re + a[1].re, y[0].im = a[0].im + a[1].im;
        y[1].re = a[0].re - a[1].re, y[1].im = a[0].im - a[1].im;
    } else if (r == 4) {
        butterfly4(a, y);
    } else {
        butterfly_odd(a, y, r, r == 3 ? n_fft / 3 : n_fft / 5);
    }
}

/* In place over x[0..size), size = n_fft / 2; returns the sum of the stages' shifts. The
 * output is in digit-reversed order (bin_pos says where). */
static int32_t fft_dif(cpx_t *x, uint32_t size, uint32_t n_fft)
{
    int32_t total = 0;
    uint32_t span = size;
    for (uint32_t st = 0; st < DPU_AUDIO_ARGS.n_stages; st++) {
        const uint32_t r = DPU_AUDIO_ARGS.radices[st], m = span / r;
        const uint32_t step = 2u * (size / span); /* W_span^t = W_N^(step t) */
        const int32_t s = stage_shift(peak_of(x, size), r);
        total += s;
        for (uint32_t b = 0; b < size; b += span) {
            uint32_t base_tw = 0; /* step x n1 */
            for (uint32_t n1 = 0; n1 < m; n1++, base_tw += step) {
                cpx_t a[5], y[5];
                for (uint32_t j = 0, at = b + n1; j < r; j++, at += m) {
                    a[j].re = rshift_round(x[at].re, s);
                    a[j].im = rshift_round(x[at].im, s);
                }
                butterfly(a, y, r, n_fft);
                uint32_t tw = 0;
                for (uint32_t q = 0, at = b + n1; q < r; q++, at += m, tw += base_tw)
                    x[at] = tw == 0 ? y[q] : twiddle(y[q], tw);
            }
        }
        span = m;
    }
    return total;
}

/* 2 X[k] from A = Z[k] and B = Z[M - k] */
static inline cpx_t real_bin(cpx_t a, cpx_t b, uint32_t k)
{
    const int16_t c = twiddles[2 * k], s = twiddles[2 * k + 1];
    const int32_t er = a.re + b.re, ei = a.im - b.im; /* E = A + conj B */
    const int32_t orr = a.re - b.re, oi = a.im + b.im; /* O = A - conj B */
    const cpx_t x = {er + mul_q15(orr, s) + mul_q15(oi, c), ei + mul_q15(oi, s) - mul_q15(orr, c)};
    return x;
}

static inline cpx_t shifted(cpx_t z, int32_t s)
{
    const cpx_t out = {rshift_round(z.re, s), rshift_round(z.im, s)};
    return out;
}

/* Bins 0..M of the real frame (times 2) from its M-point FFT, into slots bin_pos[k] (the
 * Nyquist bin into slot M); returns the shift applied first. */
static int32_t split_real(cpx_t *x, uint32_t size)
{
    const int32_t s = stage_shift(peak_of(x, size), 4);
    for (uint32_t k = 0; k <= size / 2; k++) {
        const uint32_t pa = bin_pos[k], pb = bin_pos[k == 0 ? 0 : size - k];
        const cpx_t a = shifted(x[pa], s), b = shifted(x[pb], s);
        const cpx_t xa = real_bin(a, b, k);
        if (k == 0) {
            x[size] = real_bin(a, b, size); /* Nyquist: Z[M mod M] = Z[0] */
            x[pa] = xa;
        } else if (2 * k == size) {
            x[pa] = xa;
        } else {
            x[pb] = real_bin(b, a, size - k);
            x[pa] = xa;
        }
    }
    return s;
}

/* Power of every slot, in place (low word in .re, high word in .im), scaled to power_bits
 * bits; returns the shift. */
static int32_t to_power(cpx_t *x, uint32_t slots)
{
    const int32_t bits = 2 * (int32_t)bit_length32(peak_of(x, slots)) + 1 - (int32_t)DPU_AUDIO_ARGS.power_bits;
    const uint32_t ps = bits > 0 ? (uint32_t)bits : 0u;
    for (uint32_t i = 0; i < slots; i++) {
        const uint64_t p = (square(x[i].re) + square(x[i].im)) >> ps;
        COUNT(POWER_BIN, 1);
        x[i].re = (int32_t)(uint32_t)p;
        x[i].im = (int32_t)(uint32_t)(p >> 32);
    }
    return (int32_t)ps;
}

static inline uint64_t power_of(const cpx_t *slot)
{
    return ((uint64_t)(uint32_t)slot->im << 32) | (uint32_t)slot->re;
}

/* ---- one frame ----------------------------------------------------------------------- */

/* pcm[idx] through the tasklet's cache of the clip (refilled forward or, when the reads move
 * backwards as reflect padding does, backward) */
static int32_t sample_at(work_t *w, uint32_t idx)
{
    const uint32_t at = w->pcm + 2u * idx;
    if (at < w->cache_lo || at >= w->cache_hi) {
        uint32_t lo = at & ~7u;
        if (idx < w->last) {
            const uint32_t top = (at + 8u) & ~7u;
            lo = top - w->pcm > PIM_AUDIO_CACHE_BYTES ? top - PIM_AUDIO_CACHE_BYTES : w->pcm;
        }
        const uint32_t hi = w->pcm_end - lo > PIM_AUDIO_CACHE_BYTES ? lo + PIM_AUDIO_CACHE_BYTES : w->pcm_end;
        mram_read((__mram_ptr void const *)lo, w->cache, hi - lo);
        w->cache_lo = lo;
        w->cache_hi = hi;
    }
    w->last = idx;
    return w->cache[(at - w->cache_lo) >> 1];
}

/* The windowed frame t packed into x (even samples real, odd imaginary), scaled so that its
 * largest value has INPUT_BITS bits; returns the scale's exponent sh. */
static int32_t fill_frame(work_t *w, uint32_t t)
{
    const uint32_t n = DPU_AUDIO_ARGS.n_fft, length = w->s.length, pad = DPU_AUDIO_ARGS.pad;
    const int reflect = (DPU_AUDIO_ARGS.flags & PIM_AUDIO_FLAG_REFLECT) != 0;
    int32_t *v = (int32_t *)w->x;
    uint32_t peak = 0;
    int32_t idx = (int32_t)(t * DPU_AUDIO_ARGS.hop) - (int32_t)pad;
    COUNT(SAMPLE, n);
    for (uint32_t j = 0; j < n; j++, idx++) {
        int32_t i = idx;
        int inside = 1;
        if (reflect) {
            i = i < 0 ? -i : i;
            i = i >= (int32_t)length ? 2 * ((int32_t)length - 1) - i : i;
        } else {
            inside = i >= 0 && i < (int32_t)length;
        }
        v[j] = inside ? sample_at(w, (uint32_t)i) * window[j] : 0;
        const uint32_t a = v[j] < 0 ? (uint32_t)-v[j] : (uint32_t)v[j];
        peak = a > peak ? a : peak;
    }
    const int32_t sh = peak ? (int32_t)bit_length32(peak) - INPUT_BITS : 0;
    for (uint32_t j = 0; j < n; j++)
        v[j] = rshift_round(v[j], sh);
    return sh;
}

static int in_masks(const uint16_t masks[][2], uint32_t i)
{
    for (uint32_t k = 0; k < PIM_AUDIO_MAX_MASKS; k++)
        if (i >= masks[k][0] && i < masks[k][1])
            return 1;
    return 0;
}

/* Masked rows and columns of frame t's row become the mask value. */
static void mask_row(const work_t *w, uint32_t t)
{
    const int whole = in_masks(w->s.time_masks, t);
    COUNT(MASK_VALUE, DPU_AUDIO_ARGS.n_mels);
    for (uint32_t m = 0; m < DPU_AUDIO_ARGS.n_mels; m++)
        if (whole || in_masks(w->s.freq_masks, m))
            w->row[m] = DPU_AUDIO_ARGS.mask_value_q16;
}

/* The mel filter bank over the power in x, to dB; returns the row's maximum. */
static int32_t mel_row(const work_t *w, int32_t exponent)
{
    const int32_t floor = DPU_AUDIO_ARGS.log2_amin_q16;
    int32_t best = INT32_MIN;
    uint32_t at = 0;
    for (uint32_t m = 0; m < DPU_AUDIO_ARGS.n_mels; m++) {
        const uint32_t first = mel_ranges[2 * m], count = mel_ranges[2 * m + 1];
        uint64_t acc = 0;
        COUNT(MEL_MAC, count);
        COUNT(MEL_VALUE, 1);
        for (uint32_t k = 0; k < count; k++, at++)
            acc += mul_u48_u16(power_of(&w->x[bin_pos[first + k]]), mel_weights[at]);
        int32_t l = acc ? log2_q16(acc) + (int32_t)((uint32_t)exponent << 16) : floor;
        l = l < floor ? floor : l;
        w->row[m] = to_db(l);
        best = w->row[m] > best ? w->row[m] : best;
    }
    return best;
}

/* Frame t of the clip into its output row; returns the row's maximum. */
static int32_t run_frame(work_t *w, uint32_t t)
{
    const uint32_t size = DPU_AUDIO_ARGS.n_fft / 2;
    COUNT(FRAME, 1);
    const int32_t sh = fill_frame(w, t);
    const int32_t shifts = fft_dif(w->x, size, DPU_AUDIO_ARGS.n_fft);
    const int32_t split = split_real(w->x, size);
    const int32_t ps = to_power(w->x, size + 1);
    /* the value is integer x 2^e: frame / 2^(sh - 30 - gain), the shifts, 2 X, power, weights */
    const int32_t amplitude = sh + shifts + split - 30 - w->s.gain - 1;
    return mel_row(w, 2 * amplitude + ps - (int32_t)DPU_AUDIO_ARGS.mel_q);
}

/* ---- checks -------------------------------------------------------------------------- */

static uint32_t expected_frames(uint32_t length)
{
    const uint32_t padded = length + 2u * DPU_AUDIO_ARGS.pad;
    return padded < DPU_AUDIO_ARGS.n_fft ? 0u : 1u + (padded - DPU_AUDIO_ARGS.n_fft) / DPU_AUDIO_ARGS.hop;
}

/* 0, or which check clip i's descriptor fails */
static uint32_t check_sample(const pim_audio_sample_t *s)
{
    const uint32_t row = pim_audio_row_bytes(DPU_AUDIO_ARGS.n_mels);
    if (s->pcm_off % 8 || s->pcm_off < header.samples_off + header.n_samples * (uint32_t)sizeof(*s) ||
        s->length == 0 || s->length > PIM_AUDIO_MAX_LENGTH ||
        s->pcm_off + pim_audio_round8(2u * s->length) > header.in_bytes)
        return 1;
    if (s->frames != expected_frames(s->length) || s->frames == 0 ||
        ((DPU_AUDIO_ARGS.flags & PIM_AUDIO_FLAG_REFLECT) && s->length <= DPU_AUDIO_ARGS.pad))
        return 2;
    if (s->out_off % 8 || s->out_off < header.out_off + (uint32_t)sizeof(status) ||
        (uint64_t)s->out_off + (uint64_t)s->frames * row > (uint64_t)header.out_off + header.out_bytes)
        return 3;
    if (s->gain < -16 || s->gain > 15)
        return 4;
    return 0;
}

/* Whether every table lies inside the tables block, aligned for its type. */
static int tables_fit(const pim_audio_args_t *a)
{
    const uint64_t size = a->tables_bytes;
    return a->window_off % 2 == 0 && a->window_off + 2ull * a->n_fft <= size && a->twiddle_off % 2 == 0 &&
           a->twiddle_off + 4ull * a->n_fft <= size && a->bin_pos_off % 2 == 0 &&
           a->bin_pos_off + 2ull * a->n_freqs <= size && a->mel_ranges_off % 2 == 0 &&
           a->mel_ranges_off + 4ull * a->n_mels <= size && a->mel_weights_off % 2 == 0 &&
           a->mel_weights_off + 2ull * a->n_weights <= size && a->log2_off % 4 == 0 &&
           a->log2_off + 4ull * PIM_AUDIO_LOG2_ENTRIES <= size;
}

/* Tasklet 0: the args, the chunk header, then the tables into WRAM; 0 when all hold. */
static uint32_t load_tables(void)
{
    const pim_audio_args_t *a = &DPU_AUDIO_ARGS;
    uint32_t product = 1;
    for (uint32_t st = 0; st < a->n_stages && st < PIM_AUDIO_MAX_STAGES; st++)
        product *= a->radices[st] >= 2 && a->radices[st] <= 5 ? a->radices[st] : 0;
    if (a->magic != PIM_AUDIO_MAGIC || a->version != PIM_AUDIO_VERSION || a->n_stages > PIM_AUDIO_MAX_STAGES ||
        product != a->n_fft / 2 || a->n_fft % 2 || a->n_freqs != a->n_fft / 2 + 1 || a->hop == 0 ||
        a->n_mels == 0 || a->n_mels > 512 || a->mel_q > 30 || a->tables_bytes % 8 ||
        a->chunk_off < a->tables_bytes || a->chunk_off % 8 || a->power_bits < 8 || a->power_bits > 40 ||
        !tables_fit(a) || header.magic != PIM_AUDIO_MAGIC || header.samples_off % 8 || header.out_off % 8 ||
        header.out_off < header.in_bytes || header.out_bytes < sizeof(status) ||
        (uint64_t)a->chunk_off + header.out_off + header.out_bytes > PIM_AUDIO_MRAM_BUDGET)
        return PIM_AUDIO_ERR_HEADER;
    if (a->nr_tasklets != NR_TASKLETS)
        return PIM_AUDIO_ERR_BUILD;
    uint8_t *tables = (uint8_t *)mem_alloc(a->tables_bytes);
    read_big((uint32_t)DPU_MRAM_HEAP_POINTER, tables, a->tables_bytes);
    window = (const int16_t *)(const void *)(tables + a->window_off);
    twiddles = (const int16_t *)(const void *)(tables + a->twiddle_off);
    bin_pos = (const uint16_t *)(const void *)(tables + a->bin_pos_off);
    mel_ranges = (const uint16_t *)(const void *)(tables + a->mel_ranges_off);
    mel_weights = (const uint16_t *)(const void *)(tables + a->mel_weights_off);
    log2_table = (const uint32_t *)(const void *)(tables + a->log2_off);
    uint32_t weights = 0;
    for (uint32_t m = 0; m < a->n_mels; m++) {
        if (mel_ranges[2 * m] + (uint32_t)mel_ranges[2 * m + 1] > a->n_freqs)
            return PIM_AUDIO_ERR_TABLES;
        weights += mel_ranges[2 * m + 1];
    }
    for (uint32_t k = 0; k < a->n_freqs; k++)
        if (bin_pos[k] > a->n_fft / 2)
            return PIM_AUDIO_ERR_TABLES;
    return weights == a->n_weights ? 0u : PIM_AUDIO_ERR_TABLES;
}

/* ---- the launch ---------------------------------------------------------------------- */

/* The clip's frames [f0, f1) (this tasklet's run); returns their largest dB. */
static int32_t run_frames(work_t *w, uint32_t f0, uint32_t f1, int masks_now)
{
    const uint32_t row = pim_audio_row_bytes(DPU_AUDIO_ARGS.n_mels);
    int32_t best = INT32_MIN;
    for (uint32_t t = f0; t < f1; t++) {
        const int32_t m = run_frame(w, t);
        best = m > best ? m : best;
        if (masks_now)
            mask_row(w, t);
        write_big(w->row, chunk + w->s.out_off + t * row, row);
    }
    return best;
}

/* top_db: rows [f0, f1) raised to the clip's maximum - top_db, then masked */
static void clamp_frames(work_t *w, uint32_t f0, uint32_t f1, int32_t clip_max)
{
    const uint32_t row = pim_audio_row_bytes(DPU_AUDIO_ARGS.n_mels);
    const int32_t low = clip_max - DPU_AUDIO_ARGS.top_db_q16;
    for (uint32_t t = f0; t < f1; t++) {
        read_big(chunk + w->s.out_off + t * row, w->row, row);
        COUNT(CLAMP_VALUE, DPU_AUDIO_ARGS.n_mels);
        for (uint32_t m = 0; m < DPU_AUDIO_ARGS.n_mels; m++)
            w->row[m] = w->row[m] < low ? low : w->row[m];
        mask_row(w, t);
        write_big(w->row, chunk + w->s.out_off + t * row, row);
    }
}

static void run_clip(work_t *w, uint32_t i, uint32_t id)
{
    const int top_db = DPU_AUDIO_ARGS.top_db_q16 != PIM_AUDIO_NO_TOP_DB;
    const int ok = status.code == PIM_AUDIO_STATUS_OK;
    uint32_t f0 = 0, f1 = 0;
    if (ok) {
        read_big(chunk + header.samples_off + i * (uint32_t)sizeof(pim_audio_sample_t), &w->s, sizeof(w->s));
        w->pcm = chunk + w->s.pcm_off;
        w->pcm_end = w->pcm + pim_audio_round8(2u * w->s.length);
        w->cache_lo = w->cache_hi = w->last = 0;
        f0 = w->s.frames * id / NR_TASKLETS;
        f1 = w->s.frames * (id + 1) / NR_TASKLETS;
        tasklet_max[id] = run_frames(w, f0, f1, !top_db);
    }
    if (!top_db)
        return;
    barrier_wait(&phase_barrier);
    if (ok) {
        int32_t clip_max = INT32_MIN;
        for (uint32_t t = 0; t < NR_TASKLETS; t++)
            clip_max = tasklet_max[t] > clip_max ? tasklet_max[t] : clip_max;
        clamp_frames(w, f0, f1, clip_max);
    }
    barrier_wait(&phase_barrier); /* tasklet_max is the next clip's */
}

int main(void)
{
    const uint32_t id = me();
#ifdef PIM_AUDIO_COUNT_WORK
    for (uint32_t u = 0; u < PIM_AUDIO_WORK_UNITS; u++)
        work_counts[id][u] = 0;
#endif
    if (id == 0) {
        mem_reset();
        chunk = (uint32_t)DPU_MRAM_HEAP_POINTER + DPU_AUDIO_ARGS.chunk_off;
        status.code = PIM_AUDIO_STATUS_OK;
        status.sample = status.detail = 0;
        if (DPU_AUDIO_ARGS.chunk_off % 8 ||
            (uint64_t)DPU_AUDIO_ARGS.chunk_off + sizeof(header) > PIM_AUDIO_MRAM_BUDGET) {
            status.code = PIM_AUDIO_ERR_HEADER;
        } else {
            mram_read((__mram_ptr void const *)chunk, &header, sizeof(header));
            status.batch_id = header.batch_id;
            const uint32_t code = load_tables();
            status.code = code ? code : PIM_AUDIO_STATUS_OK;
        }
        setup_ok = status.code == PIM_AUDIO_STATUS_OK;
    }
    barrier_wait(&phase_barrier);
    work_t w;
    /* not status.code: a tasklet may already have failed a descriptor below while another
     * reads it, and every tasklet must wait at the same barriers */
    const int ok = setup_ok;
    if (ok) {
        w.x = (cpx_t *)mem_alloc(pim_audio_round8(8u * (DPU_AUDIO_ARGS.n_fft / 2u + 1u)));
        w.cache = (int16_t *)mem_alloc(PIM_AUDIO_CACHE_BYTES);
        w.row = (int32_t *)mem_alloc(pim_audio_row_bytes(DPU_AUDIO_ARGS.n_mels));
        if (header.debug == PIM_AUDIO_DEBUG_HALT && id == NR_TASKLETS - 1)
            halt();
        if (header.debug == PIM_AUDIO_DEBUG_BAD_DMA && id == 0)
            mram_read((__mram_ptr void const *)(chunk + 4), w.cache, 8);
        /* every descriptor is checked before any output is written */
        for (uint32_t i = id; i < header.n_samples; i += NR_TASKLETS) {
            read_big(chunk + header.samples_off + i * (uint32_t)sizeof(pim_audio_sample_t), &w.s, sizeof(w.s));
            const uint32_t why = check_sample(&w.s);
            if (why)
                fail(PIM_AUDIO_ERR_SAMPLE, i, why);
        }
    }
    barrier_wait(&phase_barrier);
    const uint32_t n = ok ? header.n_samples : 0;
    for (uint32_t i = 0; i < n; i++)
        run_clip(&w, i, id);
    barrier_wait(&phase_barrier);
    if (id == 0 && DPU_AUDIO_ARGS.chunk_off % 8 == 0 && header.out_off % 8 == 0 &&
        (uint64_t)DPU_AUDIO_ARGS.chunk_off + header.out_off + sizeof(status) <= PIM_AUDIO_MRAM_BUDGET)
        mram_write(&status, (__mram_ptr void *)(chunk + header.out_off), sizeof(status));
    return 0;
}
