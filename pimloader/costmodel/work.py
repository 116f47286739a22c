"""The kernel's work, counted from a batch's own axis tables, over the driver's own plan.

The plan (which samples each DPU gets, each sample's WRAM plan, the tasklets' row bands) is
the driver's, read from its C code (pim_dpu_plan of csrc/dpu_plan.c, through
`pimloader._dpu_emulated`); nothing of it is re-derived here.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np

from pimloader import _dpu_emulated
from pimloader.options import NR_TASKLETS

_ffi, _lib = _dpu_emulated.ffi, _dpu_emulated.lib

# The work counters of the kernel (one column of `KernelWork.per_tasklet` each), each priced
# by an instruction-cost parameter of `Assumptions`.
WORK = ("h_mac", "h_out", "v_mac", "v_init", "v_finish", "emit", "row", "column", "sample_load")

AXIS_HEADER_BYTES = _ffi.sizeof("pim_axis_t")
RANGE_BYTES = _ffi.sizeof("pim_range_t")
HEADER_BYTES = _ffi.sizeof("pim_dpu_header_t")  # pushed to every DPU
STATUS_BYTES = _ffi.sizeof("pim_dpu_status_t")  # written by tasklet 0 at the end


# ---- the kernel's work, counted from a batch's tables -------------------------------------

def read_axis(tables: np.ndarray, offset: int):
    """(n_in, n_out, taps, first[n_out] or None, count[n_out] or None) of the axis table at
    `offset` of pack_batch's table buffer (pim_params.h layout); None when not resampled."""
    raw = np.asarray(tables, dtype=np.uint8)
    n_in, n_out, taps, _precision = (int(v) for v in raw[offset:offset + 16].view("<u4"))
    if taps == 0:
        return n_in, n_out, 0, None, None
    ranges = raw[offset + AXIS_HEADER_BYTES:offset + AXIS_HEADER_BYTES + RANGE_BYTES * n_out]
    ranges = ranges.view("<u4").reshape(n_out, 2).astype(np.int64)
    return n_in, n_out, taps, ranges[:, 0], ranges[:, 1]


@dataclass(frozen=True)
class SamplePlan:
    """How the driver runs one sample (pim_dpu_sample_plan_t of csrc/include/pim_dpu_plan.h):
    output pixels per segment, source bytes buffered per row, resampled rows kept in the WRAM
    ring (0: none), and the sample's MRAM output layout."""
    seg_w: int
    src_buf: int
    ring_rows: int
    pitch: int = 0
    planes: int = 0
    row_bytes: int = 0
    crop_bytes: int = 0
    out_bytes: int = 0

    @classmethod
    def _of(cls, c) -> "SamplePlan":
        return cls(*(int(getattr(c, f.name)) for f in fields(cls)))

    def _to_c(self):
        c = _ffi.new("pim_dpu_sample_plan_t *")
        for f in fields(self):
            setattr(c, f.name, getattr(self, f.name))
        return c


def arena_bytes(nr_tasklets: int, stack_bytes: int = 1024) -> int:
    """pim_dpu_arena_bytes (include/pim_dpu_layout.h): one tasklet's WRAM arena."""
    return int(_lib.pim_dpu_arena_bytes(nr_tasklets, stack_bytes))


def _sample_ptr(sample):
    """A pim_sample_t * to a copy of one pack_batch descriptor (a SAMPLE_DTYPE record)."""
    raw = bytearray(np.asarray(sample).tobytes())
    if len(raw) != _ffi.sizeof("pim_sample_t"):
        raise ValueError(f"a pim_sample_t is {_ffi.sizeof('pim_sample_t')} bytes, got {len(raw)}")
    return _ffi.cast("pim_sample_t *", _ffi.from_buffer(raw)), raw


def _tables_ptr(tables):
    tables = np.ascontiguousarray(tables, dtype=np.uint8)
    return _ffi.cast("uint8_t *", _ffi.from_buffer(tables)), tables


