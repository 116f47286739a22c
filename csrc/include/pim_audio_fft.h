/* pim_audio_fft.h: the FFT plan of the audio feature kernel (csrc/audio_fft_plan.c), which
 * its loops (csrc/audio_lanes.h) run. Host only. */
#ifndef PIM_AUDIO_FFT_H
#define PIM_AUDIO_FFT_H

#include <stdint.h>

#include "pim_audio.h"

/* the most frames a build of csrc/audio_lanes.h computes together (its LANES) */
#define MAX_LANES 8

#define PIM_AUDIO_MAX_STAGES 32

/* one Stockham stage: `radix`-point DFTs over outputs `span` apart (span = product of the
 * radices before it); twiddles[2 * (k * (radix - 1) + q - 1)] = cos, -sin of
 * 2 pi q k / (span * radix); roots[2 q] = cos, -sin of 2 pi q / radix (radix > 5 only) */
typedef struct {
    int radix;
    int span;
    const float *twiddles;
    const float *roots;
} fft_stage_t;

/* The real FFT of n_fft points: for even n_fft, a complex FFT of size n_fft / 2 over the
 * samples packed in pairs (real_split), then post[2 k] = cos, -sin of 2 pi k / n_fft to
 * separate the halves; for odd n_fft, a complex FFT of size n_fft of the real samples. */
typedef struct {
    int n_fft;
    int size;
    int real_split;
    int n_stages;
    fft_stage_t stages[PIM_AUDIO_MAX_STAGES];
    const float *post;
    float *memory; /* owns every table above */
} fft_plan_t;

/* 0, or -1 (n_fft not factorisable into radices <= PIM_AUDIO_MAX_RADIX: message in err), or
 * -2 (no memory). A plan that was made is freed by fft_plan_free. */
int fft_plan_make(fft_plan_t *plan, int n_fft, char *err, int32_t err_len);
void fft_plan_free(fft_plan_t *plan);

#endif /* PIM_AUDIO_FFT_H */
