/* jpeg_huffman.c: the Huffman-coded coefficients of a JPEG's scan (ITU-T T.81 F.2.2),
 * read in place with the file's seek index and handed to libjpeg, which does the rest
 * (dequantisation, IDCT, upsampling, colour) as it always does.
 *
 * libjpeg decodes a JPEG made of the original's headers with the size of the rectangle of
 * MCUs around a box, and an empty scan (jpeg_seek_index.c, pl_seek_index_rows); this
 * decoder stands in for libjpeg's and gives it each MCU of the rectangle from the
 * original's data, every row started at its index point: the byte and bit where its first
 * MCU begins, and each component's DC prediction there. Nothing is copied or re-encoded,
 * and a row that libjpeg skips whole (jpeg_skip_scanlines) is not decoded at all.
 *
 * The decoding itself is libjpeg-turbo's, measured as fast (a quarter of the loader's CPU
 * time, either way): a table of the FAST_BITS-bit prefixes gives each code's length, the
 * bits it takes with its magnitude bits, and the zero run before its coefficient (an end
 * of block runs past the block's end, so the loop has no branch for it); a longer code is
 * found from the limits of the canonical codes (C.2, F.2.2.3); the 64-bit buffer takes 7
 * bytes at once where none of the next 8 is 0xFF, else byte by byte, dropping the 0x00
 * stuffed after each 0xFF (B.1.1.5). It writes what libjpeg writes, where libjpeg writes
 * it: coefficients in natural order (a run past the block's end lands on the last one, as
 * with libjpeg's 16 extra entries), DC predictions per component, nothing for a component
 * or the ACs the output does not need (a 1/8 scale needs DCs only).
 *
 * Past the data's end (or a marker) it reads zero bits, as libjpeg does; should an MCU
 * take any, libjpeg's warning JWRN_HIT_MARKER, and the MCUs after it stay zero (grey). A
 * bit string that is no code: JWRN_HUFF_BAD_CODE and symbol 0. pl_jpeg_decode makes
 * either an error in strict mode. (An index matches its file's fingerprint and was made by
 * walking every code of the file: neither happens but with a forged index.)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "pim_jpeg_bytes.h"
#include "pim_jpeg_huffman.h"

/* libjpeg's entropy decoder interface (jpegint.h; the same since libjpeg 6b). */
struct jpeg_entropy_decoder {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    boolean insufficient_data;
};

#define FAST_BITS 10
#define MAX_BLOCKS 10 /* blocks in an MCU (D_MAX_BLOCKS_IN_MCU) */

/* A code's entry (16 bits): its length, the bits it takes with its magnitude bits, and
 * the zero run before its coefficient (63 for the end of block: past the block's end from
 * any coefficient of it). */
#define PL_ENTRY(length, total, run) \
    ((uint16_t)((unsigned)(length) | (unsigned)(total) << 5 | (unsigned)(run) << 10))
#define PL_LENGTH(e) ((int)((e) & 31))
#define PL_TOTAL(e) ((int)((e) >> 5 & 31))
#define PL_RUN(e) ((int)((e) >> 10))
#define PL_END_OF_BLOCK 63


/* Zigzag position -> natural position, then 16 entries for a run past the end (libjpeg's)
 * and the positions an end of block reaches (the last coefficient: still zero there). */
static const uint8_t pl_natural_order[DCTSIZE2 + 16 + PL_END_OF_BLOCK + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    [DCTSIZE2 + 16 ... DCTSIZE2 + 16 + PL_END_OF_BLOCK + 15] = 63};

typedef struct {
    uint16_t entry[1 << FAST_BITS]; /* the FAST_BITS-bit prefixes' codes; 0: a longer code */
    uint32_t limit[17];  /* codes of length l, left-aligned to 16 bits, are below limit[l] */
    int32_t offset[17];  /* a code of length l is symbol number code + offset[l] */
    uint8_t symbols[256];
    int ac;
} pl_huff_table;

/* Where the data stands: the bits still to come are read from here. */
typedef struct {
    const uint8_t *p, *end;
    int ended;        /* a marker (or the data's end) was reached: zeros follow */
    int64_t zeros;    /* the zero bits given since */
} pl_source;

/* The bit buffer: the next `bits` bits from the top of `acc`, zeros below them. Kept in
 * registers by the decoding loop: only values of it go to functions not inlined. */
typedef struct {
    uint64_t acc;
    int bits;
} pl_bits;

