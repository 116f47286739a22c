/* axis_tables.c: the pim_axis_t table of one resampled axis (pim_params.h), as torch
 * computes the weights of its uint8 antialiased resize.
 *
 * This is ATen's _compute_indices_min_size_weights_aa and
 * _compute_index_ranges_int16_weights (UpSampleKernel.cpp), operation for operation in
 * double precision, sequential sums included, so that the rounded int16 weights are the
 * same numbers. pimloader/_kernels_api.py keeps a numpy transcription of the same steps
 * (axis_weights), against which tests/test_kernels.py checks this one. Compiled with
 * -ffp-contract=off: no product may be fused into a sum.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pim_cpu.h"
#include "pim_params.h"

static double linear_filter(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Keys' cubic with a = -0.5, as torch (antialias=True) and Pillow */
static double cubic_filter(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

typedef struct {
    uint32_t k_max;     /* weights per output before padding */
    uint32_t precision;
    uint32_t *first, *count;
    int16_t *w16;       /* n_out x k_max */
} axis_weights_t;

/* Weights in double, normalised per output; returns the largest (0 when all are zero). */
static double float_weights(uint32_t n_in, uint32_t n_out, double (*filter)(double),
                            double support, double scale, axis_weights_t *aw, double *w)
{
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    double w_max = 0.0;
    int any = 0;
    for (uint32_t i = 0; i < n_out; i++) {
        const double center = scale * (i + 0.5);
        int64_t first = (int64_t)trunc(center - support + 0.5);
        int64_t end = (int64_t)trunc(center + support + 0.5);
        double *row = w + (size_t)i * aw->k_max, total = 0.0;
        first = first > 0 ? first : 0;
        end = end < (int64_t)n_in ? end : (int64_t)n_in;
        int64_t count = end - first;
        count = count < 0 ? 0 : (count > (int64_t)aw->k_max ? (int64_t)aw->k_max : count);
        aw->first[i] = (uint32_t)first;
        aw->count[i] = (uint32_t)count;
        for (uint32_t j = 0; j < aw->k_max; j++) {
            row[j] = (int64_t)j < count
                         ? filter(((double)((int64_t)j + first) - center + 0.5) * invscale)
                         : 0.0;
            total = total + row[j];
        }
        if (total == 0.0)
            continue;
        for (uint32_t j = 0; j < aw->k_max; j++) {
            row[j] = row[j] / total;
            if (!any || row[j] > w_max)
                w_max = row[j];
            any = 1;
        }
    }
    return w_max;
}

static int compute_weights(uint32_t n_in, uint32_t n_out, uint32_t interpolation,
                           axis_weights_t *aw)
{
    const double interp_size = interpolation == PIM_INTERP_BICUBIC ? 4.0 : 2.0;
    double (*filter)(double) = interpolation == PIM_INTERP_BICUBIC ? cubic_filter
                                                                   : linear_filter;
    const double scale = (double)n_in / (double)n_out;
    const double support = scale >= 1.0 ? (interp_size * 0.5) * scale : interp_size * 0.5;
    aw->k_max = (uint32_t)ceil(support) * 2 + 1;
    double *w = malloc((size_t)n_out * aw->k_max * sizeof(double));
    aw->first = malloc((size_t)n_out * sizeof(uint32_t));
    aw->count = malloc((size_t)n_out * sizeof(uint32_t));
    aw->w16 = malloc((size_t)n_out * aw->k_max * sizeof(int16_t));
    if (w == NULL || aw->first == NULL || aw->count == NULL || aw->w16 == NULL) {
        free(w);
        return 0;
    }
    const double w_max = float_weights(n_in, n_out, filter, support, scale, aw, w);
    uint32_t precision = 0;
    while (precision < 22 &&
           (int64_t)(0.5 + w_max * (double)(1 << (precision + 1))) < (1 << 15))
        precision++;
    aw->precision = precision;
    const double unit = (double)(1 << precision);
    for (size_t k = 0; k < (size_t)n_out * aw->k_max; k++) {
        const double v = w[k] * unit;
        aw->w16[k] = (int16_t)(v < 0 ? trunc(-0.5 + v) : trunc(0.5 + v));
    }
    free(w);
    return 1;
}

size_t pim_axis_table(uint32_t n_in, uint32_t n_out, uint32_t interpolation, uint32_t start,
                      uint32_t count, uint8_t *out, size_t out_size)
{
    pim_axis_t header = {n_in, count, 0, 0};
    axis_weights_t aw = {0, 0, NULL, NULL, NULL};
    size_t need;

    if (n_in < 1 || n_out < 1 || count < 1 || (uint64_t)start + count > n_out ||
        (interpolation != PIM_INTERP_BILINEAR && interpolation != PIM_INTERP_BICUBIC))
        return 0;
    if (n_in == n_out) { /* not resampled (torch skips this pass): header only */
        if (start != 0 || count != n_out)
            return 0;
        if (out != NULL && out_size >= sizeof header)
            memcpy(out, &header, sizeof header);
        return sizeof header;
    }
    if (!compute_weights(n_in, n_out, interpolation, &aw)) {
        free(aw.first);
        free(aw.count);
        free(aw.w16);
        return 0;
    }
    header.taps = (aw.k_max + 3u) & ~3u;
    header.precision = aw.precision;
    size_t weight_bytes = (size_t)count * header.taps * sizeof(int16_t);
    weight_bytes += -weight_bytes & 7u;
    need = sizeof header + (size_t)count * sizeof(pim_range_t) + weight_bytes;
    if (out != NULL && out_size >= need) {
        pim_range_t *ranges = (pim_range_t *)(void *)(out + sizeof header);
        int16_t *weights = (int16_t *)(void *)(ranges + count);
        memcpy(out, &header, sizeof header);
        memset(weights, 0, weight_bytes);
        for (uint32_t i = 0; i < count; i++) {
            ranges[i].first = aw.first[start + i];
            ranges[i].count = aw.count[start + i];
            memcpy(weights + (size_t)i * header.taps, aw.w16 + (size_t)(start + i) * aw.k_max,
                   aw.k_max * sizeof(int16_t));
        }
    }
    free(aw.first);
    free(aw.count);
    free(aw.w16);
    return need;
}
