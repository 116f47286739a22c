/* jpeg_layout.c: the structure of a baseline JPEG, read on the host for the DPU decoder
 * (dpu_src/jpeg_decode.c), and the packing of a box's restart intervals into its chunk
 * (include/pim_jpeg.h). Section numbers are those of ITU-T T.81 (ISO/IEC 10918-1).
 *
 * The checks and their messages are those of the Python reference this replaces (kept in
 * tests/_baseline_reference.py as the tests' oracle), in the same order, so that a corrupt
 * or unsupported file gives the same error either way.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pim_jpeg.h"          /* include/: the chunk layout (include_dirs put it first) */
#include "pim_jpeg_layout.h"

/* B.1.1.3, Table B.1: marker codes */
enum {
    M_TEM = 0x01,
    M_SOF0 = 0xC0, M_DHT = 0xC4, M_JPG = 0xC8, M_DAC = 0xCC, M_SOF15 = 0xCF,
    M_RST0 = 0xD0, M_RST7 = 0xD7, M_SOI = 0xD8, M_EOI = 0xD9, M_SOS = 0xDA, M_DQT = 0xDB,
    M_DRI = 0xDD, M_APP0 = 0xE0, M_APP14 = 0xEE, M_APP15 = 0xEF,
};

/* Figure A.6: the zigzag sequence, as the natural (row-major) index of each coefficient */
static const uint8_t natural_order[64] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
};

static unsigned be16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

/* --------------------------------------------------------------- errors ----------- */

static int corrupt(pim_jpeg_parse_status_t *status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    status->kind = PIM_JPEG_PARSE_CORRUPT;
    vsnprintf(status->message, sizeof(status->message), format, args);
    va_end(args);
    return PIM_JPEG_PARSE_CORRUPT;
}

static int unsupported(pim_jpeg_parse_status_t *status, const char *reason, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    status->kind = PIM_JPEG_PARSE_UNSUPPORTED;
    snprintf(status->reason, sizeof(status->reason), "%s", reason);
    vsnprintf(status->message, sizeof(status->message), format, args);
    va_end(args);
    return PIM_JPEG_PARSE_UNSUPPORTED;
}

#define CHECK(call)                        \
    do {                                   \
        const int failed_ = (call);        \
        if (failed_ != PIM_JPEG_PARSE_OK)  \
            return failed_;                \
    } while (0)

/* ------------------------------------------------- Huffman tables (C.2, F.2.2.3) -- */

int pim_jpeg_huff_build(const uint8_t bits[16], const uint8_t *values, uint32_t count,
                        pim_jpeg_huff_t *table)
{
    uint32_t code = 0, k = 0;

    memset(table, 0, sizeof(*table));
    for (int length = 0; length < 18; length++)
        table->maxcode[length] = -1;
    for (int length = 1; length <= 16; length++) {
        const uint32_t codes = bits[length - 1];
        if (codes) {
            if (k + codes > count)
                return -1;   /* more codes than symbols: not from a DHT segment */
            table->valoffset[length] = (int32_t)k - (int32_t)code;
            for (uint32_t c = 0; c < codes; c++, code++, k++) {
                if (code >= 1u << length)
                    return -1;   /* C.2: more codes of this length than its bits hold */
                if (length <= PIM_JPEG_LOOKAHEAD) {   /* every 8-bit prefix of this code */
                    const unsigned shift = PIM_JPEG_LOOKAHEAD - length;
                    for (uint32_t next = code << shift; next < (code + 1) << shift; next++)
                        table->look[next] = (uint16_t)(length << 8 | values[k]);
                }
            }
            table->maxcode[length] = (int32_t)code - 1;
        }
        if (code >= 1u << length)
            return -1;   /* no prefix left for longer codes (libjpeg's jdhuff.c check) */
        code <<= 1;
    }
    memcpy(table->huffval, values, count);
    return 0;
}

/* ------------------------------------------------- marker segments (B.2.4) --------- */

