/* jpeg_seek_index.c: seeking into baseline JPEGs that have no restart markers.
 *
 * Without restart markers a crop can only be reached by Huffman-decoding every MCU before
 * it and every MCU of each row it spans (jpeg_restart.c explains how restart markers lift
 * this). A seek index records, once, where the entropy-coded data stands at every k-th MCU
 * of each row (k: 64 pixels' worth, 4 MCUs of 16 pixels or 8 of 8), and past the last:
 * the bit position and each component's DC prediction there. With it, the MCUs of each
 * row around a box (jpeg_restart.c's pl_seek_box: whole k-MCU steps, a margin of upsampling
 * context) are cut out of the original data and written, row after row, as one scan of a
 * JPEG of the rectangle's size (pl_decode_indexed in jpeg_decode.c decodes it):
 *
 *   - a row's data begins at any bit: it is copied shifted by that many bits (32 bytes a
 *     step with AVX2 where no 0xFF is in the way) and 0xFF bytes are stuffed again
 *     (B.1.1.5) as they fall in the copy;
 *   - the DC coefficient is coded as the difference from the previous block of its
 *     component (F.1.2.1): the first block of each component in a row's first MCU has its
 *     difference re-encoded from what the copy decodes before it (the previous row's last
 *     values; 0 at the top). Every other code is copied as it is, so the coefficients,
 *     hence the pixels, are the original's;
 *   - a DC table fitted to the file (optimised Huffman tables) may lack the magnitude
 *     category of such a difference: the missing categories are added to the copy's table
 *     as codes of 16 bits after every existing code, which leaves the existing codes as
 *     they are (C.2: codes are assigned in order of length, then of HUFFVAL).
 *
 * The copy has no restart markers on purpose: libjpeg-turbo decodes a scan with a restart
 * interval with its slow Huffman decoder only (jdhuff.c, decode_mcu).
 *
 * Section numbers are those of ITU-T T.81. No index is made for what this does not
 * cover: progressive, arithmetic or 12-bit files, restart markers (those seek already),
 * several scans, 2 or 4 components, a bad Huffman code, data that ends before the last
 * MCU. An index carries a fingerprint of the file's bytes and is used on those only.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pim_jpeg.h"
#include "pim_jpeg_restart.h"
#include "pim_jpeg_seek_index.h"

#define LOOK_BITS 9
#define MAX_SCAN_COMPONENTS 3

typedef struct {
    uint8_t bits[17];        /* BITS[1..16]: codes of each length */
    uint8_t values[256];     /* HUFFVAL */
    int count;
    int32_t maxcode[18];     /* largest code of each length, -1 if none (F.2.2.3) */
    int32_t valoffset[18];   /* values[code + valoffset[length]] */
    uint16_t look[1 << LOOK_BITS]; /* length << 8 | value for codes of <= LOOK_BITS bits */
    uint16_t code_of[256];   /* encoding: each symbol's code and length (0: no code) */
    uint8_t length_of[256];
} pl_huff;

typedef struct {
    pl_restart_layout layout;           /* geometry, as jpeg_restart.c's (interval = k) */
    size_t sos_at;                      /* the SOS marker's 0xFF */
    int scan_components;
    int blocks_h[MAX_SCAN_COMPONENTS], blocks_v[MAX_SCAN_COMPONENTS];
    int dc_table[MAX_SCAN_COMPONENTS], ac_table[MAX_SCAN_COMPONENTS];
    int dc_defined, ac_defined;         /* bit t: table t defined */
    pl_huff dc[4], ac[4];               /* (valid where defined: not cleared) */
} pl_scan;

/* ---------------------------------------------------------------- tables ---------- */

/* C.2 and F.2.2.3: canonical codes of BITS/HUFFVAL. 0 for a table no decoder accepts. */
static int pl_huff_build(pl_huff *t)
{
    int32_t code = 0, k = 0;

    memset(t->look, 0, sizeof(t->look));
    memset(t->length_of, 0, sizeof(t->length_of));
    for (int length = 1; length <= 16; length++) {
        t->maxcode[length] = -1;
        t->valoffset[length] = k - code;
        for (int c = 0; c < t->bits[length]; c++, code++, k++) {
            if (k >= t->count || code >= (1 << length))
                return 0;
            t->code_of[t->values[k]] = (uint16_t)code;
            t->length_of[t->values[k]] = (uint8_t)length;
            if (length <= LOOK_BITS) {
                const int shift = LOOK_BITS - length;
                for (int32_t next = code << shift; next < (code + 1) << shift; next++)
                    t->look[next] = (uint16_t)(length << 8 | t->values[k]);
            }
        }
        if (t->bits[length])
            t->maxcode[length] = code - 1;
        code <<= 1;
    }
    t->maxcode[17] = 0x7FFFFFFF;
    return 1;
}

/* Gives the DC difference categories 0..11 that a table lacks codes: appended as the last
 * codes of 16 bits. 1 when it changed; 0 when it lacked none or has no room left. (A
 * difference of category 12 or more, +-2048 and beyond, cannot occur between 8-bit
 * samples' DC values: the copy is then not made.) */
