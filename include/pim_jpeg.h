/* pim_jpeg.h: the MRAM layout of one DPU's chunk of JPEG images to decode, shared by the host
 * (pimloader/backends/dpu/jpeg.py packs it with numpy, reading the sizes from this header
 * through cffi) and the DPU kernel (dpu_src/jpeg_decode.c).
 *
 * A chunk starts at DPU_MRAM_HEAP_POINTER; every offset counts bytes from that start and
 * every part is 8-byte aligned:
 *
 *   [0, 64)         pim_jpeg_header_t
 *   images_off      n_images x pim_jpeg_image_t: the frame of each image (size, components,
 *                   sampling, MRAM places of its planes and of its output)
 *   intervals_off   n_intervals x pim_jpeg_interval_t: each restart interval's first MCU,
 *                   MCU count and compressed bytes (the host found them between RSTn markers;
 *                   for a crop, only the intervals whose MCUs the crop's pixels need)
 *   tables_off      n_images x pim_jpeg_tables_t: per image, each component's quantisation
 *                   table (natural order) and the four Huffman tables in lookup form
 *   data_off        the images' entropy-coded bytes, as in the file (stuffed 0xFF00 kept)
 *   in_bytes        end of what the host writes
 *   out_off         pim_jpeg_status_t for the chunk, one per image, then each image's box:
 *                   box_h rows of out_pitch = round8(box_w x channels) bytes, RGB or grey
 *                   (out_off is the same on every DPU of a batch: one gather reads them all)
 *   work_off        the decoded component planes (the kernel's scratch: never transferred)
 *
 * Unit of work (dpu_src/jpeg_decode.c's steps 2 and 3). Step 2: a tasklet takes the next
 * restart intervals of the image (a shared counter) and entropy-decodes, dequantises and
 * inverse-transforms their MCUs into the image's component planes in MRAM (at their own,
 * subsampled, resolution). Step 3, after a barrier: a tasklet takes the next output row and
 * makes it from the planes: libjpeg-turbo's chroma
 * upsampling reads the neighbouring chroma rows and columns, whichever interval decoded
 * them, so the output is that of a whole-image decode. Images are decoded one after the other;
 * every tasklet works on the same image.
 *
 * Integer arithmetic only (the kernel includes this header).
 */
#ifndef PIM_JPEG_H
#define PIM_JPEG_H

#include <stdint.h>

/* cffi-cdef-begin */
#define PIM_JPEG_MAGIC 0x50494A44     /* "PIJD" */
#define PIM_JPEG_VERSION 1
#define PIM_JPEG_STATUS_OK 0x600D600D

/* pim_jpeg_status_t.code: of the chunk (first status) or of one image */
#define PIM_JPEG_ERR_HEADER 1         /* bad magic/version or chunk offsets */
#define PIM_JPEG_ERR_BUILD 2          /* NR_TASKLETS or arena size differ from the host's */
#define PIM_JPEG_ERR_IMAGE 3          /* an image descriptor, interval or table is invalid */
#define PIM_JPEG_ERR_HUFFMAN 4        /* a bit sequence that no Huffman code starts */
#define PIM_JPEG_ERR_COEFFICIENTS 5   /* a block's run of coefficients passes the 64th */
#define PIM_JPEG_ERR_SHORT 6          /* an interval's data ended inside an MCU */
#define PIM_JPEG_ERR_LONG 7           /* an interval's data goes on past its last MCU */
#define PIM_JPEG_ERR_MARKER 8         /* a 0xFF not followed by 0x00 inside an interval */
#define PIM_JPEG_ERR_WRAM 9           /* the arena cannot hold one MCU or one row segment */
#define PIM_JPEG_ERR_RANGE 10         /* a block's IDCT leaves the range where libjpeg-turbo's C and
                                       * SIMD IDCTs agree: the host decodes the image (not an error) */

/* pim_jpeg_header_t.debug */
#define PIM_JPEG_DEBUG_HALT 1         /* tasklet 0 calls halt(): a DPU fault (tests) */

#define PIM_JPEG_MAX_COMPONENTS 3
#define PIM_JPEG_LOOKAHEAD 8          /* Huffman codes of up to 8 bits decode from one lookup */
#define PIM_JPEG_WINDOW 256           /* compressed bytes a tasklet holds in WRAM */
#define PIM_JPEG_WRAM_BYTES 65536
#define PIM_JPEG_WRAM_RESERVE 2048    /* the runtime's globals (assumed, as pim_dpu_layout.h) */
#define PIM_JPEG_GLOBALS 8192         /* the kernel's globals: tables, colour tables, headers */
#define PIM_JPEG_MRAM_BUDGET 66060288 /* bytes of MRAM a chunk may use: 63 MB of the 64 */

typedef struct pim_jpeg_header {
    uint32_t magic;          /* PIM_JPEG_MAGIC */
    uint32_t version;        /* PIM_JPEG_VERSION */
    uint32_t n_images;
    uint32_t n_intervals;
    uint32_t images_off;
    uint32_t intervals_off;
    uint32_t tables_off;
    uint32_t data_off;
    uint32_t in_bytes;       /* end of the host's part */
    uint32_t out_off;        /* statuses, then the images' pixels */
    uint32_t out_bytes;
    uint32_t work_off;       /* component planes, after the outputs */
    uint32_t nr_tasklets;    /* what the host planned with */
    uint32_t arena_bytes;
    uint32_t batch_id;       /* echoed in the chunk's status */
    uint32_t debug;
} pim_jpeg_header_t;

