/* audio_lanes.h: the per-example loops of the audio feature kernel, written once over
 * LANES frames at a time and compiled twice by audio_features.c (portable with 4 lanes, the
 * width of SSE and NEON registers; AVX2 + FMA with 8).
 *
 * A lanes_t holds one number of LANES consecutive frames, so every step below is the scalar
 * maths of one frame, applied to LANES frames in one vector operation: the FFT of any radix
 * vectorises without shuffles. Before including this file, define LANES (<= MAX_LANES) and
 * LANE_FN(name) (the suffixed name), and include pim_audio_fft.h. Not a header of its own:
 * no include guard.
 */
typedef float LANE_FN(lanes_t) __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t LANE_FN(ilanes_t) __attribute__((vector_size(LANES * sizeof(int32_t))));
#define lanes_t LANE_FN(lanes_t)
#define ilanes_t LANE_FN(ilanes_t)

/* ---- complex numbers of LANES frames ---------------------------------------------------- */
typedef struct {
    lanes_t re, im;
} LANE_FN(cl_t);
#define cl_t LANE_FN(cl_t)

static inline __attribute__((always_inline)) cl_t LANE_FN(cl_add)(cl_t a, cl_t b)
{
    return (cl_t){a.re + b.re, a.im + b.im};
}

static inline __attribute__((always_inline)) cl_t LANE_FN(cl_sub)(cl_t a, cl_t b)
{
    return (cl_t){a.re - b.re, a.im - b.im};
}

static inline __attribute__((always_inline)) cl_t LANE_FN(cl_scale)(cl_t a, float s)
{
    return (cl_t){a.re * s, a.im * s};
}

/* a * (wr + i wi) */
static inline __attribute__((always_inline)) cl_t LANE_FN(cl_rotate)(cl_t a, float wr, float wi)
{
    return (cl_t){a.re * wr - a.im * wi, a.re * wi + a.im * wr};
}

/* a * (-i) */
static inline __attribute__((always_inline)) cl_t LANE_FN(cl_minus_i)(cl_t a)
{
    return (cl_t){a.im, -a.re};
}

static inline __attribute__((always_inline)) cl_t LANE_FN(cl_load)(const lanes_t *re, const lanes_t *im,
                                                              int i)
{
    return (cl_t){re[i], im[i]};
}

static inline __attribute__((always_inline)) void LANE_FN(cl_store)(lanes_t *re, lanes_t *im, int i,
                                                               cl_t a)
{
    re[i] = a.re;
    im[i] = a.im;
}

#define ADD LANE_FN(cl_add)
#define SUB LANE_FN(cl_sub)
#define SCALE LANE_FN(cl_scale)
#define ROTATE LANE_FN(cl_rotate)
#define MINUS_I LANE_FN(cl_minus_i)
#define LOAD LANE_FN(cl_load)
#define STORE LANE_FN(cl_store)

/* ---- Stockham stages: y[(g * radix + r) * span + k] = DFT_radix(x[j + q * m] w^(q k))[r] ----
 * with j = g * span + k, m = n / radix butterflies and w = exp(-2 pi i / (span * radix)).
 * The twiddles of one k are tw[2 * (k * (radix - 1) + q - 1)] (cos, -sin), q = 1..radix-1. */
#define STAGE_LOOP(...)                                                                        \
    const int m = n / st->radix, span = st->span;                                              \
    for (int g = 0; g < m / span; g++) {                                                       \
        for (int k = 0; k < span; k++) {                                                       \
            const int j = g * span + k, out = g * span * st->radix + k;                        \
            const float *tw = st->twiddles + 2 * k * (st->radix - 1);                          \
            __VA_ARGS__                                                                        \
        }                                                                                      \
    }

static void LANE_FN(stage2)(const fft_stage_t *st, int n, const lanes_t *xr, const lanes_t *xi,
                            lanes_t *restrict yr, lanes_t *restrict yi)
{
    STAGE_LOOP({
        const cl_t x0 = LOAD(xr, xi, j);
        const cl_t x1 = ROTATE(LOAD(xr, xi, j + m), tw[0], tw[1]);
        STORE(yr, yi, out, ADD(x0, x1));
        STORE(yr, yi, out + span, SUB(x0, x1));
    })
}