static int pl_huff_complete_dc(pl_huff *t)
{
    pl_huff grown;
    int missing = 0;

    for (int category = 0; category <= 11; category++)
        missing += t->length_of[category] == 0;
    if (missing == 0 || t->count + missing > 256)
        return 0;
    grown = *t;
    for (int category = 0; category <= 11; category++)
        if (t->length_of[category] == 0)
            grown.values[grown.count++] = (uint8_t)category;
    grown.bits[16] += (uint8_t)missing;
    if (!pl_huff_build(&grown))
        return 0;
    *t = grown;
    return 1;
}

/* --------------------------------------------------------------- bit reading ------ */

typedef struct {
    const uint8_t *data;
    size_t at, end;          /* next raw byte; the end of the data */
    uint64_t buffer;         /* bits, left-aligned */
    int bits;
    int marker;              /* a marker was reached: zeros are read from there */
    uint64_t loaded;         /* data bytes loaded into buffer */
    uint64_t real;           /* of them, read from the data (not zeros past a marker) */
} pl_reader;

static uint64_t pl_load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* whether any byte of v is 0xFF */
static int pl_has_ff(uint64_t v)
{
    const uint64_t t = ~v;
    return ((t - 0x0101010101010101ull) & ~t & 0x8080808080808080ull) != 0;
}

static void pl_reader_fill(pl_reader *r)
{
    if (!r->marker && r->at + 8 <= r->end) { /* no 0xFF among the next bytes: all at once */
        const uint64_t v = pl_load_be64(r->data + r->at);
        if (!pl_has_ff(v)) {
            const int n = (64 - r->bits) >> 3, total = r->bits + 8 * n;
            r->buffer |= (v >> r->bits) & (total >= 64 ? ~0ull : ~(~0ull >> total));
            r->bits += 8 * n;
            r->at += (size_t)n;
            r->loaded += (uint64_t)n;
            r->real += (uint64_t)n;
            return;
        }
    }
    while (r->bits <= 56) {
        uint64_t byte = 0;
        if (!r->marker && r->at < r->end) {
            byte = r->data[r->at];
            if (byte != 0xFF)
                r->at++;
            else if (r->at + 1 < r->end && r->data[r->at + 1] == 0x00)
                r->at += 2; /* a stuffed 0xFF */
            else
                r->marker = 1;
            if (!r->marker)
                r->real++;
            else
                byte = 0;
        } else {
            r->marker = 1; /* the data ends: zeros from here, as past a marker */
        }
        r->loaded++;
        r->buffer |= byte << (56 - r->bits);
        r->bits += 8;
    }
}

static void pl_reader_start(pl_reader *r, const uint8_t *data, size_t at, size_t end, int skip)
{
    memset(r, 0, sizeof(*r));
    r->data = data;
    r->at = at;
    r->end = end;
    pl_reader_fill(r);
    r->buffer <<= skip;
    r->bits -= skip;
}

static uint32_t pl_peek(pl_reader *r, int n)
{
    if (r->bits < n)
        pl_reader_fill(r);
    return (uint32_t)(r->buffer >> (64 - n));
}

static void pl_skip(pl_reader *r, int n)
{
    r->buffer <<= n;
    r->bits -= n;
}

static uint32_t pl_get(pl_reader *r, int n)
{
    uint32_t v;
    if (n == 0)
        return 0;
    v = pl_peek(r, n);
    pl_skip(r, n);
    return v;
}

/* Bits read so far: whether they all came from the data, and where the next one is. */
static int pl_reader_in_data(const pl_reader *r)
{
    return r->loaded * 8 - (uint64_t)r->bits <= r->real * 8;
}

/* Where the next bit is: its position in data bits, the raw offset of its data byte (the
 * buffered bytes counted back from the next raw byte; 0xFF 0x00 is one data byte) and the
 * bits of that byte before it. Only while every bit read came from the data. */
static void pl_reader_position(const pl_reader *r, uint64_t *bit, uint32_t *offset, uint8_t *skip)
{
    size_t at = r->at;

    /* the buffered bytes past a marker are zeros of no raw byte */
    for (int64_t back = (r->bits + 7) / 8 - (int64_t)(r->loaded - r->real); back > 0; back--)
        at -= (at >= 2 && r->data[at - 1] == 0x00 && r->data[at - 2] == 0xFF) ? 2 : 1;
    *bit = r->loaded * 8 - (uint64_t)r->bits;
    *offset = (uint32_t)at;
    *skip = (uint8_t)((8 - r->bits % 8) % 8);
}

/* F.2.2.1: the value of a difference of `s` extra bits */
static int32_t pl_extend(uint32_t v, int s)
{
    return s == 0 ? 0 : (v < (1u << (s - 1)) ? (int32_t)v - (1 << s) + 1 : (int32_t)v);
}

/* --------------------------------------------------------------- bit writing ------ */

typedef struct {
    uint8_t *p;
    uint64_t pending;        /* `count` bits not yet written, right-aligned */
    int count;
} pl_writer;

