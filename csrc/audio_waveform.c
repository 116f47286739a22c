/* audio_waveform.c: PCM decoding and the waveform steps of the audio pipeline
 * (pim_audio_wave.h).
 *
 * Decoding, per sample s of a frame of channels c:
 *   u8: (s - 128) / 128    s16: s / 2^15    s24: s / 2^23    s32: s / 2^31    f32, f64: s
 * (the floats libsndfile gives: every scale is a power of two); downmixed:
 *   y = (x_0 + x_1 + ... + x_{c-1}) / c, summed in float32 in that order (torch's mean).
 *
 * Waveform operations on a clip x[channel][0, n):
 *   place(at, m, fill): y[i] = x[at + i] where 0 <= at + i < n, else fill; i in [0, m)
 *   roll(k):            y[(i + k) mod n] = x[i]
 *   gain(g):            y[i] = x[i] * g
 *   noise(z, at, snr):  s[i] = z[(at + i) mod len(z)]  (the noise repeated end to end),
 *                       y[i] = x[i] + a s[i],  a = sqrt(sum x^2 / sum s^2 * 10^(-snr / 10))
 *                       per channel (a = 0 for a silent stretch)
 * each in float32, rounded once per operation as torch rounds them; the energies are
 * summed in double (torch sums in float32 in its own order: the only difference). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pim_audio_wave.h"

/* y = x + a s must round the product before the sum, as torch does (two operations) */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define FAIL(...) (snprintf(err, (size_t)err_len, __VA_ARGS__), -1)

/* ---- PCM decoding --------------------------------------------------------------------- */

static int sample_bytes(int32_t format)
{
    static const int bytes[] = {1, 2, 3, 4, 4, 8};
    return format >= PIM_PCM_U8 && format <= PIM_PCM_F64 ? bytes[format] : 0;
}

/* little-endian integers of the data chunk (compilers turn these into plain loads) */
static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le24(const uint8_t *p) { return le16(p) | (uint32_t)p[2] << 16; }
static uint32_t le32(const uint8_t *p) { return le24(p) | (uint32_t)p[3] << 24; }

