/* pim_audio.h: the fused audio feature kernel (csrc/audio_features.c), reached from Python
 * through the cffi module pimloader._audio (built by csrc/build_audio.py).
 *
 * One call turns a run of equal-length waveforms into features, each straight into its slot
 * of the output batch: pad -> frame -> window -> real FFT -> |X|^power -> mel filter bank ->
 * dB (or natural log) with the example's top_db floor -> DCT (MFCC) -> masks -> normalise.
 * Everything a host builds once per feature spec (window, filter bank, DCT matrix) arrives
 * through pim_audio_spec_t; the masks are drawn on the host, per example. */
#ifndef PIM_AUDIO_H
#define PIM_AUDIO_H

#include <stdint.h>

/* cffi-cdef-begin */
/* centre padding modes (torch.nn.functional.pad's) */
#define PIM_AUDIO_PAD_CONSTANT 0
#define PIM_AUDIO_PAD_REFLECT 1
#define PIM_AUDIO_PAD_REPLICATE 2
#define PIM_AUDIO_PAD_CIRCULAR 3

/* what follows the filter bank */
#define PIM_AUDIO_LOG_NONE 0
#define PIM_AUDIO_LOG_DB 1 /* multiplier * log10(max(x, amin)) - db_offset, then top_db */
#define PIM_AUDIO_LOG_LN 2 /* log(x + log_offset): MFCC's log_mels */

/* the last step */
#define PIM_AUDIO_NORM_NONE 0
#define PIM_AUDIO_NORM_PER_SAMPLE 1 /* (x - mean(x)) / (std(x) + eps), std with n - 1 */
#define PIM_AUDIO_NORM_FIXED 2      /* (x - mean) / std */

/* The largest radix the FFT factorises n_fft into (a larger prime factor is refused). */
#define PIM_AUDIO_MAX_RADIX 64

typedef struct {
    /* framing: the clip gets `pad` zeros on each side, then `center_pad` samples on each
     * side by pad_mode; frame t covers samples [t * hop_length, t * hop_length + n_fft) */
    int32_t n_fft;
    int32_t hop_length;
    int32_t pad;
    int32_t center_pad;
    int32_t pad_mode;
    float power;             /* |X|^power; 2 and 1 are exact special cases */
    const float *window;     /* n_fft weights (zero-padded, normalisation folded in) */
    /* filter bank (n_mels == 0: the n_fft / 2 + 1 bins are the features) */
    int32_t n_mels;
    const int32_t *mel_first; /* n_mels: first FFT bin of each filter */
    const int32_t *mel_count; /* n_mels: how many bins the filter spans */
    const int32_t *mel_at;    /* n_mels: where its weights start in mel_weights */
    const float *mel_weights;
    /* log */
    int32_t log_kind;
    float multiplier;
    float amin;
    float db_offset;     /* multiplier * db_multiplier */
    int32_t has_top_db;
    float top_db;
    float log_offset;
    /* DCT (n_mfcc == 0: none); dct is n_mels x n_mfcc, row-major, as torchaudio's dct_mat */
    int32_t n_mfcc;
    const float *dct;
    /* masks and normalisation of the output */
    float mask_value;
    int32_t norm_kind;
    float norm_mean;
    float norm_std;
    float norm_eps;
} pim_audio_spec_t;

/* Features of n_clips waveforms of `length` samples (row-major, float32) into out, n_clips x
 * rows x frames (row-major, float32), where rows is n_mfcc, n_mels or n_fft / 2 + 1 and
 * frames follows from the padded length. Each run of clips_per_example clips (the channels
 * of one example) shares one top_db floor and one per-example normalisation, as torchaudio's
 * AmplitudeToDB floors a (channel, freq, time) example. freq_masks and time_masks hold, per
 * clip, n_freq_masks and n_time_masks half-open [start, end) intervals of the rows and
 * frames, filled with mask_value (either may be NULL when its count is 0).
 * Returns 0 on success; -1 for an invalid spec, mask or waveform (a NaN or infinite sample;
 * message in err), -2 when memory for the scratch buffers is unavailable. Nothing is written
 * to out unless the arguments are valid. */
int pim_audio_features(const pim_audio_spec_t *spec, const float *waveforms, int64_t n_clips,
                       int64_t length, int64_t clips_per_example, const int32_t *freq_masks,
                       int32_t n_freq_masks, const int32_t *time_masks, int32_t n_time_masks,
                       float *out, int64_t rows, int64_t frames, char *err, int32_t err_len);

/* The one-sided DFT of n real frames of n_fft samples (row-major) into re and im, n x
 * (n_fft / 2 + 1): the FFT the feature kernel runs, exposed for tests. Returns 0, or -1 / -2
 * as above. */
int pim_audio_rfft(const float *frames, int64_t n, int32_t n_fft, float *re, float *im,
                   char *err, int32_t err_len);

/* Which loops run: 0 = portable, 1 = AVX2 + FMA clones. request -1 picks the best the CPU
 * has, 0..1 asks for at most that level. Returns the level now in use. Process-wide. */
int pim_audio_simd(int request);
/* cffi-cdef-end */

#endif /* PIM_AUDIO_H */