static void LANE_FN(stage3)(const fft_stage_t *st, int n, const lanes_t *xr, const lanes_t *xi,
                            lanes_t *restrict yr, lanes_t *restrict yi)
{
    const float sin60 = 0.86602540378443864676f;
    STAGE_LOOP({
        const cl_t x0 = LOAD(xr, xi, j);
        const cl_t x1 = ROTATE(LOAD(xr, xi, j + m), tw[0], tw[1]);
        const cl_t x2 = ROTATE(LOAD(xr, xi, j + 2 * m), tw[2], tw[3]);
        const cl_t sum = ADD(x1, x2);
        const cl_t half = SUB(x0, SCALE(sum, 0.5f));
        const cl_t turn = SCALE(MINUS_I(SUB(x1, x2)), sin60);
        STORE(yr, yi, out, ADD(x0, sum));
        STORE(yr, yi, out + span, ADD(half, turn));
        STORE(yr, yi, out + 2 * span, SUB(half, turn));
    })
}

static void LANE_FN(stage4)(const fft_stage_t *st, int n, const lanes_t *xr, const lanes_t *xi,
                            lanes_t *restrict yr, lanes_t *restrict yi)
{
    STAGE_LOOP({
        const cl_t x0 = LOAD(xr, xi, j);
        const cl_t x1 = ROTATE(LOAD(xr, xi, j + m), tw[0], tw[1]);
        const cl_t x2 = ROTATE(LOAD(xr, xi, j + 2 * m), tw[2], tw[3]);
        const cl_t x3 = ROTATE(LOAD(xr, xi, j + 3 * m), tw[4], tw[5]);
        const cl_t even_sum = ADD(x0, x2), even_diff = SUB(x0, x2);
        const cl_t odd_sum = ADD(x1, x3), odd_diff = MINUS_I(SUB(x1, x3));
        STORE(yr, yi, out, ADD(even_sum, odd_sum));
        STORE(yr, yi, out + span, ADD(even_diff, odd_diff));
        STORE(yr, yi, out + 2 * span, SUB(even_sum, odd_sum));
        STORE(yr, yi, out + 3 * span, SUB(even_diff, odd_diff));
    })
}

static void LANE_FN(stage5)(const fft_stage_t *st, int n, const lanes_t *xr, const lanes_t *xi,
                            lanes_t *restrict yr, lanes_t *restrict yi)
{
    /* cos and sin of 2 pi / 5 and 4 pi / 5 */
    const float c1 = 0.30901699437494742410f, c2 = -0.80901699437494742410f;
    const float s1 = 0.95105651629515357212f, s2 = 0.58778525229247312917f;
    STAGE_LOOP({
        const cl_t x0 = LOAD(xr, xi, j);
        const cl_t x1 = ROTATE(LOAD(xr, xi, j + m), tw[0], tw[1]);
        const cl_t x2 = ROTATE(LOAD(xr, xi, j + 2 * m), tw[2], tw[3]);
        const cl_t x3 = ROTATE(LOAD(xr, xi, j + 3 * m), tw[4], tw[5]);
        const cl_t x4 = ROTATE(LOAD(xr, xi, j + 4 * m), tw[6], tw[7]);
        const cl_t sum14 = ADD(x1, x4), sum23 = ADD(x2, x3);
        const cl_t diff14 = SUB(x1, x4), diff23 = SUB(x2, x3);
        const cl_t real1 = ADD(x0, ADD(SCALE(sum14, c1), SCALE(sum23, c2)));
        const cl_t real2 = ADD(x0, ADD(SCALE(sum14, c2), SCALE(sum23, c1)));
        const cl_t imag1 = MINUS_I(ADD(SCALE(diff14, s1), SCALE(diff23, s2)));
        const cl_t imag2 = MINUS_I(SUB(SCALE(diff14, s2), SCALE(diff23, s1)));
        STORE(yr, yi, out, ADD(x0, ADD(sum14, sum23)));
        STORE(yr, yi, out + span, ADD(real1, imag1));
        STORE(yr, yi, out + 2 * span, ADD(real2, imag2));
        STORE(yr, yi, out + 3 * span, SUB(real2, imag2));
        STORE(yr, yi, out + 4 * span, SUB(real1, imag1));
    })
}

/* any other prime radix: the radix-point DFT by its definition (roots[2 q] = cos, -sin of
 * 2 pi q / radix) */
static void LANE_FN(stage_any)(const fft_stage_t *st, int n, const lanes_t *xr, const lanes_t *xi,
                               lanes_t *restrict yr, lanes_t *restrict yi)
{
    const int radix = st->radix;
    cl_t x[PIM_AUDIO_MAX_RADIX];
    STAGE_LOOP({
        x[0] = LOAD(xr, xi, j);
        for (int q = 1; q < radix; q++)
            x[q] = ROTATE(LOAD(xr, xi, j + q * m), tw[2 * (q - 1)], tw[2 * (q - 1) + 1]);
        for (int r = 0; r < radix; r++) {
            cl_t y = x[0];
            for (int q = 1; q < radix; q++) {
                const int at = (q * r) % radix;
                y = ADD(y, ROTATE(x[q], st->roots[2 * at], st->roots[2 * at + 1]));
            }
            STORE(yr, yi, out + r * span, y);
        }
    })
}