def plan_sample(sample, tables: np.ndarray, arena_bytes: int, nr_tasklets: int = NR_TASKLETS) -> Optional[SamplePlan]:
    """The driver's plan of one pim_sample_t (pim_dpu_plan_sample; None: refused)."""
    (ptr, keep), (tab, tables) = _sample_ptr(sample), _tables_ptr(tables)
    c = _ffi.new("pim_dpu_sample_plan_t *")
    err = _ffi.new("char[]", 512)
    ok = _lib.pim_dpu_plan_sample(ptr, tab, tables.nbytes, arena_bytes, nr_tasklets, c, err, len(err))
    return SamplePlan._of(c) if ok else None


def row_work(sample, tables: np.ndarray, plan: SamplePlan) -> np.ndarray:
    """The driver's estimate of each output row's work (pim_dpu_row_work, csrc/dpu_plan.c; the
    formula is in pim_dpu_plan.h), for a sample `plan_sample` planned. It balances DPUs and
    tasklets."""
    (ptr, keep), (tab, tables) = _sample_ptr(sample), _tables_ptr(tables)
    rows = np.zeros(int(sample["out_h"]), dtype=np.uint64)
    _lib.pim_dpu_row_work(ptr, tab, plan._to_c(), _ffi.cast("uint64_t *", _ffi.from_buffer(rows)))
    return rows.astype(np.int64)


