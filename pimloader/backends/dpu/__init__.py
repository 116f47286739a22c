"""The DPU backend: the host driver (csrc/dpu_driver.c) through cffi, the kernel builds."""
