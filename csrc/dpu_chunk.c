/* dpu_chunk.c: what the host writes to one DPU (see pim_dpu_chunk.h): the checks of the caller's
 * buffers, the size of each DPU's chunk and its packing in the MRAM layout of pim_dpu_layout.h
 * (header, descriptors rewritten for the DPU, jobs, band edges, axis tables, lookup table, the
 * crop boxes' pixels). Host memory only; csrc/dpu_driver.c moves the chunks with libdpu.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pim_dpu_chunk.h"
#include "pim_dpu_driver.h"
#include "pim_dpu_layout.h"
#include "pim_dpu_plan.h"
#include "pim_params.h"

int pim_dpu_check_buffers(const pim_sample_t *s, const uint8_t *src, uint64_t src_bytes, const void *lut,
                          uint32_t lut_bytes, uint64_t dst_bytes, char *msg, size_t msg_len)
{
    const uint32_t C = s->channels, es = s->out_esize;
    if (es > 1 && (lut == NULL || lut_bytes < 256u * C * es)) {
        snprintf(msg, msg_len, "output element size %u needs a %u-byte lookup table", es, 256u * C * es);
        return 0;
    }
    if (src == NULL) {
        snprintf(msg, msg_len, "no source image");
        return 0;
    }
    if (s->src_offset + (uint64_t)(s->src_h - 1) * s->src_stride + (uint64_t)s->src_w * C > src_bytes) {
        snprintf(msg, msg_len, "image does not fit its %llu-byte source", (unsigned long long)src_bytes);
        return 0;
    }
    const uint64_t out_bytes = (uint64_t)s->out_h * s->out_w * C * es;
    if (s->dst_offset > dst_bytes || out_bytes > dst_bytes - s->dst_offset) {
        snprintf(msg, msg_len, "output slot at %llu (%llu bytes) is outside the %llu-byte output",
                 (unsigned long long)s->dst_offset, (unsigned long long)out_bytes, (unsigned long long)dst_bytes);
        return 0;
    }
    return 1;
}

int pim_dpu_check_in_mram(const pim_sample_t *s, const pim_dpu_mram_sources_t *mram, uint32_t i, const void *lut,
                          uint32_t lut_bytes, uint64_t dst_bytes, char *msg, size_t msg_len)
{
    const uint64_t at = mram->offsets[i];
    const uint64_t end = at + (uint64_t)(s->src_h - 1) * s->src_stride + (uint64_t)s->src_w * s->channels;
    if (at % 8 || at < mram->keep_from || end > mram->keep_to) {
        snprintf(msg, msg_len, "its source in MRAM [%llu, %llu) is not 8-byte aligned inside [%llu, %llu)",
                 (unsigned long long)at, (unsigned long long)end, (unsigned long long)mram->keep_from,
                 (unsigned long long)mram->keep_to);
        return 0;
    }
    static const uint8_t stand_in = 0; /* the host source check, without a host source */
    return pim_dpu_check_buffers(s, &stand_in, UINT64_MAX, lut, lut_bytes, dst_bytes, msg, msg_len);
}

/* The tables the DPU's samples use, packed (dedup by their offset in `tables`); returns bytes. */
static uint32_t pack_tables(const pim_sample_t *samples, const pim_dpu_chunk_t *c, const uint8_t *tables, uint8_t *out,
                            uint32_t *old_off, uint32_t *new_off, uint32_t *n_tab, pim_sample_t *rewritten)
{
    uint32_t used = 0, n = 0;
    for (uint32_t k = 0; k < c->count; k++) {
        const pim_sample_t *s = &samples[c->first + k];
        uint32_t offs[2] = { s->xtab_offset, s->ytab_offset }, got[2];
        for (int a = 0; a < 2; a++) {
            uint32_t t = 0;
            while (t < n && old_off[t] != offs[a])
                t++;
            if (t == n) {
                const pim_axis_t *ax = (const pim_axis_t *)(const void *)(tables + offs[a]);
                const uint32_t len = pim_dpu_table_bytes(ax);
                if (out)
                    memcpy(out + used, ax, len);
                old_off[n] = offs[a];
                new_off[n] = used;
                used += pim_dpu_round8(len);
                n++;
            }
            got[a] = new_off[t];
        }
        if (rewritten) {
            rewritten[k].xtab_offset = got[0];
            rewritten[k].ytab_offset = got[1];
        }
    }
    *n_tab = n;
    return used;
}