static inline float pcm_sample(const uint8_t *p, int32_t format)
{
    switch (format) {
    case PIM_PCM_U8: return (float)((int32_t)p[0] - 128) * 0x1p-7f;
    case PIM_PCM_S16: return (float)(int16_t)le16(p) * 0x1p-15f;
    case PIM_PCM_S24: return (float)((int32_t)(le24(p) << 8) >> 8) * 0x1p-23f;
    case PIM_PCM_S32: return (float)(int32_t)le32(p) * 0x1p-31f;
    case PIM_PCM_F32: {
        const uint32_t bits = le32(p);
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    default: {
        const uint64_t bits = le32(p) | (uint64_t)le32(p + 4) << 32;
        double d;
        memcpy(&d, &bits, sizeof d);
        return (float)d;
    }
    }
}

/* one format per loop, the switch out of the per-sample work; mono, planar or downmixed */
#define DECODE_LOOP(FORMAT)                                                                  \
    if (channels == 1) {                                                                     \
        for (int64_t t = 0; t < frames; t++)                                                 \
            out[t] = pcm_sample(data + t * width, FORMAT);                                   \
    } else if (!downmix) {                                                                   \
        for (int32_t c = 0; c < channels; c++)                                               \
            for (int64_t t = 0; t < frames; t++)                                             \
                out[c * frames + t] = pcm_sample(data + (t * channels + c) * width, FORMAT); \
    } else {                                                                                 \
        for (int64_t t = 0; t < frames; t++)                                                 \
            out[t] = pcm_sample(data + t * channels * width, FORMAT);                        \
        for (int32_t c = 1; c < channels; c++)                                               \
            for (int64_t t = 0; t < frames; t++)                                             \
                out[t] += pcm_sample(data + (t * channels + c) * width, FORMAT);             \
        for (int64_t t = 0; t < frames; t++)                                                 \
            out[t] /= (float)channels;                                                       \
    }

int pim_audio_pcm(const uint8_t *data, int64_t frames, int32_t channels, int32_t format,
                  int32_t downmix, float *out, char *err, int32_t err_len)
{
    const int width = sample_bytes(format);
    if (width == 0)
        return FAIL("unknown PCM format %d", format);
    if (frames < 1 || channels < 1)
        return FAIL("%lld frames of %d channels: nothing to decode", (long long)frames, channels);
    switch (format) {
    case PIM_PCM_U8: DECODE_LOOP(PIM_PCM_U8) break;
    case PIM_PCM_S16: DECODE_LOOP(PIM_PCM_S16) break;
    case PIM_PCM_S24: DECODE_LOOP(PIM_PCM_S24) break;
    case PIM_PCM_S32: DECODE_LOOP(PIM_PCM_S32) break;
    case PIM_PCM_F32: DECODE_LOOP(PIM_PCM_F32) break;
    default: DECODE_LOOP(PIM_PCM_F64) break;
    }
    return 0;
}

/* ---- waveform operations, one channel at a time: x[0, n) -> y[0, m) -------------------- */

static int64_t clamped(int64_t v, int64_t low, int64_t high)
{
    return v < low ? low : v > high ? high : v;
}

/* y[i] = x[at + i] for i in [begin, end), where 0 <= at + i < n; fill elsewhere */
static void place(const float *x, int64_t n, int64_t at, float fill, float *y, int64_t m)
{
    const int64_t begin = clamped(-at, 0, m), end = clamped(n - at, begin, m);
    for (int64_t i = 0; i < begin; i++)
        y[i] = fill;
    memcpy(y + begin, x + at + begin, (size_t)(end - begin) * sizeof *y);
    for (int64_t i = end; i < m; i++)
        y[i] = fill;
}

static void roll(const float *x, int64_t n, int64_t k, float *y)
{
    k %= n;
    if (k < 0)
        k += n;
    memcpy(y + k, x, (size_t)(n - k) * sizeof *y);
    memcpy(y, x + n - k, (size_t)k * sizeof *y);
}

static void gain(const float *x, int64_t n, float g, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * g;
}

typedef float float4_t __attribute__((vector_size(4 * sizeof(float))));
typedef double double4_t __attribute__((vector_size(4 * sizeof(double))));

/* sum of x[i]^2 in double: four chains of four lanes, so the additions overlap */
static double energy(const float *x, int64_t n)
{
    double4_t lanes[4] = {{0.0}, {0.0}, {0.0}, {0.0}};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++) {
            float4_t v;
            memcpy(&v, x + i + 4 * k, sizeof v);
            const double4_t d = __builtin_convertvector(v, double4_t);
            lanes[k] += d * d;
        }
    const double4_t all = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    double sum = (all[0] + all[1]) + (all[2] + all[3]);
    for (; i < n; i++)
        sum += (double)x[i] * x[i];
    return sum;
}

/* s[0, n): z from sample `at`, z repeated end to end */
static void noise_stretch(const float *z, int64_t z_length, int64_t at, float *s, int64_t n)
{
    int64_t j = at % z_length;
    for (int64_t i = 0; i < n;) {
        const int64_t run = n - i < z_length - j ? n - i : z_length - j;
        memcpy(s + i, z + j, (size_t)run * sizeof *s);
        i += run;
        j = 0;
    }
}

static void add_noise(const float *x, int64_t n, const float *s, double snr_db, float *y)
{
    const double noise_energy = energy(s, n);
    const float a = noise_energy > 0.0
        ? (float)sqrt(energy(x, n) / noise_energy * pow(10.0, -snr_db / 10.0)) : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float scaled = a * s[i];
        y[i] = x[i] + scaled;
    }
}

/* ---- a clip through its operations ------------------------------------------------------ */

static int64_t length_after(const pim_wave_op_t *op, int64_t n)
{
    return op->kind == PIM_WAVE_PLACE ? op->length : n;
}