typedef struct {
    struct jpeg_entropy_decoder pub; /* first: what libjpeg calls */
    pl_indexed_rows rows;
    int32_t row, column;  /* the MCU libjpeg asks for next */
    int32_t decoded;      /* MCUs of this row decoded (-1: not started) */
    pl_source source;
    pl_bits buffer;
    int last_dc[MAX_COMPS_IN_SCAN];
    const pl_huff_table *dc[MAX_BLOCKS], *ac[MAX_BLOCKS];
    int component[MAX_BLOCKS];
    int dc_needed[MAX_BLOCKS], ac_needed[MAX_BLOCKS];
    pl_huff_table tables[2][NUM_HUFF_TBLS]; /* [0]: DC, [1]: AC */
} pl_huffman;

/* F.2.2.1: the s magnitude bits v as a signed value. */
static inline int pl_extend(uint32_t v, int s)
{
    return v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v;
}

/* --------------------------------------------------------------- tables ---------- */

/* The entry of a code of `length` bits for `symbol` in a table of kind `ac`. */
static uint16_t pl_entry_of(int length, int symbol, int ac)
{
    if (!ac)
        return PL_ENTRY(length, length + symbol, 0); /* DC: the symbol is the size */
    if (symbol == 0x00)
        return PL_ENTRY(length, length, PL_END_OF_BLOCK);
    return PL_ENTRY(length, length + (symbol & 15), symbol >> 4);
}

/* C.2: the canonical codes of `table` (BITS, HUFFVAL), in our tables. 0 for a table no
 * code could be read with (libjpeg refuses those before we are called). */
static int pl_build_table(const JHUFF_TBL *table, int ac, pl_huff_table *t)
{
    uint32_t code = 0;
    int k = 0;

    memset(t->entry, 0, sizeof(t->entry));
    t->ac = ac;
    t->limit[0] = 0;
    t->offset[0] = 0;
    for (int length = 1; length <= 16; length++) {
        t->offset[length] = k - (int)code;
        for (int i = 0; i < table->bits[length]; i++, k++, code++) {
            if (k > 255 || code >= (1u << length) || (!ac && table->huffval[k] > 15))
                return 0;
            t->symbols[k] = table->huffval[k];
            if (length <= FAST_BITS) {
                const int free_bits = FAST_BITS - length;
                for (uint32_t tail = 0; tail < (1u << free_bits); tail++)
                    t->entry[code << free_bits | tail] = pl_entry_of(length, table->huffval[k], ac);
            }
        }
        t->limit[length] = code << (16 - length);
        code <<= 1;
    }
    return 1;
}

/* ---------------------------------------------------------------- bits ---------- */

/* Byte by byte (an 0xFF among the next bytes, or the data's end) up to 57 bits or more. */
static __attribute__((noinline)) pl_bits pl_fill_slowly(pl_source *in, pl_bits b)
{
    while (b.bits <= 56) {
        uint64_t byte = 0;
        if (!in->ended) {
            if (in->p < in->end && *in->p != 0xFF)
                byte = *in->p++;
            else if (in->end - in->p >= 2 && in->p[1] == 0x00) {
                byte = 0xFF;
                in->p += 2;
            } else
                in->ended = 1;
        }
        if (in->ended)
            in->zeros += 8;
        b.acc |= byte << (56 - b.bits);
        b.bits += 8;
    }
    return b;
}

/* At least 57 bits in the buffer (fewer on entry). */
static inline __attribute__((always_inline)) void pl_fill(pl_source *in, pl_bits *b)
{
    if (in->end - in->p >= 8) {
        const uint64_t word = pl_load_be64(in->p);
        if (!pl_has_ff(word)) { /* no 0xFF in the next 8 bytes: as many whole bytes as fit */
            b->acc |= word >> b->bits;
            in->p += (63 - b->bits) >> 3;
            b->bits |= 56;
            b->acc &= ~(~0ull >> b->bits);
            return;
        }
    }
    *b = pl_fill_slowly(in, *b);
}

static inline __attribute__((always_inline)) void pl_drop(pl_bits *b, int n)
{
    b->acc <<= n;
    b->bits -= n;
}

/* ---------------------------------------------------------------- codes ---------- */

/* The entry of the code longer than FAST_BITS that the 16 bits `ahead` start with
 * (F.2.2.3); for a string that is no code, libjpeg's warning and symbol 0 after 16 bits. */
