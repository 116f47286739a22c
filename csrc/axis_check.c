/* axis_check.c: pim_check_axis (pim_axis_check.h), shared by the CPU kernel and the DPU host
 * driver, so that both refuse the same tables the same way. */
#include <stdint.h>

#include "pim_axis_check.h"
#include "pim_error.h"
#include "pim_resample.h"

const pim_axis_t *pim_check_axis(const uint8_t *tables, uint64_t tables_bytes, uint32_t offset,
                                 uint32_t n_in, uint32_t n_out, const char *name, char *err,
                                 uint32_t err_len)
{
    if (offset % 8 != 0 || (uint64_t)offset + sizeof(pim_axis_t) > tables_bytes) {
        set_err(err, err_len, "%s table offset %u is misaligned or outside the %llu-byte tables",
                name, offset, (unsigned long long)tables_bytes);
        return NULL;
    }
    const pim_axis_t *axis = (const pim_axis_t *)(const void *)(tables + offset);
    if (axis->n_in != n_in || axis->n_out != n_out) {
        set_err(err, err_len, "%s table maps %u -> %u, the sample needs %u -> %u", name,
                axis->n_in, axis->n_out, n_in, n_out);
        return NULL;
    }
    if (n_in == n_out)
        return axis; /* not resampled: nothing else is read */
    if (axis->taps == 0 || axis->taps % 4 != 0 || axis->precision < PIM_MIN_PRECISION ||
        axis->precision > PIM_MAX_PRECISION) {
        set_err(err, err_len, "%s table has taps %u (multiple of 4 expected) and precision %u "
                "(1..22 expected)", name, axis->taps, axis->precision);
        return NULL;
    }
    if ((uint64_t)offset + PIM_AXIS_TABLE_BYTES(n_out, axis->taps) > tables_bytes) {
        set_err(err, err_len, "%s table (%u outputs x %u taps) runs past the tables' end", name,
                n_out, axis->taps);
        return NULL;
    }
    const pim_range_t *ranges = pim_axis_ranges(axis);
    const int16_t *weights = pim_axis_weights(axis);
    uint32_t prev_first = 0, prev_end = 0;
    for (uint32_t j = 0; j < n_out; j++) {
        const uint32_t first = ranges[j].first, count = ranges[j].count;
        if (count > axis->taps || first > n_in || count > n_in - first) {
            set_err(err, err_len, "%s table output %u reads taps %u..%u of %u (taps %u)", name,
                    j, first, first + count, n_in, axis->taps);
            return NULL;
        }
        if (first < prev_first || first + count < prev_end) {
            set_err(err, err_len, "%s table windows must move forward (output %u)", name, j);
            return NULL;
        }
        for (uint32_t t = count; t < axis->taps; t++) {
            if (weights[(size_t)j * axis->taps + t] != 0) {
                set_err(err, err_len, "%s table output %u has a nonzero weight past its %u taps",
                        name, j, count);
                return NULL;
            }
        }
        prev_first = first;
        prev_end = first + count;
        /* the int32 accumulator cannot overflow */
        int64_t bound = (int64_t)1 << (axis->precision - 1);
        for (uint32_t t = 0; t < count; t++) {
            const int64_t w = weights[(size_t)j * axis->taps + t];
            bound += 255 * (w < 0 ? -w : w);
        }
        if (bound > INT32_MAX) {
            set_err(err, err_len, "%s table output %u could overflow the int32 accumulator", name,
                    j);
            return NULL;
        }
    }
    return axis;
}
