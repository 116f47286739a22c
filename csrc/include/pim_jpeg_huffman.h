/* pim_jpeg_huffman.h: the rows of a seek index's rectangle decoded in place for libjpeg
 * (csrc/jpeg_huffman.c). Internal to the JPEG module.
 *
 * Include after <stdio.h> and <jpeglib.h>. */
#ifndef PIM_JPEG_HUFFMAN_H
#define PIM_JPEG_HUFFMAN_H

#include "pim_jpeg_seek_index.h"

/* Puts a decoder of `rows` in place of libjpeg's Huffman decoder on a decompressor of the
 * rectangle's JPEG (pl_seek_index_rows) whose jpeg_start_decompress has run and which has
 * read no scanline. 1 when it did; 0 when the scan is not the rows' (then libjpeg would
 * read an empty scan: the caller must not go on). The coefficients, hence the pixels, are
 * those of libjpeg's decode of the whole file; so are the warnings (a bad code, data that
 * ends too soon), which pl_jpeg_decode makes errors in strict mode. */
int pl_huffman_install(j_decompress_ptr cinfo, const pl_indexed_rows *rows);

#endif /* PIM_JPEG_HUFFMAN_H */
