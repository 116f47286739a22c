/* jpeg_decode.c: baseline JPEG decoding on a DPU (UPMEM DPU C), bit-identical to
 * libjpeg-turbo's default decode (islow IDCT, fancy upsampling, jdcolor.c's YCbCr->RGB).
 *
 * Input: one chunk at DPU_MRAM_HEAP_POINTER, laid out as pim_jpeg.h says: the images'
 * frames, their restart intervals (found by the host between RSTn markers), their tables in
 * lookup form, and the entropy-coded bytes. Images are decoded one after the other, by every
 * tasklet together:
 *
 *  1. tasklet 0 loads the image's descriptor and tables into WRAM (barrier);
 *  2. each tasklet takes the next restart interval, or run of consecutive ones (a shared
 *     counter) and, MCU by MCU, Huffman-decodes its blocks, dequantises and
 *     inverse-transforms them (jidctint.c's jpeg_idct_islow) into a strip of MCUs in WRAM,
 *     written out to the image's component planes in MRAM whenever the strip is full, the
 *     MCU row ends or the next interval does not follow on (barrier);
 *  3. each tasklet takes the next output row (of the image, or of a crop box in it, whose
 *     MCUs and their upsampling context the host sent): it reads the luma row and the chroma
 *     rows the row needs (jdsample.c's h2v1 / h1v2 / h2v2 "fancy" triangle filters read the nearest
 *     chroma row and the next nearest, and the columns either side, clamped at the image's
 *     edges as jdmainct.c's context rows are), upsamples, converts to RGB with jdcolor.c's
 *     fixed-point tables and writes the row to MRAM, `seg_w` pixels at a time (barrier).
 *
 * Whatever interval decoded a neighbouring row or column, step 3 reads it from the planes,
 * so the pixels are those of a whole-image decode. A corrupt interval fails its image alone
 * (its status names the interval and the cause); the other images of the chunk decode.
 * Every DMA is 8-byte aligned, a multiple of 8 bytes and at most 2048 bytes.
 *
 * Build: dpu-upmem-dpurte-clang -O2 -DNR_TASKLETS=16 -DSTACK_SIZE_DEFAULT=1024
 *        -I include -o jpeg_decode dpu_src/jpeg_decode.c
 */
#include <stdint.h>

#include <alloc.h>
#include <barrier.h>
#include <defs.h>
#include <mram.h>
#include <mutex.h>

#include "pim_jpeg.h"
#include "pim_dpu_mram.h"

#ifndef NR_TASKLETS
#define NR_TASKLETS 1
#endif
#ifndef STACK_SIZE_DEFAULT
#define STACK_SIZE_DEFAULT 1024
#endif

#define MAX_STRIP_MCUS 64
#define MAX_SEG_W 1024

BARRIER_INIT(step_barrier, NR_TASKLETS);
MUTEX_INIT(work_mutex);

static pim_jpeg_header_t header __dma_aligned;
static pim_jpeg_status_t chunk_status __dma_aligned;
static pim_jpeg_image_t image __dma_aligned;          /* the image being decoded */
static pim_jpeg_status_t image_status __dma_aligned;
static pim_jpeg_tables_t tables __dma_aligned;
static int16_t cr_r[256], cb_b[256]; /* jdcolor.c's build_ycc_rgb_table: R and B offsets */
static int32_t cr_g[256], cb_g[256]; /* G's, scaled by 2^16 */
static uint32_t chunk, arena_bytes, next_interval, next_row;

/* zigzag position -> natural (row-major) position in a block */
static const uint8_t natural_order[64] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

static inline uint32_t round8(uint32_t v) { return (v + 7u) & ~7u; }
static inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline int32_t clamp_index(int32_t i, int32_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }
static inline uint8_t clamp_sample(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }



static void fail_image(uint32_t code, uint32_t interval, uint32_t detail)
{
    mutex_lock(work_mutex);
    if (image_status.code == PIM_JPEG_STATUS_OK) {
        image_status.code = code;
        image_status.interval = interval;
        image_status.detail = detail;
    }
    mutex_unlock(work_mutex);
}

/* Claims the next `count` items (fewer at the end) of a shared counter; `limit` when none
 * is left or the image failed. */
static uint32_t take(uint32_t *counter, uint32_t limit, uint32_t count)
{
    mutex_lock(work_mutex);
    const uint32_t i = *counter;
    const int more = i < limit && image_status.code == PIM_JPEG_STATUS_OK;
    *counter = more ? i + min_u32(count, limit - i) : limit;
    mutex_unlock(work_mutex);
    return more ? i : limit;
}

/* ---- the bit reader: an interval's entropy-coded bytes, unstuffed --------------------- */

typedef struct {
    uint8_t *window;      /* PIM_JPEG_WINDOW bytes of WRAM */
    uint32_t base;        /* MRAM address of window[0] */
    uint32_t pos, len;    /* next byte in the window, bytes valid in it */
    uint32_t next, end;   /* MRAM: next address to fetch, past the interval's last byte */
    uint32_t acc;         /* bits, the next one at bit 31 */
    int32_t bits;         /* bits held in acc */
    int32_t padding_bits; /* of those, 1-bits fed past the end of the data */
    uint32_t error;
} reader_t;