/* Bytes of the band edges (nr_tasklets + 1 row indices, padded to 8). */
static uint32_t bands_bytes_of(uint32_t nr_tasklets)
{
    return pim_dpu_round8((nr_tasklets + 1) * (uint32_t)sizeof(uint32_t));
}

static int in_mram(const uint64_t *mram_src, uint32_t i)
{
    return mram_src != NULL && mram_src[i] != PIM_DPU_HOST_SOURCE;
}

void pim_dpu_chunk_size(pim_dpu_chunk_t *c, const pim_sample_t *samples, const pim_dpu_sample_plan_t *plans,
                        const uint64_t *mram_src, const uint8_t *tables, uint32_t lut_bytes, uint32_t nr_tasklets,
                        uint32_t *scratch)
{
    uint64_t off = sizeof(pim_dpu_header_t) + (uint64_t)c->count * (sizeof(pim_sample_t) + sizeof(pim_dpu_job_t)) +
                   bands_bytes_of(nr_tasklets);
    c->tables_bytes = pack_tables(samples, c, tables, NULL, scratch, scratch + 2 * c->count, &c->n_tables, NULL);
    off += c->tables_bytes + pim_dpu_round8(lut_bytes);
    uint64_t outs = sizeof(pim_dpu_status_t);
    for (uint32_t k = 0; k < c->count; k++) {
        if (!in_mram(mram_src, c->first + k))
            off += (plans[c->first + k].crop_bytes + 7u) & ~7ull;
        outs += plans[c->first + k].out_bytes;
    }
    c->in_bytes = off;
    c->out_bytes = outs;
}

void pim_dpu_chunk_pack(const pim_dpu_chunk_t *c, pim_dpu_header_t *h, uint8_t *base, uint64_t xfer,
                        const pim_sample_t *samples, const pim_dpu_sample_plan_t *plans, const uint32_t *bands,
                        uint32_t T, const uint8_t *const *srcs, const uint64_t *mram_src, const uint8_t *tables,
                        const void *lut, uint32_t lut_bytes, uint32_t *scratch)
{
    const uint32_t lut_len = lut ? pim_dpu_round8(lut_bytes) : 0;
    const uint32_t bands_bytes = bands_bytes_of(T);
    h->n_samples = c->count;
    h->samples_off = sizeof(pim_dpu_header_t);
    h->jobs_off = h->samples_off + c->count * (uint32_t)sizeof(pim_sample_t);
    h->bands_off = h->jobs_off + c->count * (uint32_t)sizeof(pim_dpu_job_t);
    h->tables_off = h->bands_off + bands_bytes;
    h->tables_bytes = c->tables_bytes;
    h->lut_off = h->tables_off + c->tables_bytes;
    h->lut_bytes = lut ? lut_bytes : 0;
    if (c->in_bytes > h->in_bytes) /* the caller's may be larger: sources in MRAM past the chunk */
        h->in_bytes = (uint32_t)c->in_bytes;
    h->out_bytes = (uint32_t)c->out_bytes;
    pim_sample_t *ds = (pim_sample_t *)(void *)(base + h->samples_off);
    pim_dpu_job_t *jobs = (pim_dpu_job_t *)(void *)(base + h->jobs_off);
    uint32_t n_tab;
    pack_tables(samples, c, tables, base + h->tables_off, scratch, scratch + 2 * c->count, &n_tab, ds);
    if (lut)
        memcpy(base + h->lut_off, lut, lut_bytes);
    uint64_t src_at = h->lut_off + lut_len, dst_at = h->out_off + sizeof(pim_dpu_status_t);
    uint32_t rows = 0;
    for (uint32_t k = 0; k < c->count; k++) {
        const uint32_t i = c->first + k;
        const pim_sample_t *s = &samples[i];
        const pim_dpu_sample_plan_t *p = &plans[i];
        const uint32_t xt = ds[k].xtab_offset, yt = ds[k].ytab_offset;
        ds[k] = *s;
        ds[k].xtab_offset = xt;
        ds[k].ytab_offset = yt;
        if (in_mram(mram_src, i)) { /* already on the DPU, as the sample describes it */
            ds[k].src_offset = mram_src[i];
        } else { /* the crop box alone travels: a crop_h x crop_w image */
            const uint32_t row = s->crop_w * s->channels;
            const uint8_t *from = srcs[i] + s->src_offset + (size_t)s->crop_top * s->src_stride +
                                  (size_t)s->crop_left * s->channels;
            for (uint32_t y = 0; y < s->crop_h; y++)
                memcpy(base + src_at + (size_t)y * row, from + (size_t)y * s->src_stride, row);
            ds[k].src_offset = src_at;
            ds[k].src_h = s->crop_h;
            ds[k].src_w = s->crop_w;
            ds[k].src_stride = row;
            ds[k].crop_top = 0;
            ds[k].crop_left = 0;
            const uint64_t padded = (p->crop_bytes + 7u) & ~7ull;
            memset(base + src_at + p->crop_bytes, 0, padded - p->crop_bytes);
            src_at += padded;
        }
        ds[k].dst_offset = dst_at;
        dst_at += p->out_bytes;
        jobs[k].seg_w = p->seg_w;
        jobs[k].src_buf = p->src_buf;
        jobs[k].out_pitch = p->pitch;
        jobs[k].row_base = rows;
        jobs[k].ring_rows = p->ring_rows;
        jobs[k].reserved = 0;
        rows += s->out_h;
    }
    h->total_rows = rows;
    memset(base + h->bands_off, 0, bands_bytes);
    memcpy(base + h->bands_off, bands, (T + 1) * sizeof(uint32_t));
    memset(base + c->in_bytes, 0, xfer - c->in_bytes);
    memcpy(base, h, sizeof *h);
}