/* B.2.4.1: DQT, one or more tables */
static int read_dqt(pim_jpeg_headers_t *h, const uint8_t *p, size_t length, pim_jpeg_parse_status_t *status)
{
    while (length) {
        const unsigned precision = p[0] >> 4, index = p[0] & 15;
        const size_t bytes = precision ? 128 : 64;
        uint16_t table[64];
        if (index > 3 || precision > 1 || length < 1 + bytes)
            return corrupt(status, "bad quantisation table (DQT)");
        for (int k = 0; k < 64; k++) {
            const unsigned q = precision ? be16(p + 1 + 2 * k) : p[1 + k];
            if (q > 32767)
                return unsupported(status, "quantisation", "");
            table[natural_order[k]] = (uint16_t)q;
        }
        memcpy(h->quant[index], table, sizeof(table));
        h->quant_defined |= 1u << index;
        p += 1 + bytes;
        length -= 1 + bytes;
    }
    return PIM_JPEG_PARSE_OK;
}

/* B.2.4.2: DHT, one or more tables, each checked by building its lookup form */
static int read_dht(pim_jpeg_headers_t *h, const uint8_t *p, size_t length, pim_jpeg_parse_status_t *status)
{
    pim_jpeg_huff_t scratch;

    while (length) {
        unsigned table_class, index, slot;
        uint32_t count = 0;
        if (length < 17)
            return corrupt(status, "bad Huffman table (DHT)");
        table_class = p[0] >> 4;
        index = p[0] & 15;
        for (int i = 1; i <= 16; i++)
            count += p[i];
        if (table_class > 1 || index > 3 || count > 256 || length < 17 + (size_t)count)
            return corrupt(status, "bad Huffman table (DHT)");
        if (table_class == 0)
            for (uint32_t k = 0; k < count; k++)
                if (p[17 + k] > 15)
                    return corrupt(status, "bad Huffman table (DHT): DC symbol over 15");
        if (pim_jpeg_huff_build(p + 1, p + 17, count, &scratch) != 0)
            return corrupt(status, "bad Huffman table (DHT): its code lengths overflow");
        slot = 4 * table_class + index;
        if (!(h->huff_defined & 1u << slot))
            h->huff_order[h->huff_tables++] = slot;
        h->huff_defined |= 1u << slot;
        h->huff_count[slot] = count;
        memcpy(h->huff_bits[slot], p + 1, 16);
        memset(h->huff_values[slot], 0, 256);
        memcpy(h->huff_values[slot], p + 17, count);
        p += 17 + count;
        length -= 17 + count;
    }
    return PIM_JPEG_PARSE_OK;
}

/* B.2.2: the frame header; the SOFn of processes other than Huffman sequential are refused */
static const char *sof_reason(unsigned marker)
{
    switch (marker) {
    case 0xC2: case 0xC6: return "progressive";
    case 0xC3: return "lossless";
    case 0xC5: case 0xC7: return "hierarchical";
    case 0xC9: case 0xCA: case 0xCB: case 0xCD: case 0xCE: case 0xCF: return "arithmetic";
    default: return NULL;
    }
}

static int read_sof(pim_jpeg_headers_t *h, unsigned marker, const uint8_t *p, size_t length,
                    pim_jpeg_parse_status_t *status)
{
    const char *reason = sof_reason(marker);
    unsigned precision, n;

    if (reason)
        return unsupported(status, reason, "");
    if (h->have_frame)
        return corrupt(status, "two frame headers (SOF)");
    if (length < 6)
        return corrupt(status, "bad frame header (SOF)");
    precision = p[0];
    n = p[5];
    if (precision != 8)
        return unsupported(status, "precision", "%u-bit samples", precision);
    if (length < 6 + 3 * (size_t)n || n == 0)
        return corrupt(status, "bad frame header (SOF)");
    h->height = be16(p + 1);
    h->width = be16(p + 3);
    if (h->height == 0 || h->width == 0)
        return corrupt(status, "empty image (a zero dimension, or DNL, which libjpeg does not support)");
    for (unsigned i = 0; i < n; i++) {
        const pim_jpeg_frame_component_t c = {p[6 + 3 * i], p[7 + 3 * i] >> 4, p[7 + 3 * i] & 15u, p[8 + 3 * i]};
        if (c.h < 1 || c.h > 4 || c.v < 1 || c.v > 4 || c.tq > 3)
            return corrupt(status, "bad sampling factors or table number (SOF)");
        if (i < 3)
            h->comp[i] = c;
    }
    h->n_comp = n;
    h->have_frame = 1;
    return PIM_JPEG_PARSE_OK;
}