static void reader_start(reader_t *r, uint8_t *window, uint32_t from, uint32_t bytes)
{
    r->window = window;
    r->pos = r->len = 0;
    r->next = from;
    r->end = from + bytes;
    r->acc = 0;
    r->bits = r->padding_bits = 0;
    r->error = 0;
}

/* The next byte of the interval, or 0x100 past its end. */
static uint32_t next_byte(reader_t *r)
{
    if (r->pos == r->len) {
        if (r->next >= r->end)
            return 0x100;
        const uint32_t base = r->next & ~7u;
        const uint32_t n = min_u32(round8(r->end) - base, PIM_JPEG_WINDOW);
        mram_read((__mram_ptr void const *)base, r->window, n);
        r->pos = r->next - base;
        r->len = min_u32(n, r->end - base);
        r->next = base + n;
    }
    return r->window[r->pos++];
}

/* Tops the accumulator up to at least 25 bits; past the data's end it feeds 1-bits (what
 * an encoder pads with) and counts them: using one is an error (checked per MCU). */
static void fill(reader_t *r)
{
    while (r->bits <= 24) {
        uint32_t byte = next_byte(r);
        if (byte == 0xFF) {
            const uint32_t stuffed = next_byte(r);
            if (stuffed != 0 && !r->error)
                r->error = PIM_JPEG_ERR_MARKER;
        } else if (byte == 0x100) {
            byte = 0xFF;
            r->padding_bits += 8;
        }
        r->acc |= byte << (24 - r->bits);
        r->bits += 8;
    }
}

static inline uint32_t get_bits(reader_t *r, uint32_t n) /* 1 <= n <= 16 */
{
    if (r->bits < (int32_t)n)
        fill(r);
    const uint32_t v = r->acc >> (32 - n);
    r->acc <<= n;
    r->bits -= (int32_t)n;
    return v;
}

/* jdhuff.h's HUFF_EXTEND: the s-bit magnitude v as a signed value */
static inline int32_t extend(uint32_t v, uint32_t s)
{
    return v < (1u << (s - 1)) ? (int32_t)v - (int32_t)((1u << s) - 1) : (int32_t)v;
}

static uint32_t decode_symbol(reader_t *r, const pim_jpeg_huff_t *t)
{
    if (r->bits < 16)
        fill(r);
    const uint32_t entry = t->look[r->acc >> (32 - PIM_JPEG_LOOKAHEAD)];
    uint32_t length = entry >> 8;
    if (length) {
        r->acc <<= length;
        r->bits -= (int32_t)length;
        return entry & 0xFF;
    }
    for (length = PIM_JPEG_LOOKAHEAD + 1; length <= 16; length++) {
        const int32_t code = (int32_t)(r->acc >> (32 - length));
        if (code <= t->maxcode[length]) {
            r->acc <<= length;
            r->bits -= (int32_t)length;
            return t->huffval[(uint32_t)(code + t->valoffset[length]) & 0xFF];
        }
    }
    if (!r->error)
        r->error = PIM_JPEG_ERR_HUFFMAN;
    return 0;
}

/* One block's coefficients in natural order (jdhuff.c's decode_mcu for one block); returns
 * how many AC coefficients it decoded. */
static uint32_t decode_block(reader_t *r, int16_t *coef, const pim_jpeg_component_t *c, int32_t *dc_pred)
{
    uint32_t decoded = 0;
    uint64_t *words = (uint64_t *)(void *)coef;
    for (uint32_t i = 0; i < 16; i++)
        words[i] = 0;
    const uint32_t s = decode_symbol(r, &tables.huff[c->dc]);
    if (s)
        *dc_pred += extend(get_bits(r, s), s);
    coef[0] = (int16_t)*dc_pred;
    const pim_jpeg_huff_t *ac = &tables.huff[c->ac];
    for (uint32_t k = 1; k < 64 && !r->error; k++) {
        const uint32_t rs = decode_symbol(r, ac), run = rs >> 4, size = rs & 15;
        if (size) {
            k += run;
            if (k > 63) {
                r->error = PIM_JPEG_ERR_COEFFICIENTS;
                return decoded;
            }
            coef[natural_order[k]] = (int16_t)extend(get_bits(r, size), size);
            decoded++;
        } else if (run == 15) {
            k += 15;
        } else {
            break;
        }
    }
    return decoded;
}

/* ---- the inverse DCT: jidctint.c's jpeg_idct_islow, integer for integer ---------------- */

#define CONST_BITS 13
#define PASS1_BITS 2
#define FIX_0_298631336 2446
#define FIX_0_390180644 3196
#define FIX_0_541196100 4433
#define FIX_0_765366865 6270
#define FIX_0_899976223 7373
#define FIX_1_175875602 9633
#define FIX_1_501321110 12299
#define FIX_1_847759065 15137
#define FIX_1_961570560 16069
#define FIX_2_053119869 16819
#define FIX_2_562915447 20995
#define FIX_3_072711026 25172
#define DESCALE(x, n) (((x) + (1 << ((n) - 1))) >> (n))

