/* jpeg_seek_index.c: seeking into baseline JPEGs that have no restart markers.
 *
 * Without restart markers a crop can only be reached by Huffman-decoding every MCU before
 * it and every MCU of each row it spans (jpeg_restart.c explains how restart markers lift
 * this). A seek index records, once, where the entropy-coded data stands at every k-th MCU
 * of each row (k: 64 pixels' worth, 4 MCUs of 16 pixels or 8 of 8), and past the last:
 * the bit position and each component's DC prediction there. With it, the MCUs of each
 * row around a box (jpeg_restart.c's pl_seek_box: whole k-MCU steps, a margin of upsampling
 * context) are decoded in place: libjpeg is given the file's headers with the rectangle's
 * size and an empty scan (pl_seek_index_rows), and jpeg_huffman.c's decoder reads each
 * row of the rectangle from its index point in the original data.
 *
 * Section numbers are those of ITU-T T.81. No index is made for what this does not
 * cover: progressive, arithmetic or 12-bit files, restart markers (those seek already),
 * several scans, 2 or 4 components, a bad Huffman code, data that ends before the last
 * MCU, DC predictions beyond 16 bits. An index carries a fingerprint of the file's bytes
 * and is used on those only.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pim_jpeg.h"
#include "pim_jpeg_bytes.h"
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
} pl_huff;

typedef struct {
    pl_restart_layout layout;           /* geometry, as jpeg_restart.c's (interval = k) */
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
    for (int length = 1; length <= 16; length++) {
        t->maxcode[length] = -1;
        t->valoffset[length] = k - code;
        for (int c = 0; c < t->bits[length]; c++, code++, k++) {
            if (k >= t->count || code >= (1 << length))
                return 0;
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

static void pl_skip(pl_reader *r, int n)
{
    r->buffer <<= n;
    r->bits -= n;
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

void pl_seek_index_point(const uint8_t *index, int64_t number, pl_index_point *point)
{
    const uint8_t *q = index + PL_SEEK_INDEX_HEADER + (size_t)number * PL_SEEK_POINT_BYTES;
    memcpy(&point->offset, q, 4);
    memcpy(&point->bit, q + 4, 4);
    point->skip = q[8];
    for (int c = 0; c < MAX_SCAN_COMPONENTS; c++) {
        int16_t v;
        memcpy(&v, q + 10 + 2 * c, 2);
        point->dc[c] = v;
    }
}

/* The headers of the rectangle's JPEG: the original's up to its scan's data, with the
 * rectangle's size in the frame, then EOI: an empty scan, read from the original by
 * pl_huffman_install's decoder. */
static uint8_t *pl_rectangle_headers(const uint8_t *data, const pl_scan *s,
                                     const pl_mcu_rect *rect, size_t *image_size)
{
    const pl_restart_layout *layout = &s->layout;
    const int32_t height = (rect->row1 * layout->mcu_height < layout->height
                                ? rect->row1 * layout->mcu_height : layout->height) -
                           rect->row0 * layout->mcu_height;
    const int32_t width = (rect->col1 * layout->mcu_width < layout->width
                               ? rect->col1 * layout->mcu_width : layout->width) -
                          rect->col0 * layout->mcu_width;
    uint8_t *image = malloc(layout->scan_at + 2);

    if (image == NULL)
        return NULL;
    memcpy(image, data, layout->scan_at);
    image[layout->frame_size_at] = (uint8_t)(height >> 8);
    image[layout->frame_size_at + 1] = (uint8_t)height;
    image[layout->frame_size_at + 2] = (uint8_t)(width >> 8);
    image[layout->frame_size_at + 3] = (uint8_t)width;
    image[layout->scan_at] = 0xFF;
    image[layout->scan_at + 1] = 0xD9;
    *image_size = layout->scan_at + 2;
    return image;
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

uint8_t *pl_seek_index_rows(const uint8_t *data, size_t size, const uint8_t *index,
                            size_t index_size, int32_t scale_num, int32_t top, int32_t left,
                            int32_t height, int32_t width, int64_t max_pixels,
                            pl_restart_layout *layout, pl_mcu_rect *rect, size_t *image_size,
                            pl_indexed_rows *rows)
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
    rows->data = data;
    rows->size = size;
    rows->index = index;
    rows->first_point = pl_point_number(&s.layout, rect->row0, rect->col0);
    rows->points_per_row = pl_points_per_row(&s.layout);
    rows->rows = rect->row1 - rect->row0;
    rows->mcus_per_row = rect->col1 - rect->col0;
    return pl_rectangle_headers(data, &s, rect, image_size);
}
