/* pimloader libdpu emulator: the host API of UPMEM's <dpu.h>, with the SDK's signatures,
 * enums and macros, implemented by csrc/emulator/dpuemu.c (see csrc/emulator/README.md).
 *
 * A host driver written against the real dpu.h builds unchanged against this header.
 * Emulator-only extensions (counters, fault messages) live in dpu_emulator.h. */
#ifndef DPU_H
#define DPU_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <dpu_error.h>
#include <dpu_types.h>
#include <dpu_macro_utils.h>

typedef enum _dpu_launch_policy_t {
    DPU_ASYNCHRONOUS, /* return once the DPUs are booted; wait with dpu_sync */
    DPU_SYNCHRONOUS,  /* return once the DPUs are done */
} dpu_launch_policy_t;

typedef enum _dpu_xfer_t {
    DPU_XFER_TO_DPU,
    DPU_XFER_FROM_DPU,
} dpu_xfer_t;

typedef enum _dpu_xfer_flags_t {
    DPU_XFER_DEFAULT = 0,       /* transfer, then clear the prepared buffers */
    DPU_XFER_NO_RESET = 1 << 0, /* transfer, keep the prepared buffers */
    DPU_XFER_ASYNC = 1 << 1,    /* queue on the ranks' job lists and return; done by a later dpu_sync */
} dpu_xfer_flags_t;

typedef enum _dpu_callback_flags_t {
    DPU_CALLBACK_DEFAULT = 0,
    DPU_CALLBACK_ASYNC = 1 << 0,
    DPU_CALLBACK_NONBLOCKING = 1 << 1,
    DPU_CALLBACK_SINGLE_CALL = 1 << 2,
} dpu_callback_flags_t;

/* Benchmark-style helpers, as in the SDK.  A library must not use DPU_ASSERT (it exits). */
#define DPU_CHECK(statement, on_error)                                                                   \
    do {                                                                                                 \
        dpu_error_t __error = (statement);                                                               \
        if (__error != DPU_OK) {                                                                         \
            fprintf(stderr, "%s:%d(%s): DPU Error (%s)\n", __FILE__, __LINE__, __func__,                 \
                dpu_error_to_string(__error));                                                           \
            on_error;                                                                                    \
        }                                                                                                \
    } while (0)
#define DPU_ASSERT(statement) DPU_CHECK(statement, exit(EXIT_FAILURE))

#define DPU_ALLOCATE_ALL (UINT_MAX)

dpu_error_t dpu_alloc(uint32_t nr_dpus, const char *profile, struct dpu_set_t *dpu_set);
dpu_error_t dpu_alloc_ranks(uint32_t nr_ranks, const char *profile, struct dpu_set_t *dpu_set);
dpu_error_t dpu_free(struct dpu_set_t dpu_set);
dpu_error_t dpu_get_nr_ranks(struct dpu_set_t dpu_set, uint32_t *nr_ranks);
dpu_error_t dpu_get_nr_dpus(struct dpu_set_t dpu_set, uint32_t *nr_dpus);

/* DPU_RANK_FOREACH(set, rank[, i]) and DPU_FOREACH(set, dpu[, i]): `rank` / `dpu` are
 * struct dpu_set_t lvalues, `i` an integer lvalue (the index in the set). */