/* The exact range. libjpeg-turbo's SIMD IDCTs (x86 SSE2/AVX2, Arm NEON) dequantise and hold
 * the workspace in 16 bits (wrapping products, in0 +- in4, in7 + in3, in5 + in1 and the DC
 * shortcut's dq << 2, saturating or wrapping pass 1's outputs) and saturate the output to a
 * sample, where jidctint.c computes in 32/64 bits and wraps the output modulo 1024
 * (jdmaster.c's range limit). Within these bounds every one of them is exact, and so equal:
 * each dequantised coefficient and each pass-1 output in [-16384, 16383] (a DC-only column's
 * dequantised DC in [-4096, 4095]), each output in [-512, 511] (there C's range limit is a
 * clamp). The kernel's 32-bit arithmetic is exact there too (|sums| < 2^30). A block outside
 * them is not decoded here: idct_islow says so and the host decodes the image (docs/dpu.md,
 * "Exact on every file it takes"). Each check adds `v + bound` to an accumulator as unsigned:
 * any bit at or above 2 * bound means a value left [-bound, bound - 1]. */
#define WORK_BOUND 16384u
#define DC_BOUND 4096u
#define OUT_BOUND 512u

/* v + bound as unsigned: below 2 * bound exactly when v is in [-bound, bound - 1]. */
static inline uint32_t offset(int32_t v, uint32_t bound) { return (uint32_t)v + bound; }

static inline uint8_t idct_sample(int32_t v, uint32_t *out_spill)
{
    *out_spill |= offset(v, OUT_BOUND);
    return clamp_sample(v + 128);
}

/* The even and odd halves of one 1-D pass, on in[0], in[step], ..., in[7 step]. */
typedef struct {
    int32_t t10, t11, t12, t13, t0, t1, t2, t3;
} idct_parts_t;

static void idct_1d(int32_t i0, int32_t i1, int32_t i2, int32_t i3, int32_t i4, int32_t i5, int32_t i6,
                    int32_t i7, idct_parts_t *p)
{
    int32_t z1 = (i2 + i6) * FIX_0_541196100;
    const int32_t e2 = z1 + i6 * -FIX_1_847759065, e3 = z1 + i2 * FIX_0_765366865;
    const int32_t e0 = (i0 + i4) * (1 << CONST_BITS), e1 = (i0 - i4) * (1 << CONST_BITS);
    p->t10 = e0 + e3;
    p->t13 = e0 - e3;
    p->t11 = e1 + e2;
    p->t12 = e1 - e2;

    z1 = i7 + i1;
    int32_t z2 = i5 + i3, z3 = i7 + i3, z4 = i5 + i1;
    const int32_t z5 = (z3 + z4) * FIX_1_175875602;
    int32_t t0 = i7 * FIX_0_298631336, t1 = i5 * FIX_2_053119869;
    int32_t t2 = i3 * FIX_3_072711026, t3 = i1 * FIX_1_501321110;
    z1 *= -FIX_0_899976223;
    z2 *= -FIX_2_562915447;
    z3 = z3 * -FIX_1_961570560 + z5;
    z4 = z4 * -FIX_0_390180644 + z5;
    p->t0 = t0 + z1 + z3;
    p->t1 = t1 + z2 + z4;
    p->t2 = t2 + z2 + z3;
    p->t3 = t3 + z1 + z4;
}

/* Pass 1's column outputs into w (a workspace column); their offsets from WORK_BOUND ORed. */
static inline uint32_t column_out(const idct_parts_t *p, int32_t *w)
{
    const int n = CONST_BITS - PASS1_BITS;
    const int32_t w0 = DESCALE(p->t10 + p->t3, n), w7 = DESCALE(p->t10 - p->t3, n);
    const int32_t w1 = DESCALE(p->t11 + p->t2, n), w6 = DESCALE(p->t11 - p->t2, n);
    const int32_t w2 = DESCALE(p->t12 + p->t1, n), w5 = DESCALE(p->t12 - p->t1, n);
    const int32_t w3 = DESCALE(p->t13 + p->t0, n), w4 = DESCALE(p->t13 - p->t0, n);
    w[0] = w0, w[8] = w1, w[16] = w2, w[24] = w3, w[32] = w4, w[40] = w5, w[48] = w6, w[56] = w7;
    return offset(w0, WORK_BOUND) | offset(w1, WORK_BOUND) | offset(w2, WORK_BOUND) | offset(w3, WORK_BOUND) |
           offset(w4, WORK_BOUND) | offset(w5, WORK_BOUND) | offset(w6, WORK_BOUND) | offset(w7, WORK_BOUND);
}

/* jidctint.c's jpeg_idct_islow of one block into out; nonzero (and out unfinished) when
 * the block leaves the exact range above. */