/* B.2.4.6: APPn; libjpeg reads JFIF (APP0) and Adobe (APP14) for the colour space */
static void read_app(pim_jpeg_headers_t *h, unsigned marker, const uint8_t *p, size_t length)
{
    if (marker == M_APP0 && length >= 5 && memcmp(p, "JFIF\0", 5) == 0)
        h->jfif = 1;
    else if (marker == M_APP14 && length >= 12 && memcmp(p, "Adobe", 5) == 0)
        h->adobe_transform = p[11];
}

static int read_segment(pim_jpeg_headers_t *h, unsigned marker, const uint8_t *p, size_t length,
                        pim_jpeg_parse_status_t *status)
{
    if (marker >= M_SOF0 && marker <= M_SOF15 && marker != M_DHT && marker != M_JPG && marker != M_DAC)
        return read_sof(h, marker, p, length, status);
    if (marker == M_DAC)
        return unsupported(status, "arithmetic", "");
    if (marker == M_DHT)
        return read_dht(h, p, length, status);
    if (marker == M_DQT)
        return read_dqt(h, p, length, status);
    if (marker == M_DRI) {   /* B.2.4.4 */
        if (length < 2)
            return corrupt(status, "bad restart interval (DRI)");
        h->restart_mcus = be16(p);
    } else if (marker >= M_APP0 && marker <= M_APP15) {
        read_app(h, marker, p, length);
    }
    return PIM_JPEG_PARSE_OK;   /* COM, DNL, ...: nothing the layout needs */
}

/* The MCU grid of the frame (A.2): an MCU is one block in a one-component scan. */
static void mcu_grid(const pim_jpeg_headers_t *h, uint32_t *mcus_x, uint32_t *mcus_y)
{
    uint32_t max_h = 1, max_v = 1;
    if (h->n_comp > 1)
        for (uint32_t i = 0; i < h->n_comp && i < 3; i++) {
            max_h = h->comp[i].h > max_h ? h->comp[i].h : max_h;
            max_v = h->comp[i].v > max_v ? h->comp[i].v : max_v;
        }
    *mcus_x = (h->width + 8 * max_h - 1) / (8 * max_h);
    *mcus_y = (h->height + 8 * max_v - 1) / (8 * max_v);
}

static uint64_t intervals_implied(const pim_jpeg_headers_t *h)
{
    uint32_t mcus_x, mcus_y;
    uint64_t mcus;
    if (h->restart_mcus == 0)
        return 1;
    mcu_grid(h, &mcus_x, &mcus_y);
    mcus = (uint64_t)mcus_x * mcus_y;
    return (mcus + h->restart_mcus - 1) / h->restart_mcus;
}

/* B.2.1: SOI, then marker segments (each 0xFF, fill bytes 0xFF, a code, a 16-bit length
 * counting itself) up to and including SOS */
int pim_jpeg_read_headers(const uint8_t *data, size_t size, pim_jpeg_headers_t *h,
                          pim_jpeg_parse_status_t *status)
{
    size_t pos = 2;

    memset(h, 0, sizeof(*h));
    h->adobe_transform = -1;
    if (size < 2 || data[0] != 0xFF || data[1] != M_SOI)
        return unsupported(status, "not a JPEG", "");
    for (;;) {
        unsigned marker, length;
        size_t end;
        if (pos + 4 > size)
            return corrupt(status, "file ends before the image data (no SOS marker)");
        if (data[pos] != 0xFF)
            return corrupt(status, "expected a marker at byte %zu, found 0x%02x", pos, data[pos]);
        while (pos < size - 3 && data[pos] == 0xFF)
            pos++;
        marker = data[pos];
        if (marker == M_EOI || (marker >= M_RST0 && marker <= M_RST7) || marker == M_TEM || marker == M_SOI)
            return corrupt(status, "marker 0x%02x before the image data", marker);
        length = be16(data + pos + 1);
        end = pos + 1 + length;
        if (length < 2 || end > size)
            return corrupt(status, "marker 0x%02x at byte %zu: segment runs past the end", marker, pos - 1);
        CHECK(read_segment(h, marker, data + pos + 3, length - 2, status));
        if (marker == M_SOS) {
            h->scan_off = pos + 3;
            h->scan_bytes = length - 2;
            h->data_start = end;
            break;
        }
        pos = end;
    }
    if (!h->have_frame)
        return corrupt(status, "image data (SOS) before the frame header (SOF)");
    /* each interval but the last ends at a 2-byte RSTn, so the data bounds their number */
    const uint64_t room = (size - h->data_start) / 2 + 1, implied = intervals_implied(h);
    h->interval_capacity = implied < room ? implied : room;
    return PIM_JPEG_PARSE_OK;
}