typedef struct pim_jpeg_component {
    uint32_t h, v;           /* blocks of an MCU across and down (1, 1 in a one-component scan) */
    uint32_t hx, vx;         /* upsampled by (max_h / h, max_v / v): 1 or 2 */
    uint32_t fancy;          /* libjpeg-turbo's triangle filter, else replication */
    uint32_t dc, ac;         /* Huffman tables: index into pim_jpeg_tables_t.huff */
    uint32_t plane_off;      /* the decoded plane in MRAM, from the chunk start */
    uint32_t plane_w;        /* bytes per plane row: whole MCUs, a multiple of 8 */
    uint32_t plane_h;        /* rows: whole MCUs */
    uint32_t comp_w, comp_h; /* libjpeg's downsampled_width / downsampled_height */
    uint32_t pad[4];
} pim_jpeg_component_t;

typedef struct pim_jpeg_image {
    uint32_t width, height;
    uint32_t n_comp;         /* 1 (grey out) or 3 (YCbCr in, RGB out) */
    uint32_t mcus_x, mcus_y;
    uint32_t first_interval; /* into the chunk's intervals */
    uint32_t n_intervals;
    uint32_t tables_offset;  /* from tables_off */
    uint32_t out_offset;     /* the box's pixels, from the chunk start */
    uint32_t out_pitch;      /* round8(box_w x n_comp) */
    uint32_t box_top, box_left, box_h, box_w; /* the pixels wanted (the whole image, or a crop):
                                                 the intervals sent must hold every MCU they
                                                 need, with upsampling context */
    uint32_t restart_mcus;   /* MCUs per restart interval (the last may have fewer) */
    uint32_t pad;
    pim_jpeg_component_t comp[PIM_JPEG_MAX_COMPONENTS];
} pim_jpeg_image_t;

typedef struct pim_jpeg_interval {
    uint32_t first_mcu;      /* raster index of its first MCU */
    uint32_t n_mcus;
    uint32_t data_offset;    /* its entropy-coded bytes, from the chunk start */
    uint32_t data_bytes;
} pim_jpeg_interval_t;

/* A Huffman table in lookup form (built on the host from DHT's BITS and HUFFVAL):
 * look[next 8 bits] = code length << 8 | symbol for codes of up to 8 bits (length 0: longer);
 * a longer code of length l is the first l bits c with c <= maxcode[l] (-1: no code of that
 * length), and its symbol is huffval[c + valoffset[l]]. */
typedef struct pim_jpeg_huff {
    int32_t maxcode[18];
    int32_t valoffset[18];
    uint16_t look[1 << PIM_JPEG_LOOKAHEAD];
    uint8_t huffval[256];
} pim_jpeg_huff_t;

typedef struct pim_jpeg_tables {
    uint16_t quant[PIM_JPEG_MAX_COMPONENTS][64]; /* each component's table, natural order */
    pim_jpeg_huff_t huff[4];                     /* as the components' dc / ac name them */
} pim_jpeg_tables_t;

typedef struct pim_jpeg_status {
    uint32_t code;           /* PIM_JPEG_STATUS_OK or PIM_JPEG_ERR_* */
    uint32_t batch_id;       /* the header's batch_id */
    uint32_t interval;       /* image statuses: the failing interval, from the image's first */
    uint32_t detail;
    /* the work an image's decode did (image statuses; counted by the kernel, for the cost model) */
    uint32_t mcus;           /* MCUs entropy-decoded */
    uint32_t blocks;         /* 8x8 blocks dequantised and inverse-transformed */
    uint32_t ac_coefficients; /* non-zero AC coefficients Huffman-decoded */
    uint32_t entropy_bytes;  /* entropy-coded bytes read */
} pim_jpeg_status_t;
/* cffi-cdef-end */

_Static_assert(sizeof(pim_jpeg_header_t) == 64, "pim_jpeg_header_t is 64 bytes");
_Static_assert(sizeof(pim_jpeg_component_t) == 64, "pim_jpeg_component_t is 64 bytes");
_Static_assert(sizeof(pim_jpeg_image_t) == 256, "pim_jpeg_image_t is 256 bytes");
_Static_assert(sizeof(pim_jpeg_interval_t) == 16, "pim_jpeg_interval_t is 16 bytes");
_Static_assert(sizeof(pim_jpeg_huff_t) == 912, "pim_jpeg_huff_t is 912 bytes");
_Static_assert(sizeof(pim_jpeg_tables_t) % 8 == 0, "pim_jpeg_tables_t keeps 8-byte alignment");
_Static_assert(sizeof(pim_jpeg_status_t) == 32, "pim_jpeg_status_t is 32 bytes");

/* WRAM left to each tasklet's arena (mem_alloc) once the runtime, the kernel's globals and
 * the stacks are counted. */
static inline uint32_t pim_jpeg_arena_bytes(uint32_t nr_tasklets, uint32_t stack_bytes)
{
    const uint32_t used = PIM_JPEG_WRAM_RESERVE + PIM_JPEG_GLOBALS + nr_tasklets * stack_bytes;
    return used >= PIM_JPEG_WRAM_BYTES ? 0 : ((PIM_JPEG_WRAM_BYTES - used) / nr_tasklets) & ~7u;
}

#endif /* PIM_JPEG_H */