static uint32_t idct_islow(const int16_t *coef, const uint16_t *quant, int32_t *ws, uint8_t *out, uint32_t stride)
{
    idct_parts_t p;
    uint32_t work_spill = 0, out_spill = 0;
    for (uint32_t col = 0; col < 8; col++) { /* pass 1: columns, dequantised */
        const int16_t *in = coef + col;
        const uint16_t *q = quant + col;
        int32_t *w = ws + col;
        const int32_t d0 = in[0] * (int32_t)q[0];
        if (!(in[8] | in[16] | in[24] | in[32] | in[40] | in[48] | in[56])) {
            if (offset(d0, DC_BOUND) >= 2 * DC_BOUND)
                return 1;
            const int32_t dc = d0 * (1 << PASS1_BITS);
            for (uint32_t r = 0; r < 8; r++)
                w[8 * r] = dc;
            continue;
        }
        const int32_t d1 = in[8] * (int32_t)q[8], d2 = in[16] * (int32_t)q[16], d3 = in[24] * (int32_t)q[24];
        const int32_t d4 = in[32] * (int32_t)q[32], d5 = in[40] * (int32_t)q[40], d6 = in[48] * (int32_t)q[48];
        const int32_t d7 = in[56] * (int32_t)q[56];
        if ((offset(d0, WORK_BOUND) | offset(d1, WORK_BOUND) | offset(d2, WORK_BOUND) | offset(d3, WORK_BOUND) |
             offset(d4, WORK_BOUND) | offset(d5, WORK_BOUND) | offset(d6, WORK_BOUND) | offset(d7, WORK_BOUND)) >=
            2 * WORK_BOUND) /* before any sum that could overflow */
            return 1;
        idct_1d(d0, d1, d2, d3, d4, d5, d6, d7, &p);
        work_spill |= column_out(&p, w);
    }
    if (work_spill >= 2 * WORK_BOUND)
        return 1;
    for (uint32_t row = 0; row < 8; row++, out += stride) { /* pass 2: rows */
        const int32_t *w = ws + 8 * row;
        if (!(w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7])) {
            const uint8_t dc = idct_sample(DESCALE(w[0], PASS1_BITS + 3), &out_spill);
            for (uint32_t x = 0; x < 8; x++)
                out[x] = dc;
            continue;
        }
        idct_1d(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], &p);
        const int n = CONST_BITS + PASS1_BITS + 3;
        out[0] = idct_sample(DESCALE(p.t10 + p.t3, n), &out_spill);
        out[7] = idct_sample(DESCALE(p.t10 - p.t3, n), &out_spill);
        out[1] = idct_sample(DESCALE(p.t11 + p.t2, n), &out_spill);
        out[6] = idct_sample(DESCALE(p.t11 - p.t2, n), &out_spill);
        out[2] = idct_sample(DESCALE(p.t12 + p.t1, n), &out_spill);
        out[5] = idct_sample(DESCALE(p.t12 - p.t1, n), &out_spill);
        out[3] = idct_sample(DESCALE(p.t13 + p.t0, n), &out_spill);
        out[4] = idct_sample(DESCALE(p.t13 - p.t0, n), &out_spill);
    }
    return out_spill >= 2 * OUT_BOUND;
}

/* ---- step 2: restart intervals into the component planes ----------------------------- */

typedef struct {
    uint8_t *window;           /* compressed bytes */
    int16_t *coef;             /* one block */
    int32_t *ws;               /* the IDCT's workspace */
    uint8_t *strip;            /* up to strip_mcus MCUs, component after component */
    uint32_t strip_mcus;
    uint32_t strip_off[PIM_JPEG_MAX_COMPONENTS]; /* each component's part of the strip */
    uint32_t strip_w[PIM_JPEG_MAX_COMPONENTS];   /* and its row length */
} decode_bufs_t;

#define DECODE_FIXED_BYTES (PIM_JPEG_WINDOW + 64 * 2 + 64 * 4)

static uint32_t blocks_per_mcu(void)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < image.n_comp; c++)
        n += image.comp[c].h * image.comp[c].v;
    return n;
}

static uint32_t mcu_bytes(void) { return 64 * blocks_per_mcu(); }

static int plan_decode(uint8_t *arena, decode_bufs_t *b)
{
    b->window = arena;
    b->coef = (int16_t *)(void *)(arena + PIM_JPEG_WINDOW);
    b->ws = (int32_t *)(void *)(arena + PIM_JPEG_WINDOW + 128);
    b->strip = arena + DECODE_FIXED_BYTES;
    b->strip_mcus = min_u32((arena_bytes - DECODE_FIXED_BYTES) / mcu_bytes(), MAX_STRIP_MCUS);
    uint32_t off = 0;
    for (uint32_t c = 0; c < image.n_comp; c++) {
        b->strip_off[c] = off;
        b->strip_w[c] = b->strip_mcus * image.comp[c].h * 8;
        off += b->strip_w[c] * image.comp[c].v * 8;
    }
    return b->strip_mcus > 0;
}

/* The MCUs in a tasklet's strip: k of them, from MCU column mx0 of MCU row my. The strip
 * goes on across the consecutive intervals a tasklet takes, so that its writes are long. */
typedef struct {
    uint32_t mx0, my, k;
} strip_t;