/* The whole bytes of the pending bits, a 0xFF followed by a stuffed 0x00 (B.1.1.5) */
static void pl_flush_bytes(pl_writer *w)
{
    while (w->count >= 8) {
        const uint8_t byte = (uint8_t)(w->pending >> (w->count - 8));
        *w->p++ = byte;
        if (byte == 0xFF)
            *w->p++ = 0x00;
        w->count -= 8;
    }
}

static void pl_put(pl_writer *w, uint32_t bits, int n)
{
    if (n == 0)
        return;
    w->pending = (w->pending << n) | (bits & (uint32_t)((1ull << n) - 1));
    w->count += n;
    if (w->count >= 32) { /* four bytes at once when none of them is 0xFF */
        const uint32_t word = (uint32_t)(w->pending >> (w->count - 32));
        if (!pl_has_ff(0x0101010100000000ull | word)) {
            const uint32_t big = __builtin_bswap32(word);
            memcpy(w->p, &big, 4);
            w->p += 4;
            w->count -= 32;
        }
    }
    pl_flush_bytes(w);
}

/* F.1.2.3: the scan ends byte-aligned, padded with 1 bits */
static void pl_pad(pl_writer *w)
{
    if (w->count)
        pl_put(w, 0xFF, 8 - w->count);
}

/* 56 bits (right-aligned in v) at once: seven bytes stored together when none is 0xFF */
static void pl_put56(pl_writer *w, uint64_t v)
{
    uint64_t first;

    w->pending = (w->pending << 56) | v;
    w->count += 56;
    first = (w->pending >> (w->count - 56)) & ((1ull << 56) - 1); /* the next 7 bytes */
    if (!pl_has_ff(first | 1ull << 56)) {
        const uint64_t big = __builtin_bswap64(first << 8);
        memcpy(w->p, &big, 8); /* its 8th byte is written over by what follows */
        w->p += 7;
        w->count -= 56;
    }
    pl_flush_bytes(w);
}

static void pl_copy_bits_one_by_one(pl_writer *w, pl_reader *r, uint64_t n)
{
    for (; n >= 56; n -= 56) {
        if (r->bits < 56)
            pl_reader_fill(r);
        pl_put56(w, r->buffer >> 8);
        r->buffer <<= 56;
        r->bits -= 56;
    }
    for (; n >= 32; n -= 32)
        pl_put(w, pl_get(r, 32), 32);
    pl_put(w, pl_get(r, (int)n), (int)n);
}

/* ---- the bulk of a copy, 32 bytes a step --------------------------------------------
 * Once the reader stands at a byte of the data, the copy is that byte stream shifted right
 * by the c bits the writer holds: output byte j = (in[j - 1] << (8 - c) | in[j] >> c) & 0xFF
 * (in[-1]: the writer's bits). Where 32 input bytes and their 32 output bytes hold no 0xFF
 * (no stuffed byte to drop, none to add), they are computed together; elsewhere the copy
 * goes on byte by byte for those 32. */

enum { BULK_BYTES = 32, BULK_MIN_BITS = 1024 };

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PL_HAVE_BULK 1

/* Copies up to `steps` steps of 32 bytes from in to out shifted by c bits after the byte
 * `carry`; stops before a step with an 0xFF in or out. Returns the steps copied. */
__attribute__((target("avx2"))) static size_t pl_shift_bytes_avx2(uint8_t *out,
                                                                 const uint8_t *in,
                                                                 size_t steps, int c,
                                                                 uint8_t carry)
{
    const __m256i ff = _mm256_set1_epi8(-1), low = _mm256_set1_epi16(0xFF);
    const __m128i shift = _mm_cvtsi32_si128(c);
    size_t done = 0;
    for (; done < steps; done++, in += BULK_BYTES, out += BULK_BYTES) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)in);
        __m256i before = _mm256_loadu_si256((const __m256i *)(const void *)(in - 1));
        if (done == 0)
            before = _mm256_insert_epi8(before, (char)carry, 0);
        const __m256i lo = _mm256_and_si256(
            _mm256_srl_epi16(_mm256_unpacklo_epi8(x, before), shift), low);
        const __m256i hi = _mm256_and_si256(
            _mm256_srl_epi16(_mm256_unpackhi_epi8(x, before), shift), low);
        const __m256i y = _mm256_packus_epi16(lo, hi);
        if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(x, ff),
                                                 _mm256_cmpeq_epi8(y, ff))))
            break;
        _mm256_storeu_si256((__m256i *)(void *)out, y);
    }
    return done;
}

static int pl_bulk_available(void)
{
    __builtin_cpu_init();   /* (idempotent; no state of ours shared by decoding threads) */
    return __builtin_cpu_supports("avx2") != 0;
}
#endif

/* The copy's bytes after the reader's buffered bits, in bulk where it can: returns the bits
 * still to copy, the reader's buffer empty and the writer holding fewer than 8 bits. */
