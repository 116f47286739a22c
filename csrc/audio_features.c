/* audio_features.c: the fused audio feature kernel (pim_audio.h).
 *
 * Per example: pad the clip (zeros, then the centre padding), run the spectral rows of
 * audio_lanes.h (frames -> window -> FFT -> |X|^power -> filter bank) straight into the
 * output slot, or into scratch when a DCT follows, then, over the whole example:
 *   dB:   y = multiplier * log10(max(x, amin)) - db_offset, then y = max(y, max(y) - top_db)
 *   ln:   y = log(x + log_offset)
 *   DCT:  out[c][t] = sum_m dct[m][c] y[m][t]
 *   masks: out[c][t] = mask_value for c (or t) in each [start, end)
 *   norm: (x - mean) / (std + eps) per example, or (x - mean) / std with given constants.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pim_audio.h"
#include "pim_audio_fft.h"

#define LANES 4
#define LANE_FN(name) name##_portable
#include "audio_lanes.h"
#undef LANE_FN
#undef LANES

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_AVX2_LANES 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define LANES 8
#define LANE_FN(name) name##_avx2
#include "audio_lanes.h"
#undef LANE_FN
#undef LANES
#pragma GCC pop_options
#else
#define HAVE_AVX2_LANES 0
#endif

/* ---- which loops --------------------------------------------------------------------- */

static int simd_level = -1;

static int best_simd_level(void)
{
#if HAVE_AVX2_LANES
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 1;
#endif
    return 0;
}

int pim_audio_simd(int request)
{
    const int best = best_simd_level();
    simd_level = request < 0 || request > best ? best : request;
    return simd_level;
}

static int use_avx2(void)
{
    if (simd_level < 0)
        pim_audio_simd(-1);
    return simd_level == 1;
}

/* ---- checks --------------------------------------------------------------------------- */

#define FAIL(...) (snprintf(err, (size_t)err_len, __VA_ARGS__), -1)

static int64_t padded_length(const pim_audio_spec_t *spec, int64_t length)
{
    return length + 2 * (int64_t)spec->pad + 2 * (int64_t)spec->center_pad;
}

static int64_t expected_rows(const pim_audio_spec_t *spec)
{
    if (spec->n_mfcc > 0)
        return spec->n_mfcc;
    return spec->n_mels > 0 ? spec->n_mels : spec->n_fft / 2 + 1;
}

static int check_filters(const pim_audio_spec_t *spec, char *err, int32_t err_len)
{
    const int n_bins = spec->n_fft / 2 + 1;
    if (spec->n_mels < 0 || spec->n_mfcc < 0)
        return FAIL("n_mels=%d and n_mfcc=%d must not be negative", spec->n_mels, spec->n_mfcc);
    if (spec->n_mels > 0 && (!spec->mel_first || !spec->mel_count || !spec->mel_at ||
                             !spec->mel_weights))
        return FAIL("the filter bank's tables are missing");
    for (int m = 0; m < spec->n_mels; m++) {
        if (spec->mel_first[m] < 0 || spec->mel_count[m] < 0 || spec->mel_at[m] < 0 ||
            spec->mel_first[m] + spec->mel_count[m] > n_bins)
            return FAIL("mel filter %d spans bins [%d, %d + %d) outside the %d FFT bins", m,
                        spec->mel_first[m], spec->mel_first[m], spec->mel_count[m], n_bins);
    }
    if (spec->n_mfcc > 0 && (spec->n_mels == 0 || spec->dct == NULL))
        return FAIL("an MFCC needs a filter bank and a DCT matrix");
    return 0;
}

/* torch.nn.functional.pad's own conditions on the centre padding */
static int check_padding(const pim_audio_spec_t *spec, int64_t length, char *err,
                         int32_t err_len)
{
    const int64_t inner = length + 2 * (int64_t)spec->pad;
    if (length < 1)
        return FAIL("a clip of %lld samples has no frame", (long long)length);
    if (spec->pad_mode == PIM_AUDIO_PAD_REFLECT && spec->center_pad >= inner)
        return FAIL("reflect padding of %d needs a clip longer than %d samples (got %lld)",
                    spec->center_pad, spec->center_pad, (long long)inner);
    if (spec->pad_mode == PIM_AUDIO_PAD_CIRCULAR && spec->center_pad > inner)
        return FAIL("circular padding of %d needs a clip of at least %d samples (got %lld)",
                    spec->center_pad, spec->center_pad, (long long)inner);
    if (padded_length(spec, length) < spec->n_fft)
        return FAIL("a padded clip of %lld samples is shorter than n_fft=%d",
                    (long long)padded_length(spec, length), spec->n_fft);
    return 0;
}

