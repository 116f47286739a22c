/* pim_audio_wave.h: the waveform half of the audio pipeline in native code
 * (csrc/audio_waveform.c), reached through the cffi module pimloader._audio.
 *
 * - PCM decoding: the interleaved samples of a WAV data chunk -> float32 [channels][frames]
 *   as libsndfile scales them, or their channel mean (torch's waveform.mean(0)).
 * - Waveform steps: per clip, a list of operations drawn on the host (crop or pad, roll,
 *   gain, noise at an SNR), applied in order, the last one writing straight into the
 *   clip's slot of the batch the feature kernel reads.
 * - Resampling: torchaudio's sinc filters, applied polyphase over their non-zero taps. */
#ifndef PIM_AUDIO_WAVE_H
#define PIM_AUDIO_WAVE_H

#include <stdint.h>

/* cffi-cdef-begin */
/* sample formats of a WAV data chunk, little-endian, interleaved */
#define PIM_PCM_U8 0  /* unsigned 8 bit: (u - 128) / 128 */
#define PIM_PCM_S16 1 /* s / 2^15 */
#define PIM_PCM_S24 2 /* s / 2^23 */
#define PIM_PCM_S32 3 /* s / 2^31, rounded to float32 */
#define PIM_PCM_F32 4 /* as stored */
#define PIM_PCM_F64 5 /* rounded to float32 */

/* Decode `frames` interleaved frames of `channels` samples in `format` into out: float32
 * [channels][frames], or [1][frames] holding the channel mean ((s0 + s1 + ...) / channels,
 * summed in float32 in channel order, as torch's mean) when downmix is non-zero. Returns 0,
 * or -1 for an unknown format or a count below 1 (message in err). */
int pim_audio_pcm(const uint8_t *data, int64_t frames, int32_t channels, int32_t format,
                  int32_t downmix, float *out, char *err, int32_t err_len);

/* waveform operations on a clip [channels][length] */
#define PIM_WAVE_PLACE 0 /* samples [at, at + length) of the clip, `value` outside it */
#define PIM_WAVE_ROLL 1  /* torch.roll by `at` samples (positive: later) */
#define PIM_WAVE_GAIN 2  /* multiply by (float)value */
#define PIM_WAVE_NOISE 3 /* add noise `noise` from sample `at` (wrapping) at `value` dB SNR */

typedef struct {
    int32_t kind;
    int32_t noise;  /* NOISE: index into the noise table */
    int64_t at;     /* PLACE: first sample kept; ROLL: shift; NOISE: offset into the noise */
    int64_t length; /* PLACE: the new length */
    double value;   /* PLACE: fill; GAIN: factor; NOISE: SNR in dB */
} pim_wave_op_t;

typedef struct {
    const float *samples; /* [channels][length], channels 1 (mixed into every channel) or
                             the clip's */
    int64_t length;
    int32_t channels;
    int32_t pad_;
} pim_wave_noise_t;

/* Run the operations of n_clips clips: clip i starts from sources[i] ([channels][
 * source_lengths[i]]) and goes through ops[op_starts[i] .. op_starts[i + 1]) in order; the
 * result, which must be `length` samples long, goes to out + i * channels * length.
 * NOISE scales the noise per channel so that sum(x^2) / sum(n^2) = 10^(snr / 10) (nothing
 * is added for a silent stretch), as torchaudio.functional.add_noise. Every clip is checked
 * before anything is written. Returns 0, -1 for invalid operations (message in err), -2
 * without memory for the scratch buffers. */
int pim_audio_waveforms(const float *const *sources, const int64_t *source_lengths,
                        int64_t n_clips, int32_t channels, const pim_wave_op_t *ops,
                        const int64_t *op_starts, const pim_wave_noise_t *noises,
                        int32_t n_noises, float *out, int64_t length, char *err,
                        int32_t err_len);

/* Band-limited resampling as torchaudio's (transforms/_resample.py): rates divided by their
 * gcd, orig -> new, `new` filters of `taps` weights (float32 [new][taps], torchaudio's own).
 * Output k of a channel, for frame f = k / new and phase p = k mod new, is
 *   y[k] = sum_t filters[p][t] x[f orig + t - width],   x = 0 outside [0, length),
 * the sum over the taps [first[p], first[p] + count[p]) that are not zero (the others add
 * nothing), for k in [0, kept). x: [channels][length]; y: [channels][kept]. The sums run in
 * float32 in their own order (conv1d's differs: tests state the tolerance). Returns 0, -1
 * for invalid arguments (message in err), -2 without memory for the padded row. */
int pim_audio_resample(const float *x, int64_t length, int32_t channels, int32_t orig,
                       int32_t new_rate, int32_t width, const float *filters, int32_t taps,
                       const int32_t *first, const int32_t *count, float *y, int64_t kept,
                       char *err, int32_t err_len);
/* cffi-cdef-end */

#endif /* PIM_AUDIO_WAVE_H */