static uint64_t pl_copy_bulk(pl_writer *w, pl_reader *r, uint64_t n)
{
#ifdef PL_HAVE_BULK
    if (n < BULK_MIN_BITS || r->marker || (uint64_t)r->bits > n || !pl_bulk_available())
        return n;
    n -= (uint64_t)r->bits;
    pl_copy_bits_one_by_one(w, r, (uint64_t)r->bits);   /* now at a byte of the data */
    while (n >= BULK_MIN_BITS && !r->marker && r->at + BULK_BYTES + 8 <= r->end) {
        size_t steps = (size_t)((n - 64) / (8 * BULK_BYTES));
        if (steps > (r->end - r->at - 8) / BULK_BYTES)
            steps = (r->end - r->at - 8) / BULK_BYTES;
        const size_t done = pl_shift_bytes_avx2(w->p, r->data + r->at, steps, w->count,
                                                (uint8_t)w->pending);
        const size_t bytes = done * BULK_BYTES;
        if (bytes) {
            w->p += bytes;
            w->pending = r->data[r->at + bytes - 1];
            r->at += bytes;
            r->loaded += bytes;
            r->real += bytes;
            n -= 8 * (uint64_t)bytes;
        }
        if (done < steps) {   /* an 0xFF: 32 bytes one by one, then back to a data byte */
            uint64_t again;
            pl_copy_bits_one_by_one(w, r, 8 * BULK_BYTES);
            n -= 8 * BULK_BYTES;
            again = (uint64_t)r->bits;
            if (again > n)
                break;
            pl_copy_bits_one_by_one(w, r, again);
            n -= again;
        }
        if (done == 0 && steps == 0)
            break;
    }
#endif
    return n;
}

static void pl_copy_bits(pl_writer *w, pl_reader *r, uint64_t n)
{
    pl_copy_bits_one_by_one(w, r, pl_copy_bulk(w, r, n));
}

/* --------------------------------------------------------------- headers ---------- */

static unsigned pl_be16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static int pl_read_dht(pl_scan *s, const uint8_t *p, size_t length)
{
    while (length > 0) {
        pl_huff *t;
        int count = 0;
        if (length < 17 || (p[0] >> 4) > 1 || (p[0] & 15) > 3)
            return 0;
        t = (p[0] >> 4) ? &s->ac[p[0] & 15] : &s->dc[p[0] & 15];
        for (int l = 1; l <= 16; l++)
            count += t->bits[l] = p[l];
        if (count > 256 || length < 17 + (size_t)count)
            return 0;
        memcpy(t->values, p + 17, (size_t)count);
        t->count = count;
        if (!pl_huff_build(t))
            return 0;
        if (p[0] >> 4)
            s->ac_defined |= 1 << (p[0] & 15);
        else
            s->dc_defined |= 1 << (p[0] & 15);
        p += 17 + count;
        length -= 17 + (size_t)count;
    }
    return 1;
}

static int pl_read_sos(pl_scan *s, const uint8_t *frame, const uint8_t *p, size_t length)
{
    const int n = p[0], frame_components = frame[5];
    int blocks_per_mcu = 0;

    if (n != frame_components || n > MAX_SCAN_COMPONENTS || n == 2 || length != 4 + 2 * (size_t)n)
        return 0; /* one scan of every component, of 1 or 3 */
    if (p[1 + 2 * n] != 0 || p[2 + 2 * n] != 63 || p[3 + 2 * n] != 0)
        return 0; /* Ss, Se, Ah/Al of a sequential scan */
    s->scan_components = n;
    for (int i = 0; i < n; i++) {
        int c = 0;
        while (c < frame_components && frame[6 + 3 * c] != p[1 + 2 * i])
            c++;
        if (c == frame_components)
            return 0;
        s->blocks_h[i] = n == 1 ? 1 : frame[7 + 3 * c] >> 4;
        s->blocks_v[i] = n == 1 ? 1 : frame[7 + 3 * c] & 15;
        s->dc_table[i] = p[2 + 2 * i] >> 4;
        s->ac_table[i] = p[2 + 2 * i] & 15;
        if (s->dc_table[i] > 3 || s->ac_table[i] > 3 ||
            !(s->dc_defined >> s->dc_table[i] & 1) || !(s->ac_defined >> s->ac_table[i] & 1))
            return 0;
        for (int v = 0; v < s->dc[s->dc_table[i]].count; v++)
            if (s->dc[s->dc_table[i]].values[v] > 15)
                return 0; /* libjpeg refuses such a DC table */
        blocks_per_mcu += s->blocks_h[i] * s->blocks_v[i];
    }
    return blocks_per_mcu <= 10; /* B.2.3 */
}

/* Points every k MCUs of a row: every 64 pixels or so (4 MCUs of 16 pixels, 8 of 8) */
static int32_t pl_pick_k(int32_t mcu_width)
{
    return mcu_width >= 64 ? 1 : 64 / mcu_width;
}

/* Points in each MCU row: at its MCUs 0, k, 2k, ... */
static int64_t pl_points_per_row(const pl_restart_layout *layout)
{
    return (layout->mcus_per_row + layout->interval - 1) / layout->interval;
}

/* The point before MCU `col` of `row` (col a multiple of k), or after the row's last MCU
 * (col = mcus_per_row): the next row's first point, or the one past the last MCU. */
static int64_t pl_point_number(const pl_restart_layout *layout, int32_t row, int32_t col)
{
    const int64_t per_row = pl_points_per_row(layout);
    if (col >= layout->mcus_per_row)
        return (row + 1) * per_row;
    return row * per_row + col / layout->interval;
}

