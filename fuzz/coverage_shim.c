/* Hands atheris's Python coverage to atheris's own libFuzzer when the sanitizer runtime is
 * preloaded (fuzz/README.md; the Makefile's `fuzz` target).
 *
 * gcc's libasan, which must be preloaded into Python for the extensions built with
 * -fsanitize=address, exports default (no-op) definitions of the __sanitizer_cov_* hooks.
 * atheris's libFuzzer (a Python extension, loaded later) defines the same names, but its
 * own calls to them bind to the first definition in the global scope: libasan's. libFuzzer
 * then never sees the Python coverage counters and the fuzzer runs blind. This library,
 * preloaded before libasan, defines those hooks and forwards each call to the definition in
 * the object that made it (atheris's core), found once with dladdr and dlsym. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

static void *caller_symbol(const void *caller, const char *name)
{
    Dl_info info;
    if (!dladdr(caller, &info) || info.dli_fname == NULL)
        return NULL;
    void *object = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (object == NULL)
        return NULL;
    void *symbol = dlsym(object, name);
    dlclose(object);
    return symbol;
}

/* each hook: resolve the caller's definition on first use (atheris calls them from one
 * object); do nothing when there is none */
#define FORWARD(name, params, args)                                                  \
    void name params                                                                 \
    {                                                                                \
        static void (*target) params;                                                \
        if (target == NULL) {                                                        \
            void *found = caller_symbol(__builtin_return_address(0), #name);         \
            if (found == NULL || found == (void *)name)                              \
                return;                                                              \
            target = (void (*) params)found;                                         \
        }                                                                            \
        target args;                                                                 \
    }

FORWARD(__sanitizer_cov_8bit_counters_init, (uint8_t *start, uint8_t *stop), (start, stop))
FORWARD(__sanitizer_cov_pcs_init, (const uintptr_t *start, const uintptr_t *stop), (start, stop))
FORWARD(__sanitizer_cov_trace_cmp8, (uint64_t a, uint64_t b), (a, b))
FORWARD(__sanitizer_cov_trace_const_cmp8, (uint64_t a, uint64_t b), (a, b))