/* Writes the strip's MCUs to the planes and empties it. */
static void flush_strip(const decode_bufs_t *b, strip_t *s)
{
    for (uint32_t ci = 0; ci < image.n_comp && s->k; ci++) {
        const pim_jpeg_component_t *c = &image.comp[ci];
        const uint32_t rows = c->v * 8, bytes = s->k * c->h * 8;
        uint32_t to = chunk + c->plane_off + s->my * rows * c->plane_w + s->mx0 * c->h * 8;
        for (uint32_t r = 0; r < rows; r++, to += c->plane_w)
            write_big(b->strip + b->strip_off[ci] + r * b->strip_w[ci], to, bytes);
    }
    s->k = 0;
}

/* One more MCU in the strip: flushed when the strip is full or the MCU row ends. */
static void strip_push(const decode_bufs_t *b, strip_t *s)
{
    const uint32_t mx = s->mx0 + ++s->k;
    if (s->k == b->strip_mcus || mx == image.mcus_x) {
        flush_strip(b, s);
        s->mx0 = mx == image.mcus_x ? 0 : mx;
        s->my += mx == image.mcus_x;
    }
}

/* Makes the strip start at MCU `first`, unless it already continues there. */
static void strip_start(const decode_bufs_t *b, strip_t *s, uint32_t first)
{
    if (s->k && first == s->my * image.mcus_x + s->mx0 + s->k)
        return;
    flush_strip(b, s);
    s->mx0 = first % image.mcus_x;
    s->my = first / image.mcus_x;
}

/* Decodes restart interval `index` of the image into the strip (and so into the planes). */
static void decode_interval(uint32_t index, const decode_bufs_t *b, strip_t *s)
{
    pim_jpeg_interval_t iv __dma_aligned;
    read_big(chunk + header.intervals_off + (image.first_interval + index) * (uint32_t)sizeof(iv), &iv, sizeof(iv));
    const uint32_t total_mcus = image.mcus_x * image.mcus_y;
    if (iv.n_mcus == 0 || iv.first_mcu >= total_mcus || iv.n_mcus > total_mcus - iv.first_mcu ||
        iv.data_offset < header.data_off || iv.data_offset > header.in_bytes ||
        iv.data_bytes > header.in_bytes - iv.data_offset) {
        fail_image(PIM_JPEG_ERR_IMAGE, index, 1);
        return;
    }
    strip_start(b, s, iv.first_mcu);
    reader_t r;
    reader_start(&r, b->window, chunk + iv.data_offset, iv.data_bytes);
    int32_t dc_pred[PIM_JPEG_MAX_COMPONENTS] = {0, 0, 0};
    uint32_t ac_coefficients = 0;
    for (uint32_t n = 0; n < iv.n_mcus; n++) {
        for (uint32_t ci = 0; ci < image.n_comp; ci++) {
            const pim_jpeg_component_t *c = &image.comp[ci];
            for (uint32_t by = 0; by < c->v; by++)
                for (uint32_t bx = 0; bx < c->h; bx++) {
                    ac_coefficients += decode_block(&r, b->coef, c, &dc_pred[ci]);
                    uint8_t *out = b->strip + b->strip_off[ci] + by * 8 * b->strip_w[ci] + (s->k * c->h + bx) * 8;
                    if (idct_islow(b->coef, tables.quant[ci], b->ws, out, b->strip_w[ci]) && !r.error)
                        r.error = PIM_JPEG_ERR_RANGE;
                }
        }
        if (!r.error && r.padding_bits > r.bits)
            r.error = PIM_JPEG_ERR_SHORT;
        if (r.error) {
            fail_image(r.error, index, iv.first_mcu + n);
            s->k = 0;
            return;
        }
        strip_push(b, s);
    }
    /* every byte used, but for the last one's padding bits */
    const uint32_t unused_bits = (uint32_t)(r.bits - r.padding_bits) + 8 * (r.len - r.pos) +
                                 (r.next < r.end ? 8 * (r.end - r.next) : 0);
    if (unused_bits >= 8) {
        fail_image(PIM_JPEG_ERR_LONG, index, unused_bits);
        return;
    }
    mutex_lock(work_mutex);
    image_status.mcus += iv.n_mcus;
    image_status.blocks += iv.n_mcus * blocks_per_mcu();
    image_status.ac_coefficients += ac_coefficients;
    image_status.entropy_bytes += iv.data_bytes;
    mutex_unlock(work_mutex);
}

/* ---- step 3: planes into RGB (or grey) rows ----------------------------------------- */

typedef struct {
    uint32_t seg_w;            /* output pixels per pass, a multiple of 8 */
    uint8_t *luma, *near, *far, *cb, *cr, *out;
    int16_t *sums;             /* a chroma row's values before the horizontal filter */
} row_bufs_t;

/* Bytes of a segment's buffers for seg_w = w: luma, the nearer and further chroma rows (each
 * with the columns either side, aligned), the int16 row of values the horizontal filter
 * reads, Cb, Cr and the RGB output. */
#define ROW_BUFS_BYTES(w) (9 * (w) + 96)

static int plan_rows(uint8_t *arena, row_bufs_t *b)
{
    uint32_t w = ((arena_bytes - 96) / 9) & ~7u;
    b->seg_w = w = min_u32(w, MAX_SEG_W);
    b->luma = arena;
    b->near = b->luma + w + 16;
    b->far = b->near + w + 16;
    b->sums = (int16_t *)(void *)(b->far + w + 16);
    b->cb = (uint8_t *)(b->sums + w / 2 + 24);
    b->cr = b->cb + w;
    b->out = b->cr + w;
    return w > 0 && (uint32_t)(b->out + 3 * w - arena) <= arena_bytes;
}