static int check_spec(const pim_audio_spec_t *spec, int64_t length, int64_t rows,
                      int64_t frames, char *err, int32_t err_len)
{
    if (spec->n_fft < 1 || spec->hop_length < 1 || spec->pad < 0 || spec->center_pad < 0)
        return FAIL("n_fft=%d, hop_length=%d, pad=%d, center_pad=%d: invalid", spec->n_fft,
                    spec->hop_length, spec->pad, spec->center_pad);
    if (spec->pad_mode < PIM_AUDIO_PAD_CONSTANT || spec->pad_mode > PIM_AUDIO_PAD_CIRCULAR)
        return FAIL("unknown pad_mode %d", spec->pad_mode);
    if (!(spec->power > 0.0f) || spec->window == NULL)
        return FAIL("power must be > 0 and a window given");
    if (check_filters(spec, err, err_len) || check_padding(spec, length, err, err_len))
        return -1;
    const int64_t want_frames = (padded_length(spec, length) - spec->n_fft) / spec->hop_length + 1;
    if (rows != expected_rows(spec) || frames != want_frames)
        return FAIL("output of %lld x %lld per clip, the spec makes %lld x %lld",
                    (long long)rows, (long long)frames, (long long)expected_rows(spec),
                    (long long)want_frames);
    return 0;
}

static int check_masks(const int32_t *masks, int64_t n, int32_t per_example, int64_t axis,
                       const char *name, char *err, int32_t err_len)
{
    if (per_example < 0 || (per_example > 0 && masks == NULL))
        return FAIL("%s masks: %d per example, none given", name, per_example);
    for (int64_t i = 0; i < n * per_example; i++) {
        const int32_t start = masks[2 * i], end = masks[2 * i + 1];
        if (start < 0 || end < start || end > axis)
            return FAIL("%s mask [%d, %d) of example %lld is not inside [0, %lld)", name, start,
                        end, (long long)(i / per_example), (long long)axis);
    }
    return 0;
}

typedef float float4_t __attribute__((vector_size(4 * sizeof(float))));

/* whether x[0..n) holds only finite numbers: x * 0 is NaN exactly for NaN and infinities */
static int all_finite(const float *x, int64_t n)
{
    float4_t probe = {0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float4_t v;
        memcpy(&v, x + i, sizeof v);
        probe += v * 0.0f;
    }
    float rest = probe[0] + probe[1] + probe[2] + probe[3];
    for (; i < n; i++)
        rest += x[i] * 0.0f;
    return rest == 0.0f;
}

static int check_waveforms(const float *waveforms, int64_t n, int64_t length, char *err,
                           int32_t err_len)
{
    for (int64_t i = 0; i < n; i++)
        if (!all_finite(waveforms + i * length, length))
            return FAIL("waveform %lld has a NaN or infinite sample", (long long)i);
    return 0;
}

/* ---- per example steps ---------------------------------------------------------------- */

/* the sample at index i of the zero-padded clip, i in [-center_pad, inner + center_pad) */
static float padded_sample(const pim_audio_spec_t *spec, const float *wave, int64_t length,
                           int64_t i)
{
    const int64_t inner = length + 2 * (int64_t)spec->pad;
    if (i < 0 || i >= inner) {
        switch (spec->pad_mode) {
        case PIM_AUDIO_PAD_REFLECT: i = i < 0 ? -i : 2 * (inner - 1) - i; break;
        case PIM_AUDIO_PAD_REPLICATE: i = i < 0 ? 0 : inner - 1; break;
        case PIM_AUDIO_PAD_CIRCULAR: i = i < 0 ? i + inner : i - inner; break;
        default: return 0.0f;
        }
    }
    i -= spec->pad;
    return i >= 0 && i < length ? wave[i] : 0.0f;
}

static void pad_clip(const pim_audio_spec_t *spec, const float *wave, int64_t length,
                     float *padded)
{
    const int64_t edge = (int64_t)spec->pad + spec->center_pad, total = padded_length(spec, length);
    for (int64_t q = 0; q < edge; q++)
        padded[q] = padded_sample(spec, wave, length, q - spec->center_pad);
    memcpy(padded + edge, wave, (size_t)length * sizeof(float));
    for (int64_t q = edge + length; q < total; q++)
        padded[q] = padded_sample(spec, wave, length, q - spec->center_pad);
}

