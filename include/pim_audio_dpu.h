/* pim_audio_dpu.h: the host <-> DPU contract of the log-mel kernel (dpu_src/audio_features.c),
 * shared by the kernel and the host (pimloader/backends/dpu/audio.py packs the same layout
 * with numpy dtypes; tests/test_audio_dpu.py checks their sizes against these).
 *
 * What the host writes:
 *   DPU_AUDIO_ARGS (a __host WRAM variable, dpu_broadcast_to): pim_audio_args_t, the same on
 *       every DPU: the spectrogram's parameters, the FFT plan and the dB constants;
 *   MRAM heap [0, tables_bytes) (dpu_broadcast_to): the tables, at the args' offsets:
 *       window     int16[n_fft]             periodic Hann, centred in n_fft, Q15
 *       twiddles   int16[n_fft][2]          W_N^m = cos - i sin (2 pi m / N), Q15
 *       bin_pos    uint16[n_freqs]          frame-buffer slot of spectrum bin k
 *       mel_ranges uint16[n_mels][2]        first bin and bin count of each mel filter
 *       mel_weights uint16[n_weights]       the filters' weights in filter order, Q(mel_q)
 *       log2_table uint32[257]              log2(1 + i / 256) in Q16
 *   MRAM heap [chunk_off, ...) (dpu_prepare_xfer + dpu_push_xfer, one chunk per DPU):
 *       pim_audio_chunk_t, then n_samples x pim_audio_sample_t (at samples_off), then each
 *       clip's int16 PCM (8-byte aligned, padded to 8 bytes); in_bytes in all;
 *       at out_off: pim_audio_status_t, then each clip's output: frames rows of
 *       pim_audio_row_bytes(n_mels) bytes, int32 dB in Q16 (frame-major: [frames][n_mels]).
 * Every offset in the chunk counts from the chunk's start; every part is 8-byte aligned.
 * out_off is the same on every DPU of a batch, so one dpu_push_xfer(FROM_DPU) gathers them.
 */
#ifndef PIM_AUDIO_DPU_H
#define PIM_AUDIO_DPU_H

#include <stdint.h>

#define PIM_AUDIO_MAGIC 0x50494D41u       /* "PIMA" */
#define PIM_AUDIO_VERSION 1u
#define PIM_AUDIO_STATUS_OK 0x600D600Du
#define PIM_AUDIO_MAX_STAGES 12
#define PIM_AUDIO_MAX_MASKS 4
#define PIM_AUDIO_CACHE_BYTES 256         /* a tasklet's window onto a clip's PCM */
#define PIM_AUDIO_WRAM_BYTES 65536
#define PIM_AUDIO_WRAM_RESERVE 2048       /* the kernel's and the runtime's globals (assumed) */
#define PIM_AUDIO_MRAM_BUDGET 66060288u   /* MRAM bytes the tables and a chunk may use: 63 MB of 64 */
#define PIM_AUDIO_MAX_LENGTH (1u << 24)   /* samples of one clip (17 min at 16 kHz) */
#define PIM_AUDIO_LOG2_ENTRIES 257
#define PIM_AUDIO_FLAG_REFLECT 1u         /* reflect padding (else zeros) */
#define PIM_AUDIO_NO_TOP_DB (-1)

/* kernel-detected errors (pim_audio_status_t.code) */
#define PIM_AUDIO_ERR_HEADER 1            /* args or chunk header inconsistent */
#define PIM_AUDIO_ERR_BUILD 2             /* NR_TASKLETS differs from the host's */
#define PIM_AUDIO_ERR_TABLES 3            /* a table entry out of range */
#define PIM_AUDIO_ERR_SAMPLE 4            /* a clip's descriptor is invalid (detail says which check) */

/* test hooks (pim_audio_chunk_t.debug) */
#define PIM_AUDIO_DEBUG_HALT 1            /* the last tasklet calls halt(): a DPU fault */
#define PIM_AUDIO_DEBUG_BAD_DMA 2         /* tasklet 0 issues a misaligned mram_read: the emulator faults */

/* units of work a test build (-DPIM_AUDIO_COUNT_WORK) counts per tasklet in its __host
 * work_counts[NR_TASKLETS][PIM_AUDIO_WORK_UNITS] (uint64), in this order: the cost model's
 * (pimloader/costmodel/audio.py) counts are checked against them */
