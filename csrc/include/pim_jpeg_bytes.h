/* pim_jpeg_bytes.h: reading entropy-coded data 8 bytes at a time (the seek index's walk,
 * jpeg_seek_index.c, and the decoder of a box's rows, jpeg_huffman.c). Internal to the
 * JPEG module. */
#ifndef PIM_JPEG_BYTES_H
#define PIM_JPEG_BYTES_H

#include <stdint.h>
#include <string.h>

/* The 8 bytes at p as a big-endian number: the first byte's bits on top. */
static inline uint64_t pl_load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* Whether any byte of v is 0xFF (the start of a stuffed byte or of a marker, B.1.1.5). */
static inline int pl_has_ff(uint64_t v)
{
    const uint64_t t = ~v;
    return ((t - 0x0101010101010101ull) & ~t & 0x8080808080808080ull) != 0;
}

#endif /* PIM_JPEG_BYTES_H */