static __attribute__((noinline)) uint16_t pl_long_code(j_decompress_ptr cinfo, uint32_t ahead,
                                                       const pl_huff_table *t)
{
    for (int length = FAST_BITS + 1; length <= 16; length++)
        if (ahead < t->limit[length]) {
            const int k = (int)(ahead >> (16 - length)) + t->offset[length];
            return pl_entry_of(length, t->symbols[k & 0xFF], t->ac);
        }
    WARNMS(cinfo, JWRN_HUFF_BAD_CODE);
    return pl_entry_of(16, 0, t->ac);
}

/* The next code's entry; the buffer holds at least 31 bits. */
static inline __attribute__((always_inline)) uint32_t pl_code(j_decompress_ptr cinfo,
                                                             const pl_bits *b,
                                                             const pl_huff_table *t)
{
    const uint32_t entry = t->entry[b->acc >> (64 - FAST_BITS)];

    if (__builtin_expect(entry == 0, 0))
        return pl_long_code(cinfo, (uint32_t)(b->acc >> 48), t);
    return entry;
}

/* F.2.2.1: the coefficient of the code `entry` heads the buffer with (its magnitude bits
 * after the code, sign-extended; 0 for none), and the buffer past both. */
static inline __attribute__((always_inline)) int pl_value(pl_bits *b, uint32_t entry)
{
    const int length = PL_LENGTH(entry), total = PL_TOTAL(entry), size = total - length;
    const uint32_t magnitude = (uint32_t)(((b->acc << length) >> 1) >> (63 - size));
    const int negative = magnitude < ((1u << size) >> 1);

    pl_drop(b, total);
    return (int)magnitude - (negative ? (1 << size) - 1 : 0);
}

/* One block (F.2.2): its DC difference added to the component's prediction, stored at
 * dc (NULL: not stored), its ACs stored in ac (a scratch block when not needed). */
static inline __attribute__((always_inline)) void pl_decode_block(
    j_decompress_ptr cinfo, pl_source *in, pl_bits *b, const pl_huff_table *dc_table,
    const pl_huff_table *ac_table, int *prediction, JCOEF *dc, JCOEF *ac)
{
    int diff;

    if (b->bits < 32)
        pl_fill(in, b);
    diff = pl_value(b, pl_code(cinfo, b, dc_table));
    if (prediction != NULL) {
        *prediction = (int)((unsigned)*prediction + (unsigned)diff);
        if (dc != NULL)
            *dc = (JCOEF)*prediction;
    }
    /* an end of block takes k past 63; a run of 16 zeros (ZRL) stores the 16th of them */
    for (int k = 1; k < DCTSIZE2; k++) {
        uint32_t entry;

        if (b->bits < 32)
            pl_fill(in, b);
        entry = pl_code(cinfo, b, ac_table);
        k += PL_RUN(entry);
        ac[pl_natural_order[k]] = (JCOEF)pl_value(b, entry);
    }
}

/* ----------------------------------------------------------------- MCUs ---------- */

/* One MCU into `blocks` (NULL: decoded, not stored). */
static void pl_decode_one(j_decompress_ptr cinfo, pl_huffman *h, JBLOCKROW *blocks)
{
    pl_bits b = h->buffer;
    JBLOCK scratch;

    for (int i = 0; i < cinfo->blocks_in_MCU; i++) {
        JCOEF *block = blocks != NULL ? blocks[i][0] : NULL;
        pl_decode_block(cinfo, &h->source, &b, h->dc[i], h->ac[i],
                        h->dc_needed[i] ? &h->last_dc[h->component[i]] : NULL, block,
                        block != NULL && h->ac_needed[i] ? block : scratch);
    }
    h->buffer = b;
    if (h->source.zeros > b.bits) { /* the MCU took bits past the data's end */
        h->pub.insufficient_data = TRUE;
        WARNMS(cinfo, JWRN_HIT_MARKER);
    }
}

/* The reader at the start of the current row: its index point's byte and bit, and DC
 * predictions. */
static void pl_start_row(pl_huffman *h)
{
    const pl_indexed_rows *rows = &h->rows;
    pl_index_point point;

    pl_seek_index_point(rows->index, rows->first_point + (int64_t)h->row * rows->points_per_row,
                        &point);
    memset(&h->source, 0, sizeof(h->source));
    memset(&h->buffer, 0, sizeof(h->buffer));
    h->source.p = rows->data + (point.offset < rows->size ? point.offset : rows->size);
    h->source.end = rows->data + rows->size;
    pl_fill(&h->source, &h->buffer);
    pl_drop(&h->buffer, point.skip & 7);
    for (int c = 0; c < MAX_COMPS_IN_SCAN; c++)
        h->last_dc[c] = c < 3 ? point.dc[c] : 0;
    h->decoded = 0;
}