static int check_clip(const pim_wave_op_t *ops, int64_t count, int64_t n, int32_t channels,
                      const pim_wave_noise_t *noises, int32_t n_noises, int64_t length,
                      int64_t clip, int64_t *longest, char *err, int32_t err_len)
{
    if (n < 1)
        return FAIL("clip %lld: a source of %lld samples", (long long)clip, (long long)n);
    *longest = n;
    for (int64_t k = 0; k < count; k++) {
        const pim_wave_op_t *op = &ops[k];
        if (op->kind < PIM_WAVE_PLACE || op->kind > PIM_WAVE_NOISE)
            return FAIL("clip %lld, operation %lld: unknown kind %d", (long long)clip,
                        (long long)k, op->kind);
        if (op->kind == PIM_WAVE_PLACE && op->length < 1)
            return FAIL("clip %lld, operation %lld: placing %lld samples", (long long)clip,
                        (long long)k, (long long)op->length);
        if (op->kind == PIM_WAVE_NOISE) {
            if (op->noise < 0 || op->noise >= n_noises || op->at < 0)
                return FAIL("clip %lld, operation %lld: noise %d from sample %lld, of %d "
                            "noises", (long long)clip, (long long)k, op->noise,
                            (long long)op->at, n_noises);
            const pim_wave_noise_t *z = &noises[op->noise];
            if (z->samples == NULL || z->length < 1 || (z->channels != 1 && z->channels != channels))
                return FAIL("noise %d of %d channels cannot be mixed into a clip of %d",
                            op->noise, z->channels, channels);
        }
        n = length_after(op, n);
        if (n > *longest)
            *longest = n;
    }
    if (n != length)
        return FAIL("clip %lld ends %lld samples long, its slot holds %lld", (long long)clip,
                    (long long)n, (long long)length);
    return 0;
}

static void apply(const pim_wave_op_t *op, const float *x, int64_t n, float *y,
                  const float *stretch)
{
    switch (op->kind) {
    case PIM_WAVE_PLACE: place(x, n, op->at, (float)op->value, y, op->length); break;
    case PIM_WAVE_ROLL: roll(x, n, op->at, y); break;
    case PIM_WAVE_GAIN: gain(x, n, (float)op->value, y); break;
    default: add_noise(x, n, stretch, op->value, y); break;
    }
}

/* one channel of a clip: the operations ping-pong between two scratch rows, the last one
 * writing into out */
static void run_channel(const float *source, int64_t n, int32_t channel,
                        const pim_wave_op_t *ops, int64_t count, const pim_wave_noise_t *noises,
                        float *scratch[3], float *out, int64_t length)
{
    const float *x = source;
    if (count == 0)
        memcpy(out, source, (size_t)length * sizeof *out);
    for (int64_t k = 0; k < count; k++) {
        const pim_wave_op_t *op = &ops[k];
        float *y = k == count - 1 ? out : scratch[k & 1];
        if (op->kind == PIM_WAVE_NOISE) {
            const pim_wave_noise_t *z = &noises[op->noise];
            const float *row = z->samples + (z->channels == 1 ? 0 : channel) * z->length;
            noise_stretch(row, z->length, op->at, scratch[2], n);
        }
        apply(op, x, n, y, scratch[2]);
        x = y;
        n = length_after(op, n);
    }
}

int pim_audio_waveforms(const float *const *sources, const int64_t *source_lengths,
                        int64_t n_clips, int32_t channels, const pim_wave_op_t *ops,
                        const int64_t *op_starts, const pim_wave_noise_t *noises,
                        int32_t n_noises, float *out, int64_t length, char *err,
                        int32_t err_len)
{
    if (channels < 1 || length < 1 || n_clips < 0)
        return FAIL("%lld clips of %d channels and %lld samples", (long long)n_clips, channels,
                    (long long)length);
    int64_t longest = 0;
    for (int64_t i = 0; i < n_clips; i++) {
        int64_t clip_longest;
        if (op_starts[i] < 0 || op_starts[i + 1] < op_starts[i])
            return FAIL("clip %lld: operations [%lld, %lld)", (long long)i,
                        (long long)op_starts[i], (long long)op_starts[i + 1]);
        if (sources[i] == NULL)
            return FAIL("clip %lld has no samples", (long long)i);
        if (check_clip(ops + op_starts[i], op_starts[i + 1] - op_starts[i], source_lengths[i],
                       channels, noises, n_noises, length, i, &clip_longest, err, err_len))
            return -1;
        if (clip_longest > longest)
            longest = clip_longest;
    }
    float *rows = malloc((size_t)(3 * longest) * sizeof *rows);
    if (rows == NULL && n_clips > 0)
        return -2;
    float *scratch[3] = {rows, rows + longest, rows + 2 * longest};
    for (int64_t i = 0; i < n_clips; i++)
        for (int32_t c = 0; c < channels; c++)
            run_channel(sources[i] + c * source_lengths[i], source_lengths[i], c,
                        ops + op_starts[i], op_starts[i + 1] - op_starts[i], noises, scratch,
                        out + (i * channels + c) * length, length);
    free(rows);
    return 0;
}