/* ----------------------------------------------- what the DPU decoder takes ------- */

/* libjpeg's guess of the colour space (jdapimin.c's default_decompress_parms) */
static int check_colour(const pim_jpeg_headers_t *h, pim_jpeg_parse_status_t *status)
{
    if (h->n_comp == 1)
        return PIM_JPEG_PARSE_OK;
    if (h->n_comp != 3)
        return unsupported(status, "components", "%u components", h->n_comp);
    if (h->jfif)
        return PIM_JPEG_PARSE_OK;
    if (h->adobe_transform >= 0)
        return h->adobe_transform == 1 ? PIM_JPEG_PARSE_OK
                                       : unsupported(status, "colour space", "Adobe transform 0 (RGB)");
    if (h->comp[0].id == 'R' && h->comp[1].id == 'G' && h->comp[2].id == 'B')
        return unsupported(status, "colour space", "component ids R, G, B");
    return PIM_JPEG_PARSE_OK;
}

/* luma the most sampled, by 1 or 2 each way, Cb and Cr alike */
static int check_sampling(const pim_jpeg_headers_t *h, pim_jpeg_parse_status_t *status)
{
    const pim_jpeg_frame_component_t *c = h->comp;
    unsigned max_h = 0, max_v = 0;

    if (h->n_comp == 1)
        return PIM_JPEG_PARSE_OK;
    for (int i = 0; i < 3; i++) {
        max_h = c[i].h > max_h ? c[i].h : max_h;
        max_v = c[i].v > max_v ? c[i].v : max_v;
    }
    if (c[0].h == max_h && c[0].v == max_v && max_h <= 2 && max_v <= 2 && c[1].h == c[2].h && c[1].v == c[2].v)
        return PIM_JPEG_PARSE_OK;
    return unsupported(status, "sampling", "sampling factors %ux%u,%ux%u,%ux%u",
                       c[0].h, c[0].v, c[1].h, c[1].v, c[2].h, c[2].v);
}

/* B.2.3: the scan header: sequential (Ss 0, Se 63, Ah Al 0), every component, in frame order */
static int check_scan_header(const pim_jpeg_headers_t *h, const uint8_t *p, size_t length,
                             pim_jpeg_scan_t *scan, pim_jpeg_parse_status_t *status)
{
    const unsigned ns = length ? p[0] : 0;

    if (length < 4 + 2 * (size_t)ns || ns == 0)
        return corrupt(status, "bad scan header (SOS)");
    if (p[1 + 2 * ns] != 0 || p[2 + 2 * ns] != 63 || p[3 + 2 * ns] != 0)
        return corrupt(status, "bad scan parameters for a sequential JPEG (SOS)");
    if (ns != h->n_comp)
        return unsupported(status, "multi-scan", "the scan does not hold every component");
    for (unsigned i = 0; i < ns; i++)
        if (p[1 + 2 * i] != h->comp[i].id)
            return unsupported(status, "multi-scan", "the scan does not hold every component");
    for (unsigned i = 0; i < ns; i++) {
        const unsigned td = p[2 + 2 * i] >> 4, ta = p[2 + 2 * i] & 15;
        if (!(h->quant_defined & 1u << h->comp[i].tq) || td > 3 || !(h->huff_defined & 1u << td)
            || ta > 3 || !(h->huff_defined & 1u << (4 + ta)))
            return corrupt(status, "a component's quantisation or Huffman table is not defined");
        scan->dc[i] = td;
        scan->ac[i] = ta;
    }
    return PIM_JPEG_PARSE_OK;
}

/* B.2.1, E.1.4, F.1.2.3: the entropy-coded data, byte-stuffed (0xFF 0x00) and cut by RSTn
 * (n = 0..7 in turn) into restart intervals, ends at EOI. spans[2k], spans[2k + 1]: the
 * [start, end) bytes of interval k; all are counted, the first `capacity` kept. */
