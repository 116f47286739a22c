/* The DPU host driver's optional emulator hooks (not libdpu): DMA counters and allocation
 * counts that pimloader's emulator keeps, for tests and the cost model. Built into both driver
 * builds; against UPMEM's SDK each reports that it is unavailable (-1 / 0). */
#include <stdint.h>
#include <stdio.h>

#include <dpu.h>
#ifdef PIM_DPU_EMULATED
#include <dpu_emulator.h>
#endif

#include "pim_dpu_driver_state.h"

int pim_dpu_emulated(void)
{
#ifdef PIMLOADER_DPU_EMULATOR
    return 1;
#else
    return 0;
#endif
}

void pim_dpu_fault_detail(const pim_dpu_driver_t *drv, int32_t dpu, char *detail, size_t n)
{
    detail[0] = 0;
#ifdef PIMLOADER_DPU_EMULATOR
    char buf[560];
    if (dpu >= 0 && dpuemu_fault_message(drv->dpus[dpu], buf, sizeof buf) == DPU_OK && buf[0])
        snprintf(detail, n, ": %s", buf);
#else
    (void)drv;
    (void)dpu;
    (void)n;
#endif
}

int pim_dpu_tasklet_counters(pim_dpu_driver_t *drv, uint32_t index, uint64_t *values)
{
#ifdef PIMLOADER_DPU_EMULATOR
    if (drv == NULL || values == NULL || index >= drv->nr_dpus)
        return -1;
    struct dpuemu_counters c;
    if (dpuemu_get_counters(drv->dpus[index], &c) != DPU_OK)
        return -1;
    for (uint32_t t = 0; t < drv->nr_tasklets && t < DPUEMU_MAX_TASKLETS; t++) {
        values[4 * t + 0] = c.tasklet[t].mram_read_calls;
        values[4 * t + 1] = c.tasklet[t].mram_read_bytes;
        values[4 * t + 2] = c.tasklet[t].mram_write_calls;
        values[4 * t + 3] = c.tasklet[t].mram_write_bytes;
    }
    return 0;
#else
    (void)drv;
    (void)index;
    (void)values;
    return -1;
#endif
}

int pim_dpu_counters(pim_dpu_driver_t *drv, uint32_t index, uint64_t *values)
{
#ifdef PIMLOADER_DPU_EMULATOR
    if (drv == NULL || values == NULL || (index != 0xFFFFFFFFu && index >= drv->nr_dpus))
        return -1;
    struct dpuemu_counters c;
    if (dpuemu_get_counters(index == 0xFFFFFFFFu ? drv->set : drv->dpus[index], &c) != DPU_OK)
        return -1;
    values[0] = c.mram_read_calls;
    values[1] = c.mram_read_bytes;
    values[2] = c.mram_write_calls;
    values[3] = c.mram_write_bytes;
    values[4] = c.host_to_dpu_bytes;
    values[5] = c.dpu_to_host_bytes;
    values[6] = c.launches;
    values[7] = c.dma_cycles_model;
    values[8] = c.wram_static_bytes;
    values[9] = c.wram_heap_peak;
    return 0;
#else
    (void)drv;
    (void)index;
    (void)values;
    return -1;
#endif
}

int64_t pim_dpu_emulator_live_dpus(void)
{
#ifdef PIMLOADER_DPU_EMULATOR
    uint32_t nr_dpus = 0;
    return dpuemu_live_dpus(&nr_dpus) == DPU_OK ? (int64_t)nr_dpus : -1;
#else
    return -1;
#endif
}

int pim_dpu_reset_counters(pim_dpu_driver_t *drv)
{
#ifdef PIMLOADER_DPU_EMULATOR
    if (drv == NULL || dpuemu_reset_counters(drv->set) != DPU_OK)
        return -1;
    return 0;
#else
    (void)drv;
    return -1;
#endif
}