/* the log step over an example's rows, then the top_db floor */
static void to_log(const pim_audio_spec_t *spec, float *x, int64_t count)
{
#if HAVE_AVX2_LANES
    const float top = use_avx2() ? log_values_avx2(spec, x, count)
                                 : log_values_portable(spec, x, count);
#else
    const float top = log_values_portable(spec, x, count);
#endif
    if (spec->log_kind != PIM_AUDIO_LOG_DB || !spec->has_top_db)
        return;
    const float floor_db = top - spec->top_db;
    for (int64_t i = 0; i < count; i++)
        x[i] = fmaxf(x[i], floor_db);
}

static void apply_dct(const pim_audio_spec_t *spec, const float *rows, int64_t frames, float *out)
{
    for (int c = 0; c < spec->n_mfcc; c++) {
        float *line = out + c * frames;
        memset(line, 0, (size_t)frames * sizeof(float));
        for (int m = 0; m < spec->n_mels; m++) {
            const float weight = spec->dct[m * spec->n_mfcc + c];
            const float *row = rows + m * frames;
            for (int64_t t = 0; t < frames; t++)
                line[t] += weight * row[t];
        }
    }
}

static void apply_masks(float value, const int32_t *freq, int32_t n_freq, const int32_t *time,
                        int32_t n_time, float *out, int64_t rows, int64_t frames)
{
    for (int32_t i = 0; i < n_freq; i++)
        for (int64_t r = freq[2 * i]; r < freq[2 * i + 1]; r++)
            for (int64_t t = 0; t < frames; t++)
                out[r * frames + t] = value;
    for (int32_t i = 0; i < n_time; i++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t t = time[2 * i]; t < time[2 * i + 1]; t++)
                out[r * frames + t] = value;
}

static void normalise(const pim_audio_spec_t *spec, float *x, int64_t count)
{
    float mean = spec->norm_mean, scale = 1.0f / spec->norm_std;
    if (spec->norm_kind == PIM_AUDIO_NORM_NONE)
        return;
    if (spec->norm_kind == PIM_AUDIO_NORM_PER_SAMPLE) {
        double sum = 0.0, squares = 0.0;
        for (int64_t i = 0; i < count; i++)
            sum += x[i];
        const double mean_d = sum / (double)count;
        for (int64_t i = 0; i < count; i++)
            squares += (x[i] - mean_d) * (x[i] - mean_d);
        const double std = count > 1 ? sqrt(squares / (double)(count - 1)) : 0.0;
        mean = (float)mean_d;
        scale = (float)(1.0 / (std + spec->norm_eps));
        for (int64_t i = 0; i < count; i++)
            x[i] = (x[i] - mean) * scale;
        return;
    }
    for (int64_t i = 0; i < count; i++)
        x[i] = (x[i] - mean) / spec->norm_std;
}

/* ---- entry points --------------------------------------------------------------------- */

typedef struct {
    float *padded;
    float *rows; /* the filter bank's rows before the DCT, or NULL */
    float *work; /* work_alloc's vectors */
} scratch_t;

static void scratch_free(scratch_t *s)
{
    free(s->padded);
    free(s->rows);
    free(s->work);
}

/* the FFT's two complex buffers and one spectrum, of vectors of up to MAX_LANES floats */
static float *work_alloc(const fft_plan_t *plan)
{
    const size_t vectors = 4 * (size_t)plan->size + 2 * (size_t)(plan->n_fft / 2 + 1);
    const size_t vector_bytes = MAX_LANES * sizeof(float);
    return aligned_alloc(vector_bytes, vectors * vector_bytes);
}

/* frames: of all the clips of one example */
static int scratch_alloc(scratch_t *s, const pim_audio_spec_t *spec, const fft_plan_t *plan,
                         int64_t length, int64_t frames)
{
    s->padded = malloc((size_t)padded_length(spec, length) * sizeof(float));
    s->rows = spec->n_mfcc > 0 ? malloc((size_t)spec->n_mels * (size_t)frames * sizeof(float))
                               : NULL;
    s->work = work_alloc(plan);
    return s->padded && s->work && (spec->n_mfcc == 0 || s->rows) ? 0 : -2;
}

