"""Step 5 of the flow, transform: where the fused kernel runs.

`kernels`: the kernels' arguments packed as the C structs, and the CPU kernels (cffi).
`dpu`: the same step on UPMEM DPUs through libdpu (`dpu.driver`), built for pimloader's
emulator (`dpu.emulator`) or for real DPUs with UPMEM's compiler (`dpu.toolchain`).
"""
