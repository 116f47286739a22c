/* pim_dpu_chunk.h: what the host writes to one DPU (csrc/dpu_chunk.c): the chunk of a planned
 * batch in the MRAM layout of pim_dpu_layout.h. Host memory only, no libdpu: the driver
 * (csrc/dpu_driver.c) sizes and packs each DPU's chunk with these, then moves it with libdpu. */
#ifndef PIM_DPU_CHUNK_H
#define PIM_DPU_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "pim_dpu_driver.h"
#include "pim_dpu_layout.h"
#include "pim_dpu_plan.h"
#include "pim_params.h"

typedef struct pim_dpu_chunk {
    uint32_t first, count;     /* samples [first, first + count) of the batch */
    uint64_t in_bytes;         /* real bytes the host writes, header included */
    uint64_t out_bytes;        /* status block + the samples' outputs */
    uint32_t tables_bytes;     /* the axis tables the chunk's samples use, packed */
    uint32_t n_tables;
} pim_dpu_chunk_t;

/* The caller's buffers against a planned sample: its source (src_bytes readable), the lookup
 * table its output type needs, and its slot inside the dst_bytes of the output batch.
 * Returns 1, or 0 with a message in msg. */
int pim_dpu_check_buffers(const pim_sample_t *s, const uint8_t *src, uint64_t src_bytes, const void *lut,
                          uint32_t lut_bytes, uint64_t dst_bytes, char *msg, size_t msg_len);

/* Sample i, whose source is in MRAM (mram->offsets[i]), checked as pim_dpu_check_buffers checks
 * a host source: its source inside [keep_from, keep_to) and 8-byte aligned, its lookup table,
 * its slot. Returns 1, or 0 with a message in msg. */
int pim_dpu_check_in_mram(const pim_sample_t *s, const pim_dpu_mram_sources_t *mram, uint32_t i, const void *lut,
                          uint32_t lut_bytes, uint64_t dst_bytes, char *msg, size_t msg_len);

/* Sets c's in_bytes, out_bytes, tables_bytes and n_tables from its samples' plans (c->first
 * and c->count set); lut_bytes 0 without a lookup table; mram_src (NULL: none) as
 * pim_dpu_mram_sources_t.offsets: those sources are on the DPU already and take no room.
 * scratch: 4 x c->count entries. */
void pim_dpu_chunk_size(pim_dpu_chunk_t *c, const pim_sample_t *samples, const pim_dpu_sample_plan_t *plans,
                        const uint64_t *mram_src, const uint8_t *tables, uint32_t lut_bytes, uint32_t nr_tasklets,
                        uint32_t *scratch);

/* Packs chunk c (sized by pim_dpu_chunk_size) at base, xfer bytes (the common push length,
 * zero-filled past in_bytes): completes header h (the caller set magic, version, batch id,
 * arena, tasklets, out_off and debug; in_bytes is raised to the end of sources in MRAM by the
 * caller) and writes it, the descriptors rewritten for the DPU, the jobs, the tasklets' band
 * edges (bands, nr_tasklets + 1), the tables, the lookup table and each crop box's pixels,
 * read from srcs; a source in MRAM (mram_src, as in pim_dpu_chunk_size) is pointed at, not
 * copied. scratch: 4 x c->count entries. */
void pim_dpu_chunk_pack(const pim_dpu_chunk_t *c, pim_dpu_header_t *h, uint8_t *base, uint64_t xfer,
                        const pim_sample_t *samples, const pim_dpu_sample_plan_t *plans, const uint32_t *bands,
                        uint32_t nr_tasklets, const uint8_t *const *srcs, const uint64_t *mram_src,
                        const uint8_t *tables, const void *lut, uint32_t lut_bytes, uint32_t *scratch);

#endif /* PIM_DPU_CHUNK_H */