def _fresh_rows(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Source rows of each vertical window past the previous window (windows only move forward)."""
    end = first + count
    before = np.concatenate([[0], end[:-1]])
    return np.maximum(end - np.maximum(before, first), 0)


@dataclass
class SampleWork:
    """What the kernel computes for one sample, per output row (arrays of out_h)."""
    channels: int
    out_h: int
    out_w: int
    ops: np.ndarray            # [out_h, len(WORK)] work counters of each output row
    least_in_bytes: int        # source pixels the outputs depend on (the window's support)
    out_bytes: int             # output elements x element size
    band_start: Optional[np.ndarray] = None  # [out_h, len(WORK)] extra work of a row that starts a band


def sample_work(sample, tables: np.ndarray, ring: bool = True) -> SampleWork:
    """Count, row by row, the work crop_resize.c does for one pim_sample_t of pack_batch.

    Per output row y (V = taps of row y if the height is resampled, else 1 source row):
      h_mac    C * fresh(y) * sum_x taps(x)   (fresh(y): the source rows resampled
                                               horizontally for row y; see below)
      h_out    C * fresh(y) * out_w           (rounded horizontal outputs)
      v_mac    C * out_w * taps(y)            v_init, v_finish: C * out_w each (height resampled)
      emit     C * out_w                      (flip + table conversion + store)
    With the WRAM ring (ring=True, the plan's ring_rows > 0) fresh(y) is the rows of row y's
    window past row y-1's window (each source row is resampled once per segment and band), and
    a row that starts a tasklet's band resamples its whole window (`band_start` holds the
    extra). Without it (ring=False: the kernel before the ring, or a sample whose ring does not
    fit WRAM) fresh(y) = V(y): the horizontal pass is redone for every vertical tap.
    `row`, `column` and `sample_load` are filled in per DPU (they depend on the split)."""
    C, out_h, out_w = int(sample["channels"]), int(sample["out_h"]), int(sample["out_w"])
    _, _, _, xfirst, xcount = read_axis(tables, int(sample["xtab_offset"]))
    _, _, _, yfirst, ycount = read_axis(tables, int(sample["ytab_offset"]))
    need_h, need_v = xcount is not None, ycount is not None
    ops = np.zeros((out_h, len(WORK)), dtype=np.int64)
    start = np.zeros((out_h, len(WORK)), dtype=np.int64)
    col = {name: i for i, name in enumerate(WORK)}
    V = ycount if need_v else np.ones(out_h, dtype=np.int64)
    fresh = _fresh_rows(yfirst, ycount) if (ring and need_v and need_h) else V
    if need_h:
        ops[:, col["h_mac"]] = C * fresh * int(xcount.sum())
        ops[:, col["h_out"]] = C * fresh * out_w
        start[:, col["h_mac"]] = C * (V - fresh) * int(xcount.sum())
        start[:, col["h_out"]] = C * (V - fresh) * out_w
    if need_v:
        ops[:, col["v_mac"]] = C * out_w * ycount
        ops[:, col["v_init"]] = C * out_w
        ops[:, col["v_finish"]] = C * out_w
    ops[:, col["emit"]] = C * out_w
    rows = int((yfirst + ycount).max() - yfirst.min()) if need_v else out_h
    cols = int((xfirst + xcount).max() - xfirst.min()) if need_h else out_w
    return SampleWork(C, out_h, out_w, ops, rows * cols * C, out_h * out_w * C * int(sample["out_esize"]),
                      start)


def split_samples(work: Sequence[int], nr_dpus: int) -> list[range]:
    """The driver's split of a batch over DPUs (pim_dpu_split, csrc/dpu_plan.c): contiguous
    runs that minimise the largest run's estimated work, every active DPU at least one sample."""
    work = np.ascontiguousarray([int(v) for v in work], dtype=np.uint64)
    first = np.zeros(min(len(work), nr_dpus) + 1, dtype=np.uint32)
    active = _lib.pim_dpu_split(_ffi.cast("uint64_t *", _ffi.from_buffer(work)), len(work), nr_dpus,
                                _ffi.cast("uint32_t *", _ffi.from_buffer(first)))
    return [range(int(first[d]), int(first[d + 1])) for d in range(active)]


def split_by_pixels(out_pixels: Sequence[int], nr_dpus: int) -> list[range]:
    """The driver's split before it balanced work: contiguous runs balanced by output pixels
    (kept to compare the two splits)."""
    n = len(out_pixels)
    active = min(n, nr_dpus)
    total = int(sum(out_pixels))
    runs, i, prefix = [], 0, 0
    for d in range(active):
        first, left_after = i, active - d - 1
        while True:
            prefix += int(out_pixels[i])
            i += 1
            if not (i < n - left_after and prefix * active < total * (d + 1)):
                break
        runs.append(range(first, i))
    return runs


def bands(total_rows: int, nr_tasklets: int) -> list[range]:
    """Even bands of output rows, one per tasklet (the kernel's split before the host cut
    bands by work; kept to compare)."""
    edges = [t * total_rows // nr_tasklets for t in range(nr_tasklets + 1)]
    return [range(edges[t], edges[t + 1]) for t in range(nr_tasklets)]


def cut_bands(row_work: Sequence[int], nr_tasklets: int) -> list[range]:
    """The driver's bands of a DPU's output rows (pim_dpu_cut_bands, csrc/dpu_plan.c): band t
    starts at the first row whose work before it reaches t / T of the DPU's work."""
    rows = np.ascontiguousarray([int(v) for v in row_work], dtype=np.uint64)
    edges = np.zeros(nr_tasklets + 1, dtype=np.uint32)
    _lib.pim_dpu_cut_bands(_ffi.cast("uint64_t *", _ffi.from_buffer(rows)), len(rows), nr_tasklets,
                           _ffi.cast("uint32_t *", _ffi.from_buffer(edges)))
    return [range(int(edges[t]), int(edges[t + 1])) for t in range(nr_tasklets)]


@dataclass
class DriverPlan:
    """The driver's whole plan of a batch (pim_dpu_plan): per sample its SamplePlan and its rows'
    estimated work, the DPUs' runs of samples and each active DPU's tasklet bands (rows of its
    chunk)."""
    plans: list
    row_work: list       # [n] int64 arrays of out_h
    runs: list           # [active] ranges of sample indices
    bands: list          # [active] lists of nr_tasklets ranges


def driver_plan(samples: np.ndarray, tables: np.ndarray, nr_dpus: int, nr_tasklets: int,
                arena_bytes: int) -> DriverPlan:
    """What pim_dpu_submit plans for this batch (csrc/dpu_plan.c, pim_dpu_plan): raises
    ValueError with the driver's message for a sample it would refuse."""
    samples = np.ascontiguousarray(samples)
    n = len(samples)
    if samples.dtype.itemsize != _ffi.sizeof("pim_sample_t"):
        raise ValueError("samples must be pack_batch's pim_sample_t descriptors")
    tab, tables = _tables_ptr(tables)
    out_h = samples["out_h"].astype(np.int64)
    plan = _ffi.new("pim_dpu_plan_t *")
    c_plans = _ffi.new("pim_dpu_sample_plan_t[]", max(n, 1))
    work = np.zeros(max(n, 1), dtype=np.uint64)
    rows = np.zeros(max(int(out_h.sum()), 1), dtype=np.uint64)
    first = np.zeros(nr_dpus + 1, dtype=np.uint32)
    edges = np.zeros(nr_dpus * (nr_tasklets + 1), dtype=np.uint32)
    plan.samples = c_plans
    plan.work = _ffi.cast("uint64_t *", _ffi.from_buffer(work))
    plan.row_work = _ffi.cast("uint64_t *", _ffi.from_buffer(rows))
    plan.first = _ffi.cast("uint32_t *", _ffi.from_buffer(first))
    plan.bands = _ffi.cast("uint32_t *", _ffi.from_buffer(edges))
    err = _ffi.new("char[]", 1024)
    rc = _lib.pim_dpu_plan(_ffi.cast("pim_sample_t *", _ffi.from_buffer(samples)), n, tab, tables.nbytes,
                           nr_dpus, nr_tasklets, arena_bytes, plan, err, len(err))
    if rc != 0:
        raise ValueError(f"the DPU driver would refuse this batch: {_ffi.string(err).decode()}")
    starts = np.concatenate([[0], np.cumsum(out_h)])
    T = nr_tasklets
    return DriverPlan(
        [SamplePlan._of(c_plans[i]) for i in range(n)],
        [rows[starts[i]:starts[i + 1]].astype(np.int64) for i in range(n)],
        [range(int(first[d]), int(first[d + 1])) for d in range(plan.active)],
        [[range(int(edges[d * (T + 1) + t]), int(edges[d * (T + 1) + t + 1])) for t in range(T)]
         for d in range(plan.active)])


@dataclass
class KernelWork:
    """The work of one DPU: per tasklet, the counters of WORK ([nr_tasklets, len(WORK)])."""
    per_tasklet: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.per_tasklet.sum(axis=0)


def dpu_work(works: Sequence[SampleWork], nr_tasklets: int, row_segments: int,
             tasklet_bands: Optional[Sequence[range]] = None) -> KernelWork:
    """Work of one DPU running `works` (its samples in chunk order) with nr_tasklets, cut into
    `tasklet_bands` (default: even bands of rows).

    row_segments: (output row, segment) pairs the DPU computed, from the emulator's counters
    (the segment width is the driver's choice); the `row` work is spread over the tasklets in
    proportion to their rows."""
    col = {name: i for i, name in enumerate(WORK)}
    per = np.zeros((nr_tasklets, len(WORK)), dtype=np.float64)
    starts = np.cumsum([0] + [w.out_h for w in works])
    total_rows = int(starts[-1])
    cut = list(tasklet_bands) if tasklet_bands is not None else bands(total_rows, nr_tasklets)
    for t, band in enumerate(cut):
        if not len(band):
            continue
        for i, w in enumerate(works):
            lo, hi = max(band.start, starts[i]), min(band.stop, starts[i + 1])
            if lo >= hi:
                continue
            per[t] += w.ops[lo - starts[i]:hi - starts[i]].sum(axis=0)
            if w.band_start is not None:  # the band's first row of this sample fills the ring
                per[t] += w.band_start[lo - starts[i]]
            per[t, col["column"]] += w.out_w
        # phase 2 loads every sample up to the last one the band touches; phase 1 one in T
        last = int(np.searchsorted(starts, band.stop - 1, side="right"))
        per[t, col["sample_load"]] += last
    for t in range(nr_tasklets):
        per[t, col["sample_load"]] += len(range(t, len(works), nr_tasklets))
    rows_per_tasklet = np.array([len(b) for b in cut], dtype=np.float64)
    if total_rows:
        per[:, col["row"]] = row_segments * rows_per_tasklet / total_rows
    return KernelWork(per)


# ---- a measured run -------------------------------------------------------------------------


__all__ = ["AXIS_HEADER_BYTES", "DriverPlan", "HEADER_BYTES", "KernelWork", "RANGE_BYTES",
           "STATUS_BYTES", "SamplePlan", "SampleWork", "WORK", "arena_bytes", "bands", "cut_bands",
           "dpu_work", "driver_plan", "plan_sample", "read_axis", "row_work", "sample_work",
           "split_by_pixels", "split_samples"]
