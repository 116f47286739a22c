/* Error messages of the host-side C code: written into a caller's buffer, never printed,
 * so that the Python side can raise them as exceptions. */
#ifndef PIM_ERROR_H
#define PIM_ERROR_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4)))
static inline void set_err(char *err, uint32_t err_len, const char *fmt, ...)
{
    if (err == NULL || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

#endif
