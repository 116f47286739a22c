/* dpu_stage.c: a stage that runs before the kernel on the same DPUs (pim_dpu_run_stage, see
 * pim_dpu_driver.h), for a program that leaves the kernel's sources in MRAM: today the JPEG
 * decoder (dpu_src/jpeg_decode.c), whose decoded rows the crop/resize kernel then reads where
 * they are (docs/dpu.md, "Decode and transform on the same DPU").
 *
 * The decoder and the kernel do not fit IRAM together, so each is its own program: dpu_load of
 * the stage's program, the push of its chunks, a synchronous launch, the gather of its
 * statuses; the next pim_dpu_submit loads the kernel again. MRAM survives dpu_load (libdpu's
 * loader writes only a program's own MRAM sections), so the stage's output stays for the
 * kernel. dpu_load is synchronous in libdpu (it waits for each rank's queue), so the stage is
 * synchronous too: it runs between two batches, never with one in flight.
 *
 * libdpu API only, as dpu_driver.c.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <dpu.h>

#include "pim_dpu_driver.h"
#include "pim_dpu_driver_state.h"
#include "pim_error.h"

static int stage_failed(pim_dpu_driver_t *drv, const char *call, const char *binary, dpu_error_t e, char *err,
                        uint32_t err_len)
{
    char text[200], detail[600];
    pim_dpu_error_text(e, text, sizeof text);
    const int32_t bad = pim_dpu_find_fault(drv, 0, drv->nr_dpus);
    drv->last_dpu = bad;
    drv->recover = true; /* the ranks may keep the error; a fault leaves WRAM as it stopped */
    pim_dpu_fault_detail(drv, bad, detail, sizeof detail);
    if (bad >= 0) {
        set_err(err, err_len, "%s of %s: DPU %d faulted: %s%s", call, binary, bad, text, detail);
        return PIM_DPU_E_FAULT;
    }
    set_err(err, err_len, "%s of %s failed on the set of %u DPUs: %s", call, binary, drv->nr_dpus, text);
    return PIM_DPU_E_LIBDPU;
}

int pim_dpu_run_stage(pim_dpu_driver_t *drv, const char *binary, const uint8_t *chunks, uint64_t xfer,
                      uint64_t status_off, uint64_t status_bytes, uint8_t *statuses, char *err, uint32_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (drv == NULL) {
        set_err(err, err_len, "the DPU driver is closed");
        return PIM_DPU_E_ARG;
    }
    drv->last_dpu = -1;
    if (drv->lost) {
        set_err(err, err_len, "%s", drv->lost_msg);
        return PIM_DPU_E_LIBDPU;
    }
    if (binary == NULL || chunks == NULL || statuses == NULL || xfer == 0 || xfer % 8 || status_bytes == 0 ||
        status_bytes % 8 || status_off % 8 || status_off < xfer || status_off + status_bytes > PIM_DPU_MRAM_BUDGET) {
        set_err(err, err_len, "a stage needs a program, chunks of a multiple of 8 bytes and statuses after them in "
                "MRAM (xfer %llu, statuses %llu bytes at %llu)", (unsigned long long)xfer,
                (unsigned long long)status_bytes, (unsigned long long)status_off);
        return PIM_DPU_E_ARG;
    }
    if (pim_dpu_pending(drv) != 0) {
        set_err(err, err_len, "a stage runs between batches: wait for the %u batches in flight first",
                pim_dpu_pending(drv));
        return PIM_DPU_E_BUSY;
    }
    int rc = PIM_DPU_OK;
    if (drv->recover && (rc = pim_dpu_recover(drv, err, err_len)) != PIM_DPU_OK) /* after a failure */
        return rc;
    if ((rc = pim_dpu_load_program(drv, binary, err, err_len)) != PIM_DPU_OK)
        return rc;
    if (drv->loaded_heap != drv->kernel_heap) { /* each side counts offsets from its own heap start */
        set_err(err, err_len, "%s starts its free MRAM (DPU_MRAM_HEAP_POINTER) at 0x%x, the kernel at 0x%x: what it "
                "leaves in MRAM would not be where the kernel reads it", binary, drv->loaded_heap, drv->kernel_heap);
        drv->recover = true;
        return PIM_DPU_E_ARG;
    }
    dpu_error_t e = DPU_OK;
    for (uint32_t d = 0; d < drv->nr_dpus && e == DPU_OK; d++)
        e = dpu_prepare_xfer(drv->dpus[d], (void *)(chunks + (size_t)d * xfer));
    if (e == DPU_OK)
        e = dpu_push_xfer(drv->set, DPU_XFER_TO_DPU, DPU_MRAM_HEAP_POINTER_NAME, 0, xfer, DPU_XFER_DEFAULT);
    if (e != DPU_OK)
        return stage_failed(drv, "dpu_push_xfer(TO_DPU)", binary, e, err, err_len);
    if ((e = dpu_launch(drv->set, DPU_SYNCHRONOUS)) != DPU_OK)
        return stage_failed(drv, "dpu_launch", binary, e, err, err_len);
    for (uint32_t d = 0; d < drv->nr_dpus && e == DPU_OK; d++)
        e = dpu_prepare_xfer(drv->dpus[d], statuses + (size_t)d * status_bytes);
    if (e == DPU_OK)
        e = dpu_push_xfer(drv->set, DPU_XFER_FROM_DPU, DPU_MRAM_HEAP_POINTER_NAME, (uint32_t)status_off, status_bytes,
                          DPU_XFER_DEFAULT);
    if (e != DPU_OK)
        return stage_failed(drv, "dpu_push_xfer(FROM_DPU)", binary, e, err, err_len);
    return PIM_DPU_OK;
}