static size_t pl_index_size(const pl_restart_layout *layout)
{
    return PL_SEEK_INDEX_HEADER +
           PL_SEEK_POINT_BYTES * (size_t)(pl_points_per_row(layout) * layout->mcu_rows + 1);
}

/* Markers from SOI to SOS: 1 for one baseline Huffman scan of 1 or 3 components of 8 bits,
 * without restart markers. */
static int pl_scan_read(const uint8_t *data, size_t size, pl_scan *s)
{
    size_t next = 2;
    const uint8_t *frame = NULL;
    pl_segment seg;

    memset(s, 0, offsetof(pl_scan, dc));
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return 0;
    while (pl_next_segment(data, size, &next, &seg)) {
        const unsigned marker = seg.marker;
        if (marker == 0xC0 || marker == 0xC1) {
            if (frame != NULL || seg.payload[0] != 8 ||
                !pl_restart_layout_frame(seg.payload, seg.length, &s->layout))
                return 0;
            frame = seg.payload;
            s->layout.frame_size_at = (size_t)(seg.payload + 1 - data);
        } else if ((marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                    marker != 0xCC) || marker == 0xDC) {
            return 0; /* progressive, lossless, arithmetic, hierarchical; DNL */
        } else if (marker == 0xDD) {
            if (seg.length != 2 || pl_be16(seg.payload) != 0)
                return 0; /* restart markers: jpeg_restart.c seeks in those */
        } else if (marker == 0xC4) {
            if (!pl_read_dht(s, seg.payload, seg.length))
                return 0;
        } else if (marker == 0xDA) {
            if (frame == NULL || (frame[5] != 1 && frame[5] != 3) ||
                !pl_read_sos(s, frame, seg.payload, seg.length))
                return 0;
            s->sos_at = seg.at;
            s->layout.scan_at = next;
            s->layout.interval = pl_pick_k(s->layout.mcu_width);
            return 1;
        }
    }
    return 0;
}

/* --------------------------------------------------------------- the walk --------- */

/* The walk's symbol decode: pl_decode without the code's bits, and with 32 bits or more
 * in the buffer before the code, so that the extra bits after it need no check. */
static inline int pl_walk_symbol(pl_reader *r, const pl_huff *t)
{
    uint32_t look, c;
    int l;

    if (r->bits < 32)
        pl_reader_fill(r);
    look = t->look[r->buffer >> (64 - LOOK_BITS)];
    if (look) {
        pl_skip(r, (int)(look >> 8));
        return look & 0xFF;
    }
    c = (uint32_t)(r->buffer >> 48);
    for (l = LOOK_BITS + 1; l <= 16; l++)
        if ((int32_t)(c >> (16 - l)) <= t->maxcode[l])
            break;
    if (l > 16)
        return -1;
    pl_skip(r, l);
    return t->values[(int32_t)(c >> (16 - l)) + t->valoffset[l]];
}

/* The walk's AC lookup: for each WALK_BITS-bit prefix, the bits its code and the code's
 * extra bits take together (bits 8-12) and the symbol (bits 0-7); 0 where they take
 * more than WALK_BITS (the walk then decodes the code alone). One lookup and one shift
 * per coefficient instead of two. */
#define WALK_BITS 11
typedef uint16_t pl_walk_table[1 << WALK_BITS];

static void pl_walk_table_build(const pl_huff *t, pl_walk_table walk)
{
    memset(walk, 0, sizeof(pl_walk_table));
    for (int length = 1; length <= WALK_BITS; length++)
        for (int32_t code = t->maxcode[length] - t->bits[length] + 1;
             t->bits[length] && code <= t->maxcode[length]; code++) {
            const int rs = t->values[code + t->valoffset[length]], total = length + (rs & 15);
            if (total > WALK_BITS)
                continue;
            for (int32_t next = code << (WALK_BITS - length);
                 next < (code + 1) << (WALK_BITS - length); next++)
                walk[next] = (uint16_t)(total << 8 | rs);
        }
}

/* One block's codes, read; its DC difference in *diff. 0 at a bad code. */
static int pl_walk_block(pl_reader *r, const pl_huff *dc, const pl_huff *ac,
                         const uint16_t *walk, int32_t *diff)
{
    int s = pl_walk_symbol(r, dc);

    if (s < 0)
        return 0;
    s &= 15;
    *diff = s ? pl_extend((uint32_t)(r->buffer >> (64 - s)), s) : 0;
    pl_skip(r, s);
    for (int k = 1; k < 64; k++) { /* F.2.2.2, as libjpeg's decode_mcu counts */
        int rs;
        if (r->bits < 32)
            pl_reader_fill(r);
        rs = walk[r->buffer >> (64 - WALK_BITS)];
        if (rs) {
            pl_skip(r, rs >> 8);
            rs &= 0xFF;
        } else {
            if ((rs = pl_walk_symbol(r, ac)) < 0)
                return 0;
            pl_skip(r, rs & 15);
        }
        if (rs & 15)
            k += rs >> 4;
        else if ((rs >> 4) == 15)
            k += 15;
        else
            break;
    }
    return 1;
}