#define DPU_RANK_FOREACH(set, rank, ...)                                                                 \
    _CONCAT(_DPU_RANK_FOREACH_, _DPU_FOREACH_VARIANT(set, rank, ##__VA_ARGS__))(set, rank, ##__VA_ARGS__)
#define _DPU_RANK_FOREACH_X(set, rank)                                                                   \
    for (struct dpu_set_rank_iterator_t __rank_it = dpu_set_rank_iterator_from(&set);                    \
         rank = __rank_it.next, __rank_it.has_next; dpu_set_rank_iterator_next(&__rank_it))
#define _DPU_RANK_FOREACH_I(set, rank, i)                                                                \
    for (struct dpu_set_rank_iterator_t __rank_it = dpu_set_rank_iterator_from(&set);                    \
         i = __rank_it.count, rank = __rank_it.next, __rank_it.has_next;                                 \
         dpu_set_rank_iterator_next(&__rank_it))

#define DPU_FOREACH(set, dpu, ...)                                                                       \
    _CONCAT(_DPU_FOREACH_, _DPU_FOREACH_VARIANT(set, dpu, ##__VA_ARGS__))(set, dpu, ##__VA_ARGS__)
#define _DPU_FOREACH_X(set, dpu)                                                                         \
    for (struct dpu_set_dpu_iterator_t __dpu_it = dpu_set_dpu_iterator_from(&set);                       \
         dpu = __dpu_it.next, __dpu_it.has_next; dpu_set_dpu_iterator_next(&__dpu_it))
#define _DPU_FOREACH_I(set, dpu, i)                                                                      \
    for (struct dpu_set_dpu_iterator_t __dpu_it = dpu_set_dpu_iterator_from(&set);                       \
         i = __dpu_it.count, dpu = __dpu_it.next, __dpu_it.has_next;                                     \
         dpu_set_dpu_iterator_next(&__dpu_it))

struct dpu_set_rank_iterator_t {
    struct dpu_set_t *set;
    uint32_t count;
    uint32_t next_idx;
    bool has_next;
    struct dpu_set_t next;
};

struct dpu_set_dpu_iterator_t {
    struct dpu_set_rank_iterator_t rank_iterator;
    uint32_t count;
    uint32_t next_idx;
    bool has_next;
    struct dpu_set_t next;
};

struct dpu_set_rank_iterator_t dpu_set_rank_iterator_from(struct dpu_set_t *set);
void dpu_set_rank_iterator_next(struct dpu_set_rank_iterator_t *iterator);
struct dpu_set_dpu_iterator_t dpu_set_dpu_iterator_from(struct dpu_set_t *set);
void dpu_set_dpu_iterator_next(struct dpu_set_dpu_iterator_t *iterator);

/* For the emulator, binary_path names a shared object built from the kernel source by
 * pimloader._emulator.compile_kernel (the same source dpu-upmem-dpurte-clang compiles). */
dpu_error_t dpu_load(struct dpu_set_t dpu_set, const char *binary_path, struct dpu_program_t **program);
dpu_error_t dpu_get_symbol(struct dpu_program_t *program, const char *symbol_name, struct dpu_symbol_t *symbol);

dpu_error_t dpu_launch(struct dpu_set_t dpu_set, dpu_launch_policy_t policy);
dpu_error_t dpu_status(struct dpu_set_t dpu_set, bool *done, bool *fault);
dpu_error_t dpu_sync(struct dpu_set_t dpu_set);

dpu_error_t dpu_copy_to(
    struct dpu_set_t dpu_set, const char *symbol_name, uint32_t symbol_offset, const void *src, size_t length);
dpu_error_t dpu_copy_from(
    struct dpu_set_t dpu_set, const char *symbol_name, uint32_t symbol_offset, void *dst, size_t length);
dpu_error_t dpu_copy_to_symbol(
    struct dpu_set_t dpu_set, struct dpu_symbol_t symbol, uint32_t symbol_offset, const void *src, size_t length);
dpu_error_t dpu_copy_from_symbol(
    struct dpu_set_t dpu_set, struct dpu_symbol_t symbol, uint32_t symbol_offset, void *dst, size_t length);

dpu_error_t dpu_prepare_xfer(struct dpu_set_t dpu_set, void *buffer);
dpu_error_t dpu_push_xfer(struct dpu_set_t dpu_set,
    dpu_xfer_t xfer,
    const char *symbol_name,
    uint32_t symbol_offset,
    size_t length,
    dpu_xfer_flags_t flags);
dpu_error_t dpu_push_xfer_symbol(struct dpu_set_t dpu_set,
    dpu_xfer_t xfer,
    struct dpu_symbol_t symbol,
    uint32_t symbol_offset,
    size_t length,
    dpu_xfer_flags_t flags);
dpu_error_t dpu_broadcast_to(struct dpu_set_t dpu_set,
    const char *symbol_name,
    uint32_t symbol_offset,
    const void *src,
    size_t length,
    dpu_xfer_flags_t flags);
dpu_error_t dpu_broadcast_to_symbol(struct dpu_set_t dpu_set,
    struct dpu_symbol_t symbol,
    uint32_t symbol_offset,
    const void *src,
    size_t length,
    dpu_xfer_flags_t flags);

dpu_error_t dpu_callback(struct dpu_set_t dpu_set,
    dpu_error_t (*callback)(struct dpu_set_t, uint32_t, void *),
    void *args,
    dpu_callback_flags_t flags);

dpu_error_t dpu_log_read(struct dpu_set_t set, FILE *stream);

#endif /* DPU_H */