/* ---- resampling ---------------------------------------------------------------------- */

/* sum a[i] b[i], i in [0, n): two chains of four lanes, then the lanes, then the rest */
static float dot(const float *a, const float *b, int32_t n)
{
    float4_t lanes[2] = {{0.0f}, {0.0f}};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 2; k++) {
            float4_t u, v;
            memcpy(&u, a + i + 4 * k, sizeof u);
            memcpy(&v, b + i + 4 * k, sizeof v);
            const float4_t product = u * v;
            lanes[k] += product;
        }
    const float4_t all = lanes[0] + lanes[1];
    float sum = (all[0] + all[1]) + (all[2] + all[3]);
    for (; i < n; i++) {
        const float product = a[i] * b[i];
        sum += product;
    }
    return sum;
}

static int check_resample(int64_t length, int32_t channels, int32_t orig, int32_t new_rate,
                          int32_t width, int32_t taps, const int32_t *first,
                          const int32_t *count, int64_t kept, char *err, int32_t err_len)
{
    if (length < 1 || channels < 1 || orig < 1 || new_rate < 1 || width < 0 || kept < 0)
        return FAIL("resampling %lld samples of %d channels from %d to %d (width %d)",
                    (long long)length, channels, orig, new_rate, width);
    if (taps != 2 * width + orig)
        return FAIL("filters of %d taps, torchaudio's have 2 * %d + %d", taps, width, orig);
    if (kept > ((length + orig - 1) / orig + 1) * new_rate)
        return FAIL("%lld outputs asked of %lld inputs", (long long)kept, (long long)length);
    for (int32_t p = 0; p < new_rate; p++)
        if (first[p] < 0 || count[p] < 0 || first[p] + count[p] > taps)
            return FAIL("phase %d: taps [%d, %d + %d) outside the %d", p, first[p], first[p],
                        count[p], taps);
    return 0;
}

int pim_audio_resample(const float *x, int64_t length, int32_t channels, int32_t orig,
                       int32_t new_rate, int32_t width, const float *filters, int32_t taps,
                       const int32_t *first, const int32_t *count, float *y, int64_t kept,
                       char *err, int32_t err_len)
{
    if (check_resample(length, channels, orig, new_rate, width, taps, first, count, kept, err,
                       err_len))
        return -1;
    /* the row as torchaudio pads it: width zeros, the samples, width + orig zeros, and room
     * for the last frame's taps */
    const int64_t frames = (kept + new_rate - 1) / new_rate;
    const int64_t padded = frames * orig + taps > length + 2 * width + orig
        ? frames * orig + taps : length + 2 * width + orig;
    float *row = calloc((size_t)padded, sizeof *row);
    if (row == NULL)
        return -2;
    for (int32_t c = 0; c < channels; c++) {
        memcpy(row + width, x + c * length, (size_t)length * sizeof *row);
        for (int64_t f = 0, k = 0; k < kept; f++)
            for (int32_t p = 0; p < new_rate && k < kept; p++, k++)
                y[c * kept + k] = dot(filters + (int64_t)p * taps + first[p],
                                      row + f * orig + first[p], count[p]);
    }
    free(row);
    return 0;
}