static int pl_walk_mcu(pl_reader *r, const pl_scan *s, pl_walk_table *walk, int32_t *dc)
{
    for (int i = 0; i < s->scan_components; i++)
        for (int b = 0; b < s->blocks_h[i] * s->blocks_v[i]; b++) {
            int32_t diff;
            if (!pl_walk_block(r, &s->dc[s->dc_table[i]], &s->ac[s->ac_table[i]],
                               walk[s->ac_table[i]], &diff))
                return 0;
            dc[i] += diff;
        }
    return 1;
}

static void pl_put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void pl_record(uint8_t *point, const pl_reader *r, const int32_t *dc, int components)
{
    uint64_t bit;
    uint32_t offset;
    uint8_t skip;

    pl_reader_position(r, &bit, &offset, &skip);
    pl_put_u32(point, offset);
    pl_put_u32(point + 4, (uint32_t)bit);
    point[8] = skip;
    point[9] = 0;
    for (int i = 0; i < MAX_SCAN_COMPONENTS; i++) {
        const int16_t v = (int16_t)(i < components ? dc[i] : 0);
        memcpy(point + 10 + 2 * i, &v, 2);
    }
}

/* A 64-bit fingerprint of the file, so that an index is never used on other bytes. Four
 * lanes of multiply-xor over 8-byte words (a few microseconds for a photo). */
static uint64_t pl_fingerprint(const uint8_t *data, size_t size)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t lane[4] = {size, k, ~k, size * k};
    size_t at = 0;

    for (; at + 32 <= size; at += 32)
        for (int i = 0; i < 4; i++) {
            uint64_t v;
            memcpy(&v, data + at + 8 * i, 8);
            lane[i] = (lane[i] ^ v) * k;
            lane[i] ^= lane[i] >> 29;
        }
    for (; at < size; at++)
        lane[at & 3] = (lane[at & 3] ^ data[at]) * k;
    return (lane[0] ^ (lane[1] >> 1) ^ (lane[2] << 1) ^ (lane[3] >> 3)) * k;
}

size_t pl_jpeg_seek_index_size(const uint8_t *data, size_t size)
{
    pl_scan s;
    return pl_scan_read(data, size, &s) ? pl_index_size(&s.layout) : 0;
}

size_t pl_jpeg_seek_index(const uint8_t *data, size_t size, uint8_t *out, size_t out_size)
{
    pl_scan s;
    pl_reader r;
    int32_t dc[MAX_SCAN_COMPONENTS] = {0, 0, 0};
    uint8_t *point = out + PL_SEEK_INDEX_HEADER;
    size_t needed;
    int64_t mcus;
    static _Thread_local pl_walk_table walk[4];

    if (size > UINT32_MAX || !pl_scan_read(data, size, &s) ||
        out_size < (needed = pl_index_size(&s.layout)))
        return 0;
    mcus = (int64_t)s.layout.mcus_per_row * s.layout.mcu_rows;
    for (int i = 0; i < s.scan_components; i++)
        pl_walk_table_build(&s.ac[s.ac_table[i]], walk[s.ac_table[i]]);
    pl_reader_start(&r, data, s.layout.scan_at, size, 0);
    for (int64_t m = 0; m < mcus; m++) {
        if (m % s.layout.mcus_per_row % s.layout.interval == 0) {
            pl_record(point, &r, dc, s.scan_components);
            point += PL_SEEK_POINT_BYTES;
        }
        if (!pl_walk_mcu(&r, &s, walk, dc) || !pl_reader_in_data(&r))
            return 0;
        for (int i = 0; i < s.scan_components; i++)
            if (dc[i] < INT16_MIN || dc[i] > INT16_MAX)
                return 0;
    }
    pl_record(point, &r, dc, s.scan_components); /* where the last MCU ends */
    memcpy(out, "PLSI", 4);
    pl_put_u32(out + 4, PL_SEEK_INDEX_VERSION);
    pl_put_u32(out + 8, (uint32_t)size);
    pl_put_u32(out + 12, (uint32_t)s.layout.interval);
    {
        const uint64_t fingerprint = pl_fingerprint(data, size);
        memcpy(out + 16, &fingerprint, 8);
    }
    return needed;
}

/* --------------------------------------------------------------- the sub-image ---- */

typedef struct {
    uint32_t offset, bit;
    uint8_t skip;
    int32_t dc[MAX_SCAN_COMPONENTS];
} pl_point;

static void pl_point_at(const uint8_t *index, int64_t i, pl_point *p)
{
    const uint8_t *q = index + PL_SEEK_INDEX_HEADER + (size_t)i * PL_SEEK_POINT_BYTES;
    memcpy(&p->offset, q, 4);
    memcpy(&p->bit, q + 4, 4);
    p->skip = q[8];
    for (int c = 0; c < MAX_SCAN_COMPONENTS; c++) {
        int16_t v;
        memcpy(&v, q + 10 + 2 * c, 2);
        p->dc[c] = v;
    }
}

static int pl_category(int32_t v)
{
    int s = 0;
    for (uint32_t a = (uint32_t)(v < 0 ? -v : v); a; a >>= 1)
        s++;
    return s;
}

