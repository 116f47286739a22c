"""Per task, what runs for one batch: read and draw each sample, decode, and hand runs of
samples to a backend's fused kernel, writing into the batch slot.

`classification`: image folders (encoded JPEGs) -> fixed-size image batches.
`in_memory`: images a dataset returns as uint8 tensors, through the same kernel.
"""
