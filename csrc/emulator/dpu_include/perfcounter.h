/* pimloader DPU emulator: UPMEM's perfcounter.h.
 *
 * The emulator does not execute DPU instructions, so it cannot count cycles or
 * instructions.  Its per-DPU counter counts, since the last reset:
 *   COUNT_CYCLES        modelled MRAM DMA cycles of the DPU (77 + bytes/2 per mram_read,
 *                       61 + bytes/2 per mram_write, the PrIM latency figures): a lower
 *                       bound of the kernel's real cycle count;
 *   COUNT_INSTRUCTIONS  DMA instructions (ldma/sdma) issued: a lower bound of the
 *                       instructions executed.
 * CLOCKS_PER_SEC is 350 MHz (the PrIM system's DPU clock). */
#ifndef DPUSYSCORE_PERFCOUNTER_H
#define DPUSYSCORE_PERFCOUNTER_H

#include <stdint.h>
#include <stdbool.h>
#include <dpuemu_rt.h>

typedef uint64_t perfcounter_t;

typedef enum _perfcounter_config_t {
    COUNT_SAME = 0,
    COUNT_CYCLES = 1,
    COUNT_INSTRUCTIONS = 2,
    COUNT_NOTHING = 3,
} perfcounter_config_t;

extern const volatile uint32_t CLOCKS_PER_SEC;

static inline perfcounter_t perfcounter_get(void)
{
    return __dpuemu_ops->perfcounter_get();
}

#ifndef DPU_PROFILING
static inline perfcounter_t perfcounter_config(perfcounter_config_t config, bool reset_value)
{
    return __dpuemu_ops->perfcounter_config((int)config, reset_value);
}
#else
#define perfcounter_config(config, reset_value)                                                          \
    do {                                                                                                 \
    } while (0)
#endif

#endif /* DPUSYSCORE_PERFCOUNTER_H */