/* Columns [lo, hi) of plane row y into buf: buf[i] is column a + i; returns a. */
static uint32_t read_plane_row(const pim_jpeg_component_t *c, uint32_t y, uint32_t lo, uint32_t hi, uint8_t *buf)
{
    const uint32_t a = lo & ~7u, b = min_u32(round8(hi), c->plane_w);
    read_big(chunk + c->plane_off + y * c->plane_w + a, buf, b - a);
    return a;
}

/* libjpeg-turbo's horizontal triangle filter (jdsample.c's h2v1 and, on column sums, h2v2):
 * output column x = 2j takes (3 v[j] + v[j-1] + even_bias) >> shift, x = 2j + 1 takes
 * (3 v[j] + v[j+1] + odd_bias) >> shift, v indexed by chroma column and clamped to
 * [0, cw - 1]; out[i] is column x0 + i. */
static void h2_filter(const int16_t *v, int32_t cw, uint32_t x0, uint32_t n, int32_t even_bias, int32_t odd_bias,
                      uint32_t shift, uint8_t *out)
{
    uint32_t i = 0, x = x0;
    if (x & 1) { /* a box starting on an odd column: its first pixel alone */
        const int32_t j = (int32_t)(x >> 1), right = j + 1 < cw ? j + 1 : cw - 1;
        out[i++] = (uint8_t)((3 * v[j] + v[right] + odd_bias) >> shift);
        x++;
    }
    for (; i + 1 < n; i += 2, x += 2) {
        const int32_t j = (int32_t)(x >> 1), here = 3 * v[j];
        const int32_t left = j > 0 ? j - 1 : 0, right = j + 1 < cw ? j + 1 : cw - 1;
        out[i] = (uint8_t)((here + v[left] + even_bias) >> shift);
        out[i + 1] = (uint8_t)((here + v[right] + odd_bias) >> shift);
    }
    if (i < n) {
        const int32_t j = (int32_t)(x >> 1), left = j > 0 ? j - 1 : 0;
        out[i] = (uint8_t)((3 * v[j] + v[left] + even_bias) >> shift);
    }
}

/* Component c's samples for output row y, columns [x0, x0 + n), upsampled as libjpeg-turbo's
 * jdsample.c does (fancy: the triangle filters; else replication), into out. */
static void upsample_segment(const pim_jpeg_component_t *c, const row_bufs_t *b, uint32_t y, uint32_t x0,
                             uint32_t n, uint8_t *out)
{
    const int32_t cw = (int32_t)c->comp_w;
    const uint32_t near_y = y / c->vx;
    const int vertical = c->vx == 2 && c->fancy;
    const uint32_t far_y = (uint32_t)clamp_index((int32_t)near_y + ((y & 1) ? 1 : -1), (int32_t)c->comp_h);
    const uint32_t lo = c->hx == 2 ? (uint32_t)clamp_index((int32_t)(x0 / 2) - 1, cw) : x0;
    const uint32_t hi = c->hx == 2 ? min_u32((x0 + n - 1) / 2 + 2, c->comp_w) : x0 + n;
    const uint32_t a = read_plane_row(c, near_y, lo, hi, b->near);
    if (vertical)
        read_plane_row(c, far_y, lo, hi, b->far);
    const uint8_t *nr = b->near - a, *fr = b->far - a; /* indexed by plane column */
    if (c->hx == 1) {
        if (!vertical) { /* 4:4:4 */
            for (uint32_t i = 0; i < n; i++)
                out[i] = nr[x0 + i];
            return;
        }
        const int32_t bias = (y & 1) ? 2 : 1; /* h1v2: 3:1 down, the nearer row 3 */
        for (uint32_t i = 0; i < n; i++)
            out[i] = (uint8_t)((3 * nr[x0 + i] + fr[x0 + i] + bias) >> 2);
        return;
    }
    if (!c->fancy) { /* 2 chroma columns or fewer: replication */
        for (uint32_t i = 0; i < n; i++)
            out[i] = nr[(x0 + i) >> 1];
        return;
    }
    int16_t *v = b->sums - lo; /* the filter's values, indexed by chroma column */
    for (uint32_t j = lo; j < hi; j++)
        v[j] = (int16_t)(vertical ? 3 * nr[j] + fr[j] : nr[j]);
    if (vertical)
        h2_filter(v, cw, x0, n, 8, 7, 4, out); /* h2v2, on column sums */
    else
        h2_filter(v, cw, x0, n, 1, 2, 2, out); /* h2v1 */
}

