/* pimloader DPU emulator: the runtime part linked into every kernel built for the emulator
 * (pimloader._emulator.compile_kernel compiles it with the kernel's own -D flags).
 *
 * It records the build's NR_TASKLETS and stack size for the loader and receives, through
 * __dpuemu_attach, the table of runtime services of the emulator (see dpuemu_rt.h). */
#include <stdint.h>
#include <dpuemu_rt.h>

#ifndef NR_TASKLETS
#define NR_TASKLETS 1 /* as the DPU toolchain */
#endif
#ifndef STACK_SIZE_DEFAULT
#define STACK_SIZE_DEFAULT 1024 /* bytes of WRAM stack per tasklet (assumed SDK default) */
#endif

const struct dpuemu_rt_ops *__dpuemu_ops DPUEMU_HIDDEN;

const uint32_t __dpuemu_abi = DPUEMU_RT_ABI;
const uint32_t __dpuemu_nr_tasklets = (uint32_t)(NR_TASKLETS);
const uint32_t __dpuemu_stack_size = (uint32_t)(STACK_SIZE_DEFAULT);
const volatile uint32_t CLOCKS_PER_SEC = 350000000u;

void __dpuemu_attach(const struct dpuemu_rt_ops *ops)
{
    __dpuemu_ops = ops;
}
