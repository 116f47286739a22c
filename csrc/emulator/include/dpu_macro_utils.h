/* pimloader libdpu emulator: the helper macros behind DPU_FOREACH / DPU_RANK_FOREACH
 * (one or two loop variables).  Host side. */
#ifndef BACKENDS_DPU_MACRO_UTILS_H
#define BACKENDS_DPU_MACRO_UTILS_H

#define _CONCAT_X(x, y) x##y
#define _CONCAT(x, y) _CONCAT_X(x, y)
#define _XSTR(x) #x
#define _STR(x) _XSTR(x)

/* picks the suffix X (set, dpu) or I (set, dpu, index) from the number of arguments */
#define _DPU_FOREACH_VARIANT(...) _DPU_FOREACH_VARIANT_(__VA_ARGS__, _DPU_FOREACH_VARIANT_SEQ())
#define _DPU_FOREACH_VARIANT_(a, b, ...) _DPU_FOREACH_VARIANT_N(__VA_ARGS__)
#define _DPU_FOREACH_VARIANT_N(_1, N, ...) N
#define _DPU_FOREACH_VARIANT_SEQ() I, X

#endif /* BACKENDS_DPU_MACRO_UTILS_H */