/* Bits the reader has taken since it started (the start's skipped bits included). */
static uint64_t pl_taken(const pl_reader *r)
{
    return r->loaded * 8 - (uint64_t)r->bits;
}

static void pl_skip_bits(pl_reader *r, uint64_t n)
{
    for (; n >= 32; n -= 32)
        pl_get(r, 32);
    pl_get(r, (int)n);
}

/* Where the first MCU of a row has each component's first DC difference: the code and its
 * extra bits lie at bits [start, end) of the reader, and the DC value is `value`. */
typedef struct {
    uint64_t start[MAX_SCAN_COMPONENTS], end[MAX_SCAN_COMPONENTS];
    int32_t value[MAX_SCAN_COMPONENTS];
} pl_first_dcs;

/* Reads the first MCU from point `from` (its DC values from the point's), finding its
 * components' first DC differences; returns the bits it takes, 0 at a bad code. */
static uint64_t pl_find_first_dcs(pl_reader *r, const pl_scan *s, const pl_point *from,
                                  pl_first_dcs *found)
{
    for (int i = 0; i < s->scan_components; i++) {
        const pl_huff *dc = &s->dc[s->dc_table[i]], *ac = &s->ac[s->ac_table[i]];
        for (int b = 0; b < s->blocks_h[i] * s->blocks_v[i]; b++) {
            int sym;
            if (b == 0)
                found->start[i] = pl_taken(r);
            if ((sym = pl_walk_symbol(r, dc)) < 0)
                return 0;
            sym &= 15;
            if (b == 0)
                found->value[i] = from->dc[i] +
                                  (sym ? pl_extend((uint32_t)(r->buffer >> (64 - sym)), sym) : 0);
            pl_skip(r, sym);
            if (b == 0)
                found->end[i] = pl_taken(r);
            for (int k = 1; k < 64; k++) { /* F.2.2.2, as libjpeg's decode_mcu counts */
                const int rs = pl_walk_symbol(r, ac);
                if (rs < 0)
                    return 0;
                pl_skip(r, rs & 15);
                if (rs & 15)
                    k += rs >> 4;
                else if ((rs >> 4) == 15)
                    k += 15;
                else
                    break;
            }
        }
    }
    return pl_taken(r);
}

/* One row's MCUs from point `from` to point `to`: their bits as they are, but for each
 * component's first DC difference, re-encoded from `predicted` (what the copy decodes
 * before it). 0 when a code does not decode or a value has no code. */
static int pl_write_row(pl_writer *w, const uint8_t *data, size_t size, const pl_scan *s,
                        pl_huff *dc_out, const pl_point *from, const pl_point *to,
                        const int32_t *predicted)
{
    const uint64_t row_bits = (uint64_t)to->bit - from->bit + from->skip; /* reader's bits */
    pl_first_dcs found;
    pl_reader r;
    uint64_t at = from->skip;

    pl_reader_start(&r, data, from->offset, size, from->skip);
    {
        const uint64_t mcu_end = pl_find_first_dcs(&r, s, from, &found);
        if (mcu_end == 0 || mcu_end > row_bits || !pl_reader_in_data(&r))
            return 0;
    }
    pl_reader_start(&r, data, from->offset, size, from->skip);
    for (int i = 0; i < s->scan_components; i++) {
        const int32_t value = found.value[i] - predicted[i];
        const int category = pl_category(value);
        const pl_huff *out = &dc_out[s->dc_table[i]];
        if (category > 15 || out->length_of[category] == 0)
            return 0;
        pl_copy_bits(w, &r, found.start[i] - at);
        pl_put(w, out->code_of[category], out->length_of[category]);
        pl_put(w, (uint32_t)(value < 0 ? value - 1 : value), category);
        pl_skip_bits(&r, found.end[i] - found.start[i]);
        at = found.end[i];
    }
    pl_copy_bits(w, &r, row_bits - at);
    return pl_reader_in_data(&r);
}

/* DC tables for the copy: each one the scan uses, with the categories 0..11 it lacks added
 * (pl_huff_complete_dc). *changed: bit t for a table that gained any. */
static void pl_copy_dc_tables(const pl_scan *s, pl_huff *out, int *changed)
{
    int copied = 0;

    *changed = 0;
    for (int i = 0; i < s->scan_components; i++) {
        const int id = s->dc_table[i];
        if (copied >> id & 1)
            continue;
        copied |= 1 << id;
        out[id] = s->dc[id];
        if (pl_huff_complete_dc(&out[id]))
            *changed |= 1 << id;
    }
}

static uint8_t *pl_put_dht(uint8_t *p, const pl_huff *t, int id)
{
    const size_t length = 2 + 1 + 16 + (size_t)t->count;
    *p++ = 0xFF;
    *p++ = 0xC4;
    *p++ = (uint8_t)(length >> 8);
    *p++ = (uint8_t)length;
    *p++ = (uint8_t)id; /* class 0 (DC), table id */
    memcpy(p, t->bits + 1, 16);
    memcpy(p + 16, t->values, (size_t)t->count);
    return p + 16 + t->count;
}

/* The headers of the copy: the original's up to SOS with the rectangle's size in the
 * frame, the grown DC tables, then the original SOS. */