/* Row `row` of the image's box: `seg_w` pixels at a time, from the planes to MRAM. */
static void make_row(uint32_t row, const row_bufs_t *b)
{
    const uint32_t out_row = chunk + image.out_offset + row * image.out_pitch, y = image.box_top + row;
    const pim_jpeg_component_t *luma = &image.comp[0];
    for (uint32_t x0 = 0; x0 < image.box_w; x0 += b->seg_w) {
        const uint32_t n = min_u32(b->seg_w, image.box_w - x0), x = image.box_left + x0;
        const uint8_t *l = b->luma + (x - read_plane_row(luma, y, x, x + n, b->luma));
        if (image.n_comp == 1) {
            for (uint32_t i = 0; i < n; i++)
                b->out[i] = l[i];
            for (uint32_t i = n; i < round8(n); i++) /* the row's padding: zeros, not stale WRAM */
                b->out[i] = 0;
            write_big(b->out, out_row + x0, round8(n));
            continue;
        }
        upsample_segment(&image.comp[1], b, y, x, n, b->cb);
        upsample_segment(&image.comp[2], b, y, x, n, b->cr);
        for (uint32_t i = 0; i < n; i++) { /* jdcolext.c's ycc_rgb_convert */
            const int32_t l_i = l[i], cb = b->cb[i], cr = b->cr[i];
            b->out[3 * i] = clamp_sample(l_i + cr_r[cr]);
            b->out[3 * i + 1] = clamp_sample(l_i + ((cb_g[cb] + cr_g[cr]) >> 16));
            b->out[3 * i + 2] = clamp_sample(l_i + cb_b[cb]);
        }
        const uint32_t bytes = min_u32(3 * b->seg_w, image.out_pitch - 3 * x0);
        for (uint32_t i = 3 * n; i < bytes; i++) /* the row's padding: zeros, not stale WRAM */
            b->out[i] = 0;
        write_big(b->out, out_row + 3 * x0, bytes);
    }
}

/* ---- tasklet 0's set-up --------------------------------------------------------------- */

static void build_colour_tables(void)
{
    for (int32_t i = 0; i < 256; i++) {
        const int32_t x = i - 128;
        cr_r[i] = (int16_t)((91881 * x + 32768) >> 16);  /* FIX(1.40200) */
        cb_b[i] = (int16_t)((116130 * x + 32768) >> 16); /* FIX(1.77200) */
        cr_g[i] = -46802 * x;                 /* -FIX(0.71414) */
        cb_g[i] = -22554 * x + 32768;         /* -FIX(0.34414), + ONE_HALF */
    }
}

static int header_ok(void)
{
    const pim_jpeg_header_t *h = &header;
    return h->magic == PIM_JPEG_MAGIC && h->version == PIM_JPEG_VERSION && h->images_off % 8 == 0 &&
           h->intervals_off % 8 == 0 && h->tables_off % 8 == 0 && h->data_off % 8 == 0 && h->out_off % 8 == 0 &&
           h->work_off % 8 == 0 && h->in_bytes <= h->out_off &&
           h->out_bytes >= (h->n_images + 1) * (uint64_t)sizeof(pim_jpeg_status_t) &&
           h->out_off + (uint64_t)h->out_bytes <= h->work_off && h->work_off <= PIM_JPEG_MRAM_BUDGET &&
           h->images_off + h->n_images * (uint64_t)sizeof(pim_jpeg_image_t) <= h->in_bytes &&
           h->intervals_off + h->n_intervals * (uint64_t)sizeof(pim_jpeg_interval_t) <= h->in_bytes &&
           h->tables_off <= h->data_off && h->data_off <= h->in_bytes;
}

static int component_ok(const pim_jpeg_component_t *c)
{
    const uint64_t plane_end = c->plane_off + (uint64_t)c->plane_w * c->plane_h;
    return c->h >= 1 && c->h <= 2 && c->v >= 1 && c->v <= 2 && c->hx >= 1 && c->hx <= 2 && c->vx >= 1 &&
           c->vx <= 2 && c->dc < 4 && c->ac < 4 && c->plane_w % 8 == 0 && c->plane_off % 8 == 0 &&
           c->plane_w >= image.mcus_x * c->h * 8 && c->plane_h >= image.mcus_y * c->v * 8 && c->comp_w >= 1 &&
           c->comp_w <= c->plane_w && c->comp_h >= 1 && c->comp_h <= c->plane_h &&
           image.width <= c->comp_w * c->hx && image.height <= c->comp_h * c->vx &&
           c->plane_off >= header.work_off && plane_end <= PIM_JPEG_MRAM_BUDGET;
}

static int image_ok(void)
{
    const pim_jpeg_image_t *im = &image;
    const uint64_t out_end = im->out_offset + (uint64_t)im->box_h * im->out_pitch;
    const uint64_t outputs = header.out_off + (header.n_images + 1) * (uint64_t)sizeof(pim_jpeg_status_t);
    if ((im->n_comp != 1 && im->n_comp != 3) || im->width == 0 || im->height == 0 || im->mcus_x == 0 ||
        im->mcus_y == 0 || (uint64_t)im->mcus_x * im->mcus_y > 0xFFFFFFFFu || im->n_intervals == 0 ||
        im->first_interval + (uint64_t)im->n_intervals > header.n_intervals || im->tables_offset % 8 ||
        header.tables_off + im->tables_offset + (uint64_t)sizeof(tables) > header.data_off ||
        im->box_h == 0 || im->box_w == 0 || im->box_top + (uint64_t)im->box_h > im->height ||
        im->box_left + (uint64_t)im->box_w > im->width || im->out_pitch != round8(im->box_w * im->n_comp) ||
        im->out_offset % 8 || im->out_offset < outputs ||
        out_end > header.out_off + (uint64_t)header.out_bytes)
        return 0;
    for (uint32_t c = 0; c < im->n_comp; c++)
        if (!component_ok(&im->comp[c]))
            return 0;
    if (im->comp[0].hx != 1 || im->comp[0].vx != 1) /* luma is never upsampled */
        return 0;
    return im->n_comp == 1 || (im->comp[1].hx == im->comp[2].hx && im->comp[1].vx == im->comp[2].vx);
}