int32_t pim_dpu_plan_chunks(const pim_sample_t *samples, uint32_t n, const uint8_t *tables, uint64_t tables_bytes,
                            uint32_t lut_bytes, const pim_dpu_mram_sources_t *mram, uint32_t nr_dpus,
                            uint32_t nr_tasklets, uint32_t arena_bytes, uint32_t *first, uint64_t *chunk_bytes,
                            char *err, uint32_t err_len)
{
    if (first == NULL || chunk_bytes == NULL || nr_dpus == 0) {
        snprintf(err, err_len, "pim_dpu_plan_chunks: no first/chunk_bytes arrays or no DPUs");
        return -1;
    }
    uint64_t rows = 0;
    for (uint32_t i = 0; i < n; i++)
        rows += samples[i].out_h;
    pim_dpu_plan_t plan = {
        .samples = calloc(n ? n : 1, sizeof(pim_dpu_sample_plan_t)),
        .work = calloc(n ? n : 1, sizeof(uint64_t)),
        .row_work = malloc((size_t)(rows ? rows : 1) * sizeof(uint64_t)),
        .first = first,
        .bands = calloc((size_t)nr_dpus * (nr_tasklets + 1), sizeof(uint32_t)),
        .extra_work = mram ? mram->extra_work : NULL,
    };
    uint32_t *scratch = malloc(4 * (size_t)(n ? n : 1) * sizeof(uint32_t));
    int32_t active = -1;
    if (!plan.samples || !plan.work || !plan.row_work || !plan.bands || !scratch)
        snprintf(err, err_len, "out of host memory");
    else if (pim_dpu_plan(samples, n, tables, tables_bytes, nr_dpus, nr_tasklets, arena_bytes, &plan, err,
                          err_len) == 0) {
        active = (int32_t)plan.active;
        for (uint32_t d = 0; d < nr_dpus; d++) {
            pim_dpu_chunk_t c = { .first = d < plan.active ? first[d] : 0,
                                  .count = d < plan.active ? first[d + 1] - first[d] : 0 };
            pim_dpu_chunk_size(&c, samples, plan.samples, mram ? mram->offsets : NULL, tables, lut_bytes,
                               nr_tasklets, scratch);
            chunk_bytes[d] = c.count ? c.in_bytes : 0;
        }
    }
    free(plan.samples);
    free(plan.work);
    free(plan.row_work);
    free(plan.bands);
    free(scratch);
    return active;
}