static uint8_t *pl_put_headers(uint8_t *p, const uint8_t *data, const pl_scan *s,
                               const pl_huff *dc_out, int changed, const pl_mcu_rect *rect)
{
    const pl_restart_layout *layout = &s->layout;
    const int32_t height = (rect->row1 * layout->mcu_height < layout->height
                                ? rect->row1 * layout->mcu_height : layout->height) -
                           rect->row0 * layout->mcu_height;
    const int32_t width = (rect->col1 * layout->mcu_width < layout->width
                               ? rect->col1 * layout->mcu_width : layout->width) -
                          rect->col0 * layout->mcu_width;

    memcpy(p, data, s->sos_at);
    p[layout->frame_size_at] = (uint8_t)(height >> 8);
    p[layout->frame_size_at + 1] = (uint8_t)height;
    p[layout->frame_size_at + 2] = (uint8_t)(width >> 8);
    p[layout->frame_size_at + 3] = (uint8_t)width;
    p += s->sos_at;
    for (int t = 0; t < 4; t++)
        if (changed >> t & 1)
            p = pl_put_dht(p, &dc_out[t], t);
    memcpy(p, data + s->sos_at, layout->scan_at - s->sos_at);
    return p + (layout->scan_at - s->sos_at);
}

/* Whether `index` is this file's index (pl_scan_read done) */
static int pl_index_matches(const uint8_t *data, size_t size, const pl_scan *s,
                            const uint8_t *index, size_t index_size)
{
    uint32_t version, data_size, interval;
    uint64_t fingerprint;

    if (index == NULL || index_size != pl_index_size(&s->layout) || memcmp(index, "PLSI", 4) != 0)
        return 0;
    memcpy(&version, index + 4, 4);
    memcpy(&data_size, index + 8, 4);
    memcpy(&interval, index + 12, 4);
    memcpy(&fingerprint, index + 16, 8);
    return version == PL_SEEK_INDEX_VERSION && data_size == size &&
           interval == (uint32_t)s->layout.interval && fingerprint == pl_fingerprint(data, size);
}

static uint8_t *pl_subimage(const uint8_t *data, size_t size, const pl_scan *s,
                            const uint8_t *index, const pl_mcu_rect *rect, size_t *image_size)
{
    pl_huff dc_out[4];
    pl_writer w;
    uint8_t *image;
    int changed;
    int32_t predicted[MAX_SCAN_COMPONENTS] = {0, 0, 0};
    size_t bound = s->layout.scan_at + 4 * (2 + 1 + 16 + 256) + 2;

    pl_copy_dc_tables(s, dc_out, &changed);
    for (int32_t row = rect->row0; row < rect->row1; row++) {
        pl_point from, to;
        pl_point_at(index, pl_point_number(&s->layout, row, rect->col0), &from);
        pl_point_at(index, pl_point_number(&s->layout, row, rect->col1), &to);
        if (to.bit < from.bit)
            return NULL;
        bound += 2 * ((size_t)(to.bit - from.bit) / 8 + 64);
    }
    if ((image = malloc(bound)) == NULL)
        return NULL;
    w.p = pl_put_headers(image, data, s, dc_out, changed, rect);
    w.pending = 0;
    w.count = 0;
    for (int32_t row = rect->row0; row < rect->row1; row++) {
        pl_point from, to;
        pl_point_at(index, pl_point_number(&s->layout, row, rect->col0), &from);
        pl_point_at(index, pl_point_number(&s->layout, row, rect->col1), &to);
        if (!pl_write_row(&w, data, size, s, dc_out, &from, &to, predicted)) {
            free(image);
            return NULL;
        }
        memcpy(predicted, to.dc, sizeof(predicted)); /* the DC values the row ends with */
    }
    pl_pad(&w);
    *w.p++ = 0xFF;
    *w.p++ = 0xD9;
    *image_size = (size_t)(w.p - image);
    return image;
}

uint8_t *pl_seek_index_cut(const uint8_t *data, size_t size, const uint8_t *index,
                           size_t index_size, int32_t scale_num, int32_t top, int32_t left,
                           int32_t height, int32_t width, int64_t max_pixels,
                           pl_restart_layout *layout, pl_mcu_rect *rect, size_t *image_size)
{
    pl_scan s;

    if (!pl_scan_read(data, size, &s) || !pl_index_matches(data, size, &s, index, index_size) ||
        /* too many pixels: the plain path refuses it, with its message */
        (max_pixels > 0 && (int64_t)s.layout.width * s.layout.height > max_pixels) ||
        (int64_t)top + height > pl_scaled(s.layout.height, scale_num) ||
        (int64_t)left + width > pl_scaled(s.layout.width, scale_num))
        return NULL;
    pl_seek_box(&s.layout, scale_num, top, left, height, width, rect);
    if (rect->col1 > s.layout.mcus_per_row) /* k need not divide the row */
        rect->col1 = s.layout.mcus_per_row;
    if (!pl_seek_pays(&s.layout, rect))
        return NULL;
    *layout = s.layout;
    return pl_subimage(data, size, &s, index, rect, image_size);
}