/* libjpeg asks for the MCUs of the rectangle in order, a row at a time (MCU_data NULL for
 * one it skips): those of a row are decoded from its start when the first one is wanted. */
static boolean pl_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data)
{
    pl_huffman *h = (pl_huffman *)(void *)cinfo->entropy;

    if (MCU_data != NULL && !h->pub.insufficient_data && h->row < h->rows.rows) {
        if (h->decoded < 0)
            pl_start_row(h);
        for (; h->decoded < h->column && !h->pub.insufficient_data; h->decoded++)
            pl_decode_one(cinfo, h, NULL); /* skipped MCUs before this one */
        if (!h->pub.insufficient_data) {
            pl_decode_one(cinfo, h, MCU_data);
            h->decoded++;
        }
    }
    if (++h->column == (int32_t)cinfo->MCUs_per_row) {
        h->column = 0;
        h->row++;
        h->decoded = -1;
    }
    return TRUE;
}

static void pl_start_pass(j_decompress_ptr cinfo)
{
    (void)cinfo; /* one scan, set up by pl_huffman_install */
}

/* Whether the scan is one these rows can be: sequential, Huffman-coded, 8-bit, one scan of
 * every component, no restart markers, their rectangle's width in MCUs. */
static int pl_scan_fits(j_decompress_ptr cinfo, const pl_indexed_rows *rows)
{
    return !cinfo->progressive_mode && !cinfo->arith_code && cinfo->data_precision == 8 &&
           cinfo->restart_interval == 0 && !jpeg_has_multiple_scans(cinfo) &&
           cinfo->Ss == 0 && cinfo->Se == DCTSIZE2 - 1 && cinfo->Ah == 0 && cinfo->Al == 0 &&
           cinfo->blocks_in_MCU <= MAX_BLOCKS && cinfo->comps_in_scan <= 3 &&
           cinfo->output_scanline == 0 && (int64_t)cinfo->MCUs_per_row == rows->mcus_per_row &&
           (int64_t)cinfo->MCU_rows_in_scan == rows->rows;
}

/* The table of kind `ac` number `number`, built once. */
static const pl_huff_table *pl_table(j_decompress_ptr cinfo, pl_huffman *h, int ac,
                                     int number, int built[2][NUM_HUFF_TBLS])
{
    JHUFF_TBL *table;

    if (number < 0 || number >= NUM_HUFF_TBLS)
        return NULL;
    table = ac ? cinfo->ac_huff_tbl_ptrs[number] : cinfo->dc_huff_tbl_ptrs[number];
    if (table == NULL)
        return NULL;
    if (!built[ac][number]) {
        if (!pl_build_table(table, ac, &h->tables[ac][number]))
            return NULL;
        built[ac][number] = 1;
    }
    return &h->tables[ac][number];
}

int pl_huffman_install(j_decompress_ptr cinfo, const pl_indexed_rows *rows)
{
    int built[2][NUM_HUFF_TBLS] = {{0}};
    pl_huffman *h;

    if (!pl_scan_fits(cinfo, rows))
        return 0;
    h = (pl_huffman *)(*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE, sizeof(*h));
    for (int b = 0; b < cinfo->blocks_in_MCU; b++) {
        const int ci = cinfo->MCU_membership[b];
        const jpeg_component_info *component = cinfo->cur_comp_info[ci];
#if JPEG_LIB_VERSION >= 70
        const int scaled = component->DCT_h_scaled_size;
#else
        const int scaled = component->DCT_scaled_size;
#endif
        h->dc[b] = pl_table(cinfo, h, 0, component->dc_tbl_no, built);
        h->ac[b] = pl_table(cinfo, h, 1, component->ac_tbl_no, built);
        if (h->dc[b] == NULL || h->ac[b] == NULL)
            return 0;
        h->component[b] = ci;
        h->dc_needed[b] = component->component_needed;
        h->ac_needed[b] = component->component_needed && scaled > 1;
    }
    h->rows = *rows;
    h->row = h->column = 0;
    h->decoded = -1;
    h->pub.start_pass = pl_start_pass;
    h->pub.decode_mcu = pl_decode_mcu;
    h->pub.insufficient_data = FALSE;
    cinfo->entropy = &h->pub;
    return 1;
}