enum {
    PIM_AUDIO_WORK_SAMPLE, PIM_AUDIO_WORK_SCALE, PIM_AUDIO_WORK_PEAK, PIM_AUDIO_WORK_BF2, PIM_AUDIO_WORK_BF4,
    PIM_AUDIO_WORK_ODD_TERM, PIM_AUDIO_WORK_MUL_Q15, PIM_AUDIO_WORK_SQUARE, PIM_AUDIO_WORK_POWER_BIN,
    PIM_AUDIO_WORK_MEL_MAC, PIM_AUDIO_WORK_MEL_VALUE, PIM_AUDIO_WORK_MASK_VALUE, PIM_AUDIO_WORK_CLAMP_VALUE,
    PIM_AUDIO_WORK_FRAME, PIM_AUDIO_WORK_UNITS
};

typedef struct pim_audio_args {
    uint32_t magic, version;
    uint32_t n_fft, hop;
    uint32_t n_mels, n_freqs;
    uint32_t pad;             /* center padding: n_fft / 2, or 0 */
    uint32_t flags;           /* PIM_AUDIO_FLAG_* */
    uint32_t n_stages;        /* stages of the n_fft / 2-point complex FFT */
    uint32_t mel_q;           /* mel weights are Q(mel_q) */
    uint8_t radices[16];      /* first n_stages: 2, 3, 4 or 5 */
    int32_t log2_amin_q16;    /* log2(amin) in Q16: the floor of log2(mel power) */
    int32_t db_offset_q16;    /* 10 log10(max(amin, ref_value)) in Q16, subtracted */
    int32_t top_db_q16;       /* PIM_AUDIO_NO_TOP_DB, or top_db in Q16 */
    int32_t mask_value_q16;   /* what masked rows and columns become */
    uint32_t tables_bytes;    /* the tables block, at the MRAM heap's start */
    uint32_t window_off, twiddle_off, bin_pos_off, mel_ranges_off, mel_weights_off, log2_off;
    uint32_t n_weights;
    uint32_t nr_tasklets;     /* what the host planned with */
    uint32_t chunk_off;       /* this batch's chunks, after the tables */
    uint32_t power_bits;      /* power spectra are scaled to this many bits (mel sums fit 64) */
    uint32_t reserved;
} pim_audio_args_t;

typedef struct pim_audio_chunk {
    uint32_t magic;           /* PIM_AUDIO_MAGIC */
    uint32_t batch_id;        /* echoed in the status */
    uint32_t n_samples;
    uint32_t samples_off;
    uint32_t in_bytes;        /* bytes the host wrote, this header included */
    uint32_t out_off;         /* status, then the outputs */
    uint32_t out_bytes;       /* status + outputs */
    uint32_t debug;           /* PIM_AUDIO_DEBUG_*, 0 in production */
} pim_audio_chunk_t;

typedef struct pim_audio_sample {
    uint32_t pcm_off;         /* int16 PCM, from the chunk start */
    uint32_t length;          /* samples */
    uint32_t frames;          /* STFT frames (checked against length) */
    int32_t gain;             /* the PCM is the waveform x 2^(15 + gain) */
    uint32_t out_off;         /* from the chunk start */
    uint32_t reserved;
    uint16_t freq_masks[PIM_AUDIO_MAX_MASKS][2]; /* [start, end) mel rows; end <= start: none */
    uint16_t time_masks[PIM_AUDIO_MAX_MASKS][2]; /* [start, end) frames */
} pim_audio_sample_t;

typedef struct pim_audio_status {
    uint32_t code;            /* PIM_AUDIO_STATUS_OK or PIM_AUDIO_ERR_* */
    uint32_t batch_id;
    uint32_t sample;          /* index in the chunk of the clip an error is about */
    uint32_t detail;
} pim_audio_status_t;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(pim_audio_args_t) == 120, "pim_audio_args_t layout");
_Static_assert(sizeof(pim_audio_chunk_t) == 32, "pim_audio_chunk_t layout");
_Static_assert(sizeof(pim_audio_sample_t) == 56, "pim_audio_sample_t layout");
_Static_assert(sizeof(pim_audio_status_t) == 16, "pim_audio_status_t layout");
#endif

static inline uint32_t pim_audio_round8(uint32_t v)
{
    return (v + 7u) & ~7u;
}

/* Bytes of one output row (a frame's n_mels int32 values, padded to 8). */
static inline uint32_t pim_audio_row_bytes(uint32_t n_mels)
{
    return pim_audio_round8(4u * n_mels);
}

/* WRAM one tasklet takes from mem_alloc: the frame buffer (n_fft / 2 + 1 complex int32
 * slots, later the power of each as a 64-bit word), the PCM cache and one output row. */
static inline uint32_t pim_audio_tasklet_bytes(uint32_t n_fft, uint32_t n_mels)
{
    return pim_audio_round8(8u * (n_fft / 2u + 1u)) + PIM_AUDIO_CACHE_BYTES + pim_audio_row_bytes(n_mels);
}

#endif /* PIM_AUDIO_DPU_H */
