/* audio_fft_plan.c: factorisation and twiddle tables of the audio kernel's real FFT.
 *
 * The complex size is split into radices 4 first (fewest passes), then 2, 3, 5 and any other
 * prime up to PIM_AUDIO_MAX_RADIX; n_fft = 400 (torchaudio's default) is a complex FFT of 200
 * = 4 * 2 * 5 * 5. Every table is computed in double and rounded once to float. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "pim_audio_fft.h"

static const double TWO_PI = 6.28318530717958647692;

/* the radices of n, in the order the stages run; 0 when a prime factor is too large */
static int factorise(int n, int *radices, int max_stages)
{
    static const int preferred[] = {4, 2, 3, 5};
    int count = 0;
    for (size_t i = 0; i < sizeof preferred / sizeof preferred[0]; i++) {
        while (n % preferred[i] == 0 && count < max_stages) {
            radices[count++] = preferred[i];
            n /= preferred[i];
        }
    }
    for (int p = 7; n > 1 && p <= PIM_AUDIO_MAX_RADIX; p += 2) {
        while (n % p == 0 && count < max_stages) {
            radices[count++] = p;
            n /= p;
        }
    }
    return n == 1 ? count : 0;
}

/* (cos, -sin) of 2 pi numerator / denominator */
static void put_root(float *at, long numerator, long denominator)
{
    const double angle = TWO_PI * (double)numerator / (double)denominator;
    at[0] = (float)cos(angle);
    at[1] = (float)-sin(angle);
}

static size_t table_floats(const int *radices, int n_stages, int size)
{
    size_t floats = 2 * (size_t)(size + 1); /* post */
    int span = 1;
    for (int s = 0; s < n_stages; s++) {
        floats += 2 * (size_t)span * (size_t)(radices[s] - 1) + 2 * (size_t)radices[s];
        span *= radices[s];
    }
    return floats;
}

int fft_plan_make(fft_plan_t *plan, int n_fft, char *err, int32_t err_len)
{
    int radices[PIM_AUDIO_MAX_STAGES];
    plan->memory = NULL;
    plan->n_fft = n_fft;
    plan->real_split = n_fft % 2 == 0 && n_fft >= 2;
    plan->size = plan->real_split ? n_fft / 2 : n_fft;
    plan->n_stages = factorise(plan->size, radices, PIM_AUDIO_MAX_STAGES);
    if (plan->n_stages == 0 && plan->size > 1) {
        snprintf(err, (size_t)err_len,
                 "n_fft=%d has a prime factor above %d, which the FFT does not run", n_fft,
                 PIM_AUDIO_MAX_RADIX);
        return -1;
    }
    float *table = malloc(table_floats(radices, plan->n_stages, plan->size) * sizeof(float));
    if (table == NULL)
        return -2;
    plan->memory = table;
    plan->post = table;
    for (int k = 0; k <= plan->size; k++)
        put_root(table + 2 * k, k, n_fft);
    table += 2 * (plan->size + 1);
    int span = 1;
    for (int s = 0; s < plan->n_stages; s++) {
        fft_stage_t *st = &plan->stages[s];
        st->radix = radices[s];
        st->span = span;
        st->twiddles = table;
        for (int k = 0; k < span; k++)
            for (int q = 1; q < st->radix; q++, table += 2)
                put_root(table, (long)q * k, (long)span * st->radix);
        st->roots = table;
        for (int q = 0; q < st->radix; q++, table += 2)
            put_root(table, q, st->radix);
        span *= st->radix;
    }
    return 0;
}

void fft_plan_free(fft_plan_t *plan)
{
    free(plan->memory);
    plan->memory = NULL;
}
