/* pimloader DPU emulator: the private interface between a kernel compiled for the emulator
 * and the emulator library (csrc/emulator/dpuemu.c).  Not an UPMEM header; kernels never
 * include it directly.
 *
 * The DPU runtime headers of this directory (mram.h, defs.h, barrier.h, ...) turn every
 * runtime call of a kernel into a call through `__dpuemu_ops`, a table that the emulator
 * writes into each DPU's private copy of the kernel right after loading it.  The calling
 * DPU and tasklet are known to the emulator from the calling thread. */
#ifndef PIMLOADER_DPUEMU_RT_H
#define PIMLOADER_DPUEMU_RT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DPUEMU_RT_ABI 1u

#if defined(__x86_64__) || defined(__i386__)
/* A DPU has no FPU: kernels for the emulator are built without SSE/x87 registers, so any
 * float or double in a kernel fails to compile (see pimloader/_emulator.py). */
#endif

struct dpuemu_rt_ops {
    uint32_t abi;
    unsigned int (*me)(void);
    void (*ldma)(void *to_wram, const void *from_mram, unsigned int nb_of_bytes, const char *file, int line);
    void (*sdma)(const void *from_wram, void *to_mram, unsigned int nb_of_bytes, const char *file, int line);
    void (*barrier_wait)(void *barrier, const char *file, int line);
    void (*mutex_lock)(uint8_t *mutex);
    bool (*mutex_trylock)(uint8_t *mutex);
    void (*mutex_unlock)(uint8_t *mutex);
    void *(*mem_alloc)(size_t size, const char *file, int line);
    void *(*mem_reset)(void);
    uint64_t (*perfcounter_get)(void);
    uint64_t (*perfcounter_config)(int config, bool reset_value);
    void (*vprint)(const char *format, va_list args);
    void (*fault)(const char *rule, const char *detail, const char *file, int line) __attribute__((noreturn));
};

#define DPUEMU_HIDDEN __attribute__((visibility("hidden")))
extern const struct dpuemu_rt_ops *__dpuemu_ops DPUEMU_HIDDEN;

#endif /* PIMLOADER_DPUEMU_RT_H */