/* The complex FFT of plan->size points of LANES frames, from (re, im) using (tmp_re, tmp_im);
 * returns 1 when the result ends in (tmp_re, tmp_im), 0 when in (re, im). */
static int LANE_FN(fft)(const fft_plan_t *plan, lanes_t *re, lanes_t *im, lanes_t *tmp_re,
                        lanes_t *tmp_im)
{
    lanes_t *xr = re, *xi = im, *yr = tmp_re, *yi = tmp_im;
    for (int s = 0; s < plan->n_stages; s++) {
        const fft_stage_t *st = &plan->stages[s];
        switch (st->radix) {
        case 2: LANE_FN(stage2)(st, plan->size, xr, xi, yr, yi); break;
        case 3: LANE_FN(stage3)(st, plan->size, xr, xi, yr, yi); break;
        case 4: LANE_FN(stage4)(st, plan->size, xr, xi, yr, yi); break;
        case 5: LANE_FN(stage5)(st, plan->size, xr, xi, yr, yi); break;
        default: LANE_FN(stage_any)(st, plan->size, xr, xi, yr, yi); break;
        }
        lanes_t *swap_r = xr, *swap_i = xi;
        xr = yr, xi = yi, yr = swap_r, yi = swap_i;
    }
    return xr == tmp_re;
}

/* ---- one group of LANES frames: window, FFT, one-sided spectrum ------------------------- */

/* frame t0 + l starts at signal + (t0 + l) * hop; lanes past `count` repeat the last frame */
static void LANE_FN(load_frames)(const fft_plan_t *plan, const float *window, const float *signal,
                                 int64_t first, int hop, int count, lanes_t *re, lanes_t *im)
{
    const float *start[LANES];
    for (int l = 0; l < LANES; l++)
        start[l] = signal + (first + (l < count ? l : count - 1)) * (int64_t)hop;
    if (plan->real_split) { /* z[p] = x[2p] + i x[2p + 1] */
        for (int p = 0; p < plan->size; p++) {
            const float w_even = window[2 * p], w_odd = window[2 * p + 1];
            for (int l = 0; l < LANES; l++) {
                re[p][l] = w_even * start[l][2 * p];
                im[p][l] = w_odd * start[l][2 * p + 1];
            }
        }
    } else {
        for (int p = 0; p < plan->size; p++) {
            for (int l = 0; l < LANES; l++)
                re[p][l] = window[p] * start[l][p];
            im[p] = (lanes_t){0};
        }
    }
}

/* X[k], k = 0..n_fft/2, from the complex FFT Z of the packed frames: with M = n_fft / 2,
 * X[k] = E + exp(-2 pi i k / n_fft) O, E = (Z[k] + conj Z[M - k]) / 2,
 * O = -i (Z[k] - conj Z[M - k]) / 2, Z[M] = Z[0] */
static void LANE_FN(one_sided)(const fft_plan_t *plan, const lanes_t *zr, const lanes_t *zi,
                               lanes_t *restrict xr, lanes_t *restrict xi)
{
    const int size = plan->size;
    if (!plan->real_split) {
        for (int k = 0; k <= plan->n_fft / 2; k++)
            STORE(xr, xi, k, LOAD(zr, zi, k));
        return;
    }
    for (int k = 0; k <= size; k++) {
        const cl_t z = LOAD(zr, zi, k % size);
        const cl_t z_mirror = LOAD(zr, zi, (size - k) % size);
        const cl_t conj_mirror = {z_mirror.re, -z_mirror.im};
        const cl_t even = SCALE(ADD(z, conj_mirror), 0.5f);
        const cl_t odd = SCALE(MINUS_I(SUB(z, conj_mirror)), 0.5f);
        STORE(xr, xi, k, ADD(even, ROTATE(odd, plan->post[2 * k], plan->post[2 * k + 1])));
    }
}

/* the spectrum of LANES frames (their windowed samples in re, im) into xr, xi */
static void LANE_FN(spectrum)(const fft_plan_t *plan, lanes_t *work, lanes_t *xr, lanes_t *xi)
{
    const int size = plan->size;
    lanes_t *re = work, *im = re + size, *tmp_re = im + size, *tmp_im = tmp_re + size;
    const int in_tmp = LANE_FN(fft)(plan, re, im, tmp_re, tmp_im);
    LANE_FN(one_sided)(plan, in_tmp ? tmp_re : re, in_tmp ? tmp_im : im, xr, xi);
}

