/* pimloader libdpu emulator: the public types of UPMEM's dpu_types.h that host drivers use
 * (struct dpu_set_t by value, struct dpu_symbol_t, the address/size typedefs and
 * DPU_MRAM_HEAP_POINTER_NAME), with the SDK's names and layouts.  Host side. */
#ifndef DPU_TYPES_H
#define DPU_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef uint16_t dpu_rank_id_t;
typedef uint32_t dpu_id_t;
typedef uint8_t dpu_slice_id_t;
typedef uint8_t dpu_member_id_t;
typedef uint8_t dpu_thread_t;
typedef uint32_t wram_addr_t;
typedef uint32_t mram_addr_t;
typedef mram_addr_t dpu_mem_max_addr_t;
typedef uint32_t wram_size_t;
typedef uint32_t mram_size_t;
typedef mram_size_t dpu_mem_max_size_t;
typedef uint32_t dpuword_t;

#define DPU_API_DEPRECATED __attribute__((deprecated))

/* Name of the symbol at the start of the free MRAM (the target of most transfers). */
#define DPU_MRAM_HEAP_POINTER_NAME "__sys_used_mram_end"

struct dpu_rank_t;
struct dpu_t;

typedef enum _dpu_set_kind_t {
    DPU_SET_RANKS, /* the set is a list of ranks */
    DPU_SET_DPU,   /* the set is one DPU */
} dpu_set_kind_t;

/* Passed by value everywhere, as in the SDK. */
struct dpu_set_t {
    dpu_set_kind_t kind;
    union {
        struct {
            uint32_t nr_ranks;
            struct dpu_rank_t **ranks;
        } list;
        struct dpu_t *dpu;
    };
};

struct dpu_program_t;

struct dpu_symbol_t {
    dpu_mem_max_addr_t address;
    dpu_mem_max_size_t size;
};

struct dpu_incbin_t {
    uint8_t *buffer;
    size_t size;
    const char *path;
};

#endif /* DPU_TYPES_H */
