"""The one run batcher: decoded rows gathered into kernel runs and handed to backends.

Every in-process path (encoded images into a slot, in-memory images into a slot or into
per-sample outputs, one sample alone) adds its rows here. Consecutive rows of one output
tensor, one output size, interpolation, lookup table and backend form a run of at most the
backend's image kernel's `run_rows`; any other row ends the run first.

A run is submitted to its backend when it is full (or ended), and the producer goes on
decoding while a DPU backend works; the run in flight is waited for just before the next
one is submitted, and by `flush`, so that every row is written when the producer's batch
is complete. It is waited for before the next submit, not after, because a DPU wait is
libdpu's dpu_sync, which also waits for whatever was queued after the run: submitting first
would make the next run's DPU work part of this wait instead of overlapping the next
decode. The CPU backend computes inside `submit`, so its runs are done at once.

A run's rows may be a strided view (the top-left corners of a padded batch's images): a
kernel that `writes_strided_out` writes them in place; another is handed a contiguous
staging tensor, copied into the view when the run is waited for.
"""
from __future__ import annotations

from typing import Callable

import torch

from pimloader.backends.base import IMAGES, Handle, KernelRun


class RunBatcher:
    """`add` rows, then `flush`: every added row is written when flush returns.

    `router` picks each row's image kernel (backends.select.Router); `batch_rows` is the
    size of the batch being made, which sets the DPU kernels' run size; `on_submitted(sources)`
    is told when a run's sources are no longer needed (reused decode buffers), and after its
    backend marked those it decoded on the host after all (`EncodedImage.host_reason`)."""

    def __init__(self, router, batch_rows: int,
                 on_submitted: Callable[[list], None] | None = None) -> None:
        self.router = router
        self.batch_rows = batch_rows
        self.on_submitted = on_submitted
        self.rows: list[tuple] = []   # (row, source, box, geometry) of the gathered run
        self.target: tuple = ()       # (out, layout, lut, kernel) of the gathered run
        self.in_flight = None         # the handle of the run the backend works on

    def add(self, out, row: int, source, box, geometry, layout: str = "NCHW",
            lut=None) -> None:
        """Row `row` of `out` is `source`'s `box` through `geometry`."""
        kernel = self.router.kernel_for(IMAGES, geometry)
        if self.rows and not self._continues(out, row, geometry, layout, lut, kernel):
            self._submit()
        if not self.rows:
            self.target = (out, layout, lut, kernel)
        self.rows.append((row, source, box, geometry))
        if len(self.rows) >= kernel.run_rows(self.batch_rows):
            self._submit()

    def flush(self) -> None:
        """Submits the gathered rows and returns once every submitted row is written."""
        self._submit()
        self._wait()

    def _continues(self, out, row: int, geometry, layout: str, lut, kernel) -> bool:
        last_row, _, _, last = self.rows[-1]
        run_out, run_layout, run_lut, run_kernel = self.target
        return (out is run_out and row == last_row + 1 and layout == run_layout
                and lut is run_lut and kernel is run_kernel and geometry.size == last.size
                and geometry.interpolation == last.interpolation)

    def _submit(self) -> None:
        """Waits for the run in flight, then submits the gathered rows."""
        self._wait()
        if not self.rows:
            return
        rows, self.rows = self.rows, []
        out, layout, lut, kernel = self.target
        first = rows[0][0]
        target = out[first:first + len(rows)]
        staged = not target.is_contiguous() and not kernel.writes_strided_out
        run = KernelRun([row[1] for row in rows], [row[2] for row in rows], rows[0][3].size,
                        torch.empty_like(target, memory_format=torch.contiguous_format)
                        if staged else target, [row[3] for row in rows], layout, lut)
        handle = kernel.submit(run)
        self.in_flight = CopiedOnWait(handle, run.out, target) if staged else handle
        if self.on_submitted is not None:
            self.on_submitted(run.sources)

    def _wait(self) -> None:
        handle, self.in_flight = self.in_flight, None
        if handle is not None:
            handle.wait()


class CopiedOnWait(Handle):
    """A run rendered into contiguous staging, copied into its strided rows on `wait()`."""

    def __init__(self, handle: Handle, staging: torch.Tensor, target: torch.Tensor) -> None:
        self.handle, self.staging, self.target = handle, staging, target

    def wait(self):
        self.handle.wait()
        return self.target.copy_(self.staging)