/* |X|^power into xr */
static void LANE_FN(power_bins)(float power, lanes_t *xr, const lanes_t *xi, int n_bins)
{
    for (int k = 0; k < n_bins; k++)
        xr[k] = xr[k] * xr[k] + xi[k] * xi[k];
    if (power == 2.0f)
        return;
    if (power == 1.0f) {
        for (int k = 0; k < n_bins; k++)
            for (int l = 0; l < LANES; l++)
                xr[k][l] = sqrtf(xr[k][l]);
        return;
    }
    for (int k = 0; k < n_bins; k++)
        for (int l = 0; l < LANES; l++)
            xr[k][l] = powf(xr[k][l], 0.5f * power);
}

static inline __attribute__((always_inline)) void LANE_FN(store_row)(float *row, lanes_t value, int count)
{
    if (count == LANES)
        memcpy(row, &value, sizeof value);
    else
        for (int l = 0; l < count; l++)
            row[l] = value[l];
}

/* rows[c * frames + t0 + l]: the filter bank's outputs (or the bins themselves) */
static void LANE_FN(store_features)(const pim_audio_spec_t *spec, const lanes_t *bins, int n_bins,
                                    float *rows, int64_t frames, int64_t t0, int count)
{
    if (spec->n_mels == 0) {
        for (int k = 0; k < n_bins; k++)
            LANE_FN(store_row)(rows + k * frames + t0, bins[k], count);
        return;
    }
    for (int m = 0; m < spec->n_mels; m++) {
        const float *weight = spec->mel_weights + spec->mel_at[m];
        const lanes_t *bin = bins + spec->mel_first[m];
        lanes_t sum = {0};
        for (int i = 0; i < spec->mel_count[m]; i++)
            sum += weight[i] * bin[i];
        LANE_FN(store_row)(rows + m * frames + t0, sum, count);
    }
}

/* ---- one example ------------------------------------------------------------------------ */

/* the filter bank's (or spectrogram's) rows of one padded example into rows[channels][frames] */
static void LANE_FN(spectral_rows)(const pim_audio_spec_t *spec, const fft_plan_t *plan,
                                   const float *signal, int64_t frames, float *rows,
                                   float *work_memory)
{
    lanes_t *work = (lanes_t *)(void *)work_memory; /* work: 4 * plan->size + 2 * (n_fft / 2 + 1) lanes */
    const int n_bins = plan->n_fft / 2 + 1;
    lanes_t *xr = work + 4 * plan->size, *xi = xr + n_bins;
    for (int64_t t0 = 0; t0 < frames; t0 += LANES) {
        const int count = frames - t0 < LANES ? (int)(frames - t0) : LANES;
        LANE_FN(load_frames)(plan, spec->window, signal, t0, spec->hop_length, count, work,
                             work + plan->size);
        LANE_FN(spectrum)(plan, work, xr, xi);
        LANE_FN(power_bins)(spec->power, xr, xi, n_bins);
        LANE_FN(store_features)(spec, xr, n_bins, rows, frames, t0, count);
    }
}

/* the one-sided DFT of n frames of n_fft samples, window 1, into re, im (n x n_bins) */
static void LANE_FN(rfft_rows)(const fft_plan_t *plan, const float *ones, const float *frames,
                               int64_t n, float *re, float *im, float *work_memory)
{
    lanes_t *work = (lanes_t *)(void *)work_memory;
    const int n_bins = plan->n_fft / 2 + 1;
    lanes_t *xr = work + 4 * plan->size, *xi = xr + n_bins;
    for (int64_t t0 = 0; t0 < n; t0 += LANES) {
        const int count = n - t0 < LANES ? (int)(n - t0) : LANES;
        LANE_FN(load_frames)(plan, ones, frames, t0, plan->n_fft, count, work, work + plan->size);
        LANE_FN(spectrum)(plan, work, xr, xi);
        for (int l = 0; l < count; l++) {
            for (int k = 0; k < n_bins; k++) {
                re[(t0 + l) * n_bins + k] = xr[k][l];
                im[(t0 + l) * n_bins + k] = xi[k][l];
            }
        }
    }
}