static void load_image(uint32_t i)
{
    next_interval = next_row = 0;
    image_status.code = PIM_JPEG_STATUS_OK;
    image_status.batch_id = header.batch_id;
    image_status.interval = image_status.detail = 0;
    image_status.mcus = image_status.blocks = image_status.ac_coefficients = image_status.entropy_bytes = 0;
    read_big(chunk + header.images_off + i * (uint32_t)sizeof(image), &image, sizeof(image));
    if (!image_ok()) {
        image_status.code = PIM_JPEG_ERR_IMAGE;
        return;
    }
    read_big(chunk + header.tables_off + image.tables_offset, &tables, sizeof(tables));
}

static void set_up_chunk(void)
{
    mem_reset();
    chunk = (uint32_t)DPU_MRAM_HEAP_POINTER;
    arena_bytes = pim_jpeg_arena_bytes(NR_TASKLETS, STACK_SIZE_DEFAULT);
    mram_read((__mram_ptr void const *)chunk, &header, sizeof(header));
    chunk_status.code = PIM_JPEG_STATUS_OK;
    chunk_status.batch_id = header.batch_id;
    chunk_status.interval = chunk_status.detail = 0;
    chunk_status.mcus = chunk_status.blocks = chunk_status.ac_coefficients = chunk_status.entropy_bytes = 0;
    if (!header_ok())
        chunk_status.code = PIM_JPEG_ERR_HEADER;
    else if (header.nr_tasklets != NR_TASKLETS || header.arena_bytes != arena_bytes || arena_bytes == 0)
        chunk_status.code = PIM_JPEG_ERR_BUILD;
    build_colour_tables();
}

static void decode_image(uint8_t *arena)
{
    decode_bufs_t db;
    if (!plan_decode(arena, &db))
        fail_image(PIM_JPEG_ERR_WRAM, 0, mcu_bytes());
    /* runs of consecutive intervals that fill a strip, if every tasklet still gets one */
    uint32_t run = image.restart_mcus ? db.strip_mcus / image.restart_mcus : 1;
    run = run < 1 ? 1 : min_u32(run, image.n_intervals / NR_TASKLETS ? image.n_intervals / NR_TASKLETS : 1);
    strip_t strip = {0, 0, 0};
    for (uint32_t i; (i = take(&next_interval, image.n_intervals, run)) < image.n_intervals;) {
        for (uint32_t j = i; j < min_u32(i + run, image.n_intervals) && image_status.code == PIM_JPEG_STATUS_OK; j++)
            decode_interval(j, &db, &strip);
        flush_strip(&db, &strip);
    }
    barrier_wait(&step_barrier);
    row_bufs_t rb;
    if (!plan_rows(arena, &rb))
        fail_image(PIM_JPEG_ERR_WRAM, 0, arena_bytes);
    for (uint32_t row; (row = take(&next_row, image.box_h, 1)) < image.box_h;)
        make_row(row, &rb);
}

int main(void)
{
    const uint32_t id = me();
    if (id == 0)
        set_up_chunk();
    barrier_wait(&step_barrier);
    if (chunk_status.code != PIM_JPEG_STATUS_OK)
        goto done;
    uint8_t *arena = (uint8_t *)mem_alloc(arena_bytes);
    for (uint32_t k = 0; k < arena_bytes; k += 4) /* row padding goes to MRAM: no stale WRAM in it */
        *(uint32_t *)(arena + k) = 0;
    if (header.debug == PIM_JPEG_DEBUG_HALT && id == 0)
        halt();
    for (uint32_t i = 0; i < header.n_images; i++) {
        if (id == 0)
            load_image(i);
        barrier_wait(&step_barrier);
        if (image_status.code == PIM_JPEG_STATUS_OK)
            decode_image(arena);
        else
            barrier_wait(&step_barrier); /* decode_image's own barrier */
        barrier_wait(&step_barrier);
        if (id == 0)
            mram_write(&image_status, (__mram_ptr void *)(chunk + header.out_off + (i + 1) * sizeof(image_status)),
                       sizeof(image_status));
    }
done:
    if (id == 0 && header.magic == PIM_JPEG_MAGIC && header.out_off % 8 == 0 &&
        header.out_off + (uint64_t)sizeof(chunk_status) <= PIM_JPEG_MRAM_BUDGET)
        mram_write(&chunk_status, (__mram_ptr void *)(chunk + header.out_off), sizeof(chunk_status));
    return 0;
}