static int find_intervals(const uint8_t *data, size_t size, size_t start, uint64_t *spans,
                          uint64_t capacity, uint64_t *count, pim_jpeg_parse_status_t *status)
{
    size_t begin = start, i = start;
    uint64_t n = 0;
    unsigned rst = 0;

    for (;;) {
        const uint8_t *ff = memchr(data + i, 0xFF, size - i);
        size_t j, k;
        unsigned marker;
        if (ff == NULL)
            return corrupt(status, "premature end of the JPEG file (no EOI marker)");
        j = (size_t)(ff - data);
        for (k = j + 1; k < size && data[k] == 0xFF; k++)
            ;
        if (k >= size)
            return corrupt(status, "premature end of the JPEG file (no EOI marker)");
        marker = data[k];
        if (marker == 0x00) {   /* a stuffed 0xFF of the data */
            i = k + 1;
            continue;
        }
        if (n < capacity) {
            spans[2 * n] = begin;
            spans[2 * n + 1] = j;
        }
        n++;
        if (marker >= M_RST0 && marker <= M_RST7) {
            if (marker - M_RST0 != rst % 8)
                return corrupt(status, "restart marker RST%u out of sequence at byte %zu (expected RST%u)",
                               marker - M_RST0, j, rst % 8);
            rst++;
            begin = i = k + 1;
            continue;
        }
        if (marker != M_EOI)
            return unsupported(status, "multi-scan", "marker 0x%02x after the scan", marker);
        *count = n;
        return PIM_JPEG_PARSE_OK;
    }
}

int pim_jpeg_read_scan(const uint8_t *data, size_t size, const pim_jpeg_headers_t *h,
                       pim_jpeg_scan_t *scan, uint64_t *spans, pim_jpeg_parse_status_t *status)
{
    uint64_t count = 0, implied;

    memset(scan, 0, sizeof(*scan));
    CHECK(check_colour(h, status));
    CHECK(check_sampling(h, status));
    CHECK(check_scan_header(h, data + h->scan_off, h->scan_bytes, scan, status));
    mcu_grid(h, &scan->mcus_x, &scan->mcus_y);
    CHECK(find_intervals(data, size, h->data_start, spans, h->interval_capacity, &count, status));
    implied = intervals_implied(h);
    if (count != implied)
        return corrupt(status, "%llu restart intervals where the frame and DRI imply %llu",
                       (unsigned long long)count, (unsigned long long)implied);
    scan->n_intervals = count;
    return PIM_JPEG_PARSE_OK;
}

/* ------------------------------------------------------------- packing ------------ */

int pim_jpeg_pack_tables(const pim_jpeg_headers_t *h, const uint32_t *slots, uint32_t n_slots,
                         pim_jpeg_tables_t *tables)
{
    memset(tables, 0, sizeof(*tables));
    for (uint32_t c = 0; c < h->n_comp && c < PIM_JPEG_MAX_COMPONENTS; c++) {
        if (h->comp[c].tq > 3)
            return -1;
        memcpy(tables->quant[c], h->quant[h->comp[c].tq], sizeof(tables->quant[c]));
    }
    for (uint32_t s = 0; s < n_slots && s < 4; s++) {
        const uint32_t key = slots[s];
        if (key >= 8 || !(h->huff_defined & 1u << key) || h->huff_count[key] > 256
            || pim_jpeg_huff_build(h->huff_bits[key], h->huff_values[key], h->huff_count[key], &tables->huff[s]) != 0)
            return -1;
    }
    return n_slots <= 4 ? 0 : -1;
}

void pim_jpeg_pack_intervals(const uint8_t *data, const uint64_t *spans, const int64_t *chosen,
                             uint32_t n_chosen, uint32_t restart_mcus, uint32_t total_mcus,
                             uint32_t data_offset, pim_jpeg_interval_t *descriptors, uint8_t *bytes)
{
    for (uint32_t k = 0; k < n_chosen; k++) {
        const uint64_t i = (uint64_t)chosen[k], start = spans[2 * i], length = spans[2 * i + 1] - start;
        const uint32_t first_mcu = (uint32_t)(i * restart_mcus);
        descriptors[k].first_mcu = first_mcu;
        descriptors[k].n_mcus = restart_mcus < total_mcus - first_mcu ? restart_mcus : total_mcus - first_mcu;
        descriptors[k].data_offset = data_offset;
        descriptors[k].data_bytes = (uint32_t)length;
        data_offset += (uint32_t)length;
        if (bytes != NULL) {
            memcpy(bytes, data + start, length);
            bytes += length;
        }
    }
}
