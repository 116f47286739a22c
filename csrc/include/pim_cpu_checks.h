/* pim_cpu_checks.h: the CPU kernel's checks of a sample's descriptor (csrc/cpu_checks.c),
 * called by csrc/cpu_kernels.c (not exported), before any sample of a call runs. */
#ifndef PIM_CPU_CHECKS_H
#define PIM_CPU_CHECKS_H

#include <stdint.h>

#include "pim_cpu.h"
#include "pim_extra.h"
#include "pim_params.h"

/* Channels of sample s's output: its extra's (after colour ops), else its own. */
uint32_t pim_cpu_out_channels(const pim_sample_t *s, const pim_extra_t *e);

/* Where the rows and planes of sample s's output lie: `given`, or its slot contiguous. */
pim_out_pitch_t pim_cpu_slot_pitch(const pim_sample_t *s, const pim_extra_t *e,
                                   const pim_out_pitch_t *given);

/* 1 when sample i (s, its extra e, its source src of src_bytes[i] bytes) can run into an
 * output of dst_bytes with `pitch` (NULL: contiguous slots), its axis tables in `tables`;
 * else 0, the fault in err. */
int pim_cpu_check_sample(const pim_sample_t *s, const pim_extra_t *e, const uint8_t *src,
                         const uint64_t *src_bytes, uint32_t i, const uint8_t *tables,
                         uint64_t tables_bytes, const void *lut, uint64_t dst_bytes,
                         const pim_out_pitch_t *pitch, char *err, uint32_t err_len);

#endif /* PIM_CPU_CHECKS_H */
