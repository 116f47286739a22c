/* pimloader DPU emulator: the DPU's printf writes to the DPU's log buffer, read by the host
 * with dpu_log_read.  Everything else is the host's <stdio.h>. */
#ifndef PIMLOADER_DPUEMU_STDIO_H
#define PIMLOADER_DPUEMU_STDIO_H
#include_next <stdio.h>
#include <dpuemu_rt.h>

__attribute__((format(printf, 1, 2))) static inline int __dpuemu_printf(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    __dpuemu_ops->vprint(format, args);
    va_end(args);
    return 0;
}
#define printf(...) __dpuemu_printf(__VA_ARGS__)
#define puts(s) __dpuemu_printf("%s\n", (s))
#endif