/* ---- logarithms of a whole example -------------------------------------------------------
 * ln x = e ln 2 + ln m, x = 2^e m with m in [sqrt(1/2), sqrt(2)), and
 * ln m = 2 atanh s = 2 (s + s^3/3 + ... + s^11/11), s = (m - 1) / (m + 1), |s| < 0.172: the
 * series' remainder is below 2e-11, so the result is float32's rounding of ln x (a few ulp).
 * For positive normal x only: log_values checks its inputs first. */
static inline __attribute__((always_inline)) lanes_t LANE_FN(ln_lanes)(lanes_t x)
{
    const ilanes_t bits = (ilanes_t)x;
    const ilanes_t exponent = (bits - 0x3f3504f3) >> 23; /* 0x3f3504f3: sqrt(1/2) */
    const lanes_t m = (lanes_t)(bits - (exponent << 23));
    const lanes_t s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    const lanes_t series =
        1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9 + s2 * (1.0f / 11)))));
    const float ln2_high = 0.693145752f, ln2_low = 1.42860677e-06f; /* ln 2, split */
    const lanes_t e = __builtin_convertvector(exponent, lanes_t);
    return (e * ln2_high + (2.0f * s * series + e * ln2_low));
}

static inline __attribute__((always_inline)) lanes_t LANE_FN(select)(ilanes_t mask, lanes_t yes,
                                                                    lanes_t no)
{
    return (lanes_t)((mask & (ilanes_t)yes) | (~mask & (ilanes_t)no));
}

static inline __attribute__((always_inline)) lanes_t LANE_FN(log_input)(const pim_audio_spec_t *spec,
                                                                       lanes_t v)
{
    if (spec->log_kind == PIM_AUDIO_LOG_DB)
        return LANE_FN(select)(v < spec->amin, v * 0.0f + spec->amin, v);
    return v + spec->log_offset;
}

/* whether every log input is a positive normal float (else logf's special cases apply) */
static int LANE_FN(log_inputs_normal)(const pim_audio_spec_t *spec, const float *x, int64_t count)
{
    ilanes_t bad = {0};
    int64_t i = 0;
    for (; i + LANES <= count; i += LANES) {
        lanes_t v;
        memcpy(&v, x + i, sizeof v);
        v = LANE_FN(log_input)(spec, v);
        bad |= ~((v >= 1.17549435e-38f) & (v <= 3.40282347e+38f));
    }
    for (; i < count; i++) {
        lanes_t v = (lanes_t){0} + x[i];
        v = LANE_FN(log_input)(spec, v);
        bad[0] |= !(v[0] >= 1.17549435e-38f && v[0] <= 3.40282347e+38f);
    }
    int any = 0;
    for (int l = 0; l < LANES; l++)
        any |= bad[l] != 0;
    return !any;
}

/* ln(x + offset), or multiplier * log10(max(x, amin)) - db_offset, of `count` values; returns
 * the largest result */
static float LANE_FN(log_values)(const pim_audio_spec_t *spec, float *x, int64_t count)
{
    const int decibels = spec->log_kind == PIM_AUDIO_LOG_DB;
    const float scale = decibels ? spec->multiplier * 0.434294481903251827651f : 1.0f;
    const float offset = decibels ? spec->db_offset : 0.0f;
    float top = -INFINITY;
    if (!LANE_FN(log_inputs_normal)(spec, x, count)) {
        for (int64_t i = 0; i < count; i++) {
            const float floored = x[i] < spec->amin ? spec->amin : x[i]; /* NaN stays NaN */
            x[i] = decibels ? spec->multiplier * log10f(floored) - offset
                            : logf(x[i] + spec->log_offset);
            top = fmaxf(top, x[i]);
        }
        return top;
    }
    lanes_t tops = (lanes_t){0} - INFINITY;
    for (int64_t i = 0; i < count; i += LANES) {
        const int n = count - i < LANES ? (int)(count - i) : LANES;
        lanes_t v = (lanes_t){0} + 1.0f; /* the tail's padding */
        memcpy(&v, x + i, (size_t)n * sizeof(float));
        const lanes_t y = LANE_FN(ln_lanes)(LANE_FN(log_input)(spec, v)) * scale - offset;
        memcpy(x + i, &y, (size_t)n * sizeof(float));
        if (n == LANES)
            tops = LANE_FN(select)(y > tops, y, tops);
        else
            for (int l = 0; l < n; l++)
                top = fmaxf(top, y[l]);
    }
    for (int l = 0; l < LANES; l++)
        top = fmaxf(top, tops[l]);
    return top;
}

#undef ADD
#undef SUB
#undef SCALE
#undef ROTATE
#undef MINUS_I
#undef LOAD
#undef STORE
#undef STAGE_LOOP
#undef cl_t
#undef lanes_t
#undef ilanes_t