static void spectral_rows(const pim_audio_spec_t *spec, const fft_plan_t *plan,
                          const float *signal, int64_t frames, float *rows, float *work)
{
#if HAVE_AVX2_LANES
    if (use_avx2()) {
        spectral_rows_avx2(spec, plan, signal, frames, rows, work);
        return;
    }
#endif
    spectral_rows_portable(spec, plan, signal, frames, rows, work);
}

/* the features of one example's clips (clips_per_example waveforms of `length`) into out */
static void example_features(const pim_audio_spec_t *spec, const fft_plan_t *plan,
                             scratch_t *s, const float *waves, int64_t length, int64_t clips,
                             const int32_t *freq, int32_t n_freq, const int32_t *time,
                             int32_t n_time, float *out, int64_t rows, int64_t frames)
{
    const int64_t spectral_rows_per_clip = spec->n_mfcc > 0 ? spec->n_mels : rows;
    float *spectra = spec->n_mfcc > 0 ? s->rows : out;
    for (int64_t c = 0; c < clips; c++) {
        pad_clip(spec, waves + c * length, length, s->padded);
        spectral_rows(spec, plan, s->padded, frames, spectra + c * spectral_rows_per_clip * frames,
                      s->work);
    }
    if (spec->log_kind != PIM_AUDIO_LOG_NONE) /* one top_db floor for all the clips */
        to_log(spec, spectra, clips * spectral_rows_per_clip * frames);
    for (int64_t c = 0; c < clips; c++) {
        float *clip_out = out + c * rows * frames;
        if (spec->n_mfcc > 0)
            apply_dct(spec, spectra + c * spectral_rows_per_clip * frames, frames, clip_out);
        apply_masks(spec->mask_value, freq + 2 * c * n_freq, n_freq, time + 2 * c * n_time,
                    n_time, clip_out, rows, frames);
    }
    normalise(spec, out, clips * rows * frames);
}

int pim_audio_features(const pim_audio_spec_t *spec, const float *waveforms, int64_t n_clips,
                       int64_t length, int64_t clips_per_example, const int32_t *freq_masks,
                       int32_t n_freq_masks, const int32_t *time_masks, int32_t n_time_masks,
                       float *out, int64_t rows, int64_t frames, char *err, int32_t err_len)
{
    if (clips_per_example < 1 || n_clips % clips_per_example != 0)
        return FAIL("%lld clips do not make examples of %lld", (long long)n_clips,
                    (long long)clips_per_example);
    if (check_spec(spec, length, rows, frames, err, err_len) ||
        check_masks(freq_masks, n_clips, n_freq_masks, rows, "frequency", err, err_len) ||
        check_masks(time_masks, n_clips, n_time_masks, frames, "time", err, err_len) ||
        check_waveforms(waveforms, n_clips, length, err, err_len))
        return -1;
    fft_plan_t plan;
    const int made = fft_plan_make(&plan, spec->n_fft, err, err_len);
    if (made != 0)
        return made;
    scratch_t s = {0};
    int status = scratch_alloc(&s, spec, &plan, length, clips_per_example * frames);
    for (int64_t c = 0; status == 0 && c < n_clips; c += clips_per_example)
        example_features(spec, &plan, &s, waveforms + c * length, length, clips_per_example,
                         freq_masks + 2 * c * n_freq_masks, n_freq_masks,
                         time_masks + 2 * c * n_time_masks, n_time_masks,
                         out + c * rows * frames, rows, frames);
    scratch_free(&s);
    fft_plan_free(&plan);
    return status;
}

int pim_audio_rfft(const float *frames, int64_t n, int32_t n_fft, float *re, float *im,
                   char *err, int32_t err_len)
{
    if (n_fft < 1 || n < 0)
        return FAIL("n_fft=%d, n=%lld: invalid", n_fft, (long long)n);
    fft_plan_t plan;
    const int made = fft_plan_make(&plan, n_fft, err, err_len);
    if (made != 0)
        return made;
    float *ones = malloc((size_t)n_fft * sizeof(float));
    float *work = work_alloc(&plan);
    const int status = ones && work ? 0 : -2;
    if (status == 0) {
        for (int i = 0; i < n_fft; i++)
            ones[i] = 1.0f;
#if HAVE_AVX2_LANES
        if (use_avx2())
            rfft_rows_avx2(&plan, ones, frames, n, re, im, work);
        else
#endif
            rfft_rows_portable(&plan, ones, frames, n, re, im, work);
    }
    free(ones);
    free(work);
    fft_plan_free(&plan);
    return status;
}
