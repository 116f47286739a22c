"""A projection of what the DPU kernel would cost on real UPMEM systems (the design's "perf model").

No DPU hardware is reachable from this project: every time and rate this module returns is a
PROJECTION from a cost model, never a measurement. What goes in:

1. what pimloader's libdpu emulator COUNTED for a real batch (`DpuRun.from_backend`): per DPU
   the MRAM<->WRAM DMA calls and bytes in each direction and the host<->DPU bytes, plus the
   common (padded) transfer lengths of `DpuDriver.run_info()`;
2. the work the kernel does, COUNTED from the batch's own axis tables (`sample_work`,
   `dpu_work`): taps per output of each resampled axis, rows and elements, walked the way
   dpu_src/crop_resize.c walks them (each source row resampled once per segment and tasklet band
   thanks to its WRAM ring), over the driver's split of the batch over DPUs (by estimated work)
   and of each DPU's rows into tasklet bands: the driver's own plan, read from its C code
   (`driver_plan`: pim_dpu_plan of csrc/dpu_plan.c, through `pimloader._dpu_emulated`; no copy
   of it here);
3. ASSUMED instruction counts per unit of that work (`Assumptions`, read off the kernel source
   and the DPU instruction set; each with its reasoning), and the published figures of real
   systems (/work/shared/docs/upmem-reference.md, "Figures of real systems": PrIM's
   measurements and UPMEM's documentation), each a `Param` with its source.

What comes out (`project`): the time of one launch on a system of N DPUs split into host->DPU
transfer, DPU compute, DPU DMA and DPU->host transfer; which of them bounds the launch; and the
images/s of the DPU path, for three cases (`CASES`): "best", "nominal" and "worst" take every
parameter at its optimistic, most likely and pessimistic value, so the spread is the
sensitivity of the projection to what is not known.

The model, in formulas (per DPU d of the measured run; c = the case's parameter values):

    instructions_d = work_d . cost_c                  (dot product over the work counters)
    compute_d      = max(instructions_d, depth * max_t instructions_{d,t})   [cycles]
                     (one instruction per cycle per DPU at best; a tasklet issues at most one
                     instruction every `depth` = 11 cycles, so few or unbalanced tasklets
                     cannot fill the pipeline)
    dma_d          = (1 - hidden) * (77 * read_calls_d + 61 * write_calls_d)
                     + 0.5 * (read_bytes_d + write_bytes_d)                   [cycles]
                     (one DMA engine per DPU; hidden = the share of the fixed latency that
                     other tasklets' DMAs would hide: 0 matches PrIM's sustained bandwidth)
    dpu_d          = max(compute_d, dma_d) if overlap_dma_compute else compute_d + dma_d
    t_dpu          = max_d dpu_d / clock              (the slowest DPU ends the launch)
    t_in           = N * xfer_len / (bw_in  * ranks_eff),  xfer_len = bytes per DPU pushed
    t_out          = N * out_len  / (bw_out * ranks_eff),  out_len  = common gather length
                     ranks_eff = 1 + scaling * (ranks - 1)   (scaling 1: ranks in parallel)
    t_launch       = t_in + t_dpu + t_out             (push, launch, gather: the driver today)
                   = max(t_in + t_out, t_dpu)         (case "best", >= 2 ranks: transfers of one
                                                       group of ranks while another runs)
    images/s       = images_per_launch / t_launch,  images_per_launch = images_per_DPU * N

The measured run is scaled out by weak scaling: a system of N DPUs is taken to run N / D copies
of the measured D-DPU launch at once (the same images per DPU), which holds for this kernel
because DPUs never talk to each other.

The host keeps decoding the JPEGs (nothing here moves decode to DPUs); `end_to_end` takes the
host's MEASURED decode time per image and reports min(host rate, DPU path rate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Optional, Sequence

import numpy as np

from pimloader import _dpu_emulated

_ffi, _lib = _dpu_emulated.ffi, _dpu_emulated.lib

CASES = ("best", "nominal", "worst")

# sources of the figures
PRIM = "measured by PrIM (Gomez-Luna et al. 2021/2022), upmem-reference.md"
UPMEM_DOCS = "UPMEM docs, upmem-reference.md"
KERNEL = "assumed: counted by reading dpu_src/crop_resize.c and include/pim_resample.h"
ASSUMED = "assumed"

# sizes of the structs of include/pim_params.h and include/pim_dpu_layout.h, from the C build
AXIS_HEADER_BYTES = _ffi.sizeof("pim_axis_t")
RANGE_BYTES = _ffi.sizeof("pim_range_t")
HEADER_BYTES = _ffi.sizeof("pim_dpu_header_t")  # pushed to every DPU
STATUS_BYTES = _ffi.sizeof("pim_dpu_status_t")  # written by tasklet 0 at the end


@dataclass(frozen=True)
class Param:
    """One named figure of the model: its best / nominal / worst value, unit, source, reason."""
    best: float
    nominal: float
    worst: float
    unit: str
    source: str
    why: str

    def at(self, case: str) -> float:
        if case not in CASES:
            raise ValueError(f"case must be one of {CASES}, got {case!r}")
        return float(getattr(self, case))


def _fixed(value: float, unit: str, source: str, why: str) -> Param:
    return Param(value, value, value, unit, source, why)


# The work counters of the kernel (one column of `KernelWork.per_tasklet` each) and the
# instruction-cost parameter of `Assumptions` that prices each of them.
WORK = ("h_mac", "h_out", "v_mac", "v_init", "v_finish", "emit", "row", "column", "sample_load")


@dataclass(frozen=True)
class Assumptions:
    """Every figure the projection uses. Change one with dataclasses.replace."""

    # -- DMA between MRAM and WRAM (per DPU) --
    dma_read_latency: Param = _fixed(77, "cycles/call", PRIM, "MRAM->WRAM fixed cost per mram_read")
    dma_write_latency: Param = _fixed(61, "cycles/call", PRIM, "WRAM->MRAM fixed cost per mram_write")
    dma_cycles_per_byte: Param = _fixed(0.5, "cycles/byte", PRIM, "at most ~2 B/cycle per DPU")
    dma_latency_hidden: Param = Param(
        1.0, 0.0, 0.0, "fraction", ASSUMED,
        "share of the fixed DMA latency hidden by other tasklets' DMAs on the DPU's one DMA engine. "
        "0 (every call costs 77|61 + n/2 in turn) matches PrIM's sustained ~630 MB/s for 2 KB "
        "transfers with many tasklets; 1 (only the bytes serialise) is an optimistic bound")
    # -- the pipeline --
    pipeline_depth: Param = _fixed(
        11, "tasklets", UPMEM_DOCS,
        "a tasklet issues at most one instruction every 11 cycles; >= 11 busy tasklets fill the "
        "pipeline at one instruction per cycle per DPU")
    overlap_dma_compute: Param = Param(
        1, 1, 0, "0/1", ASSUMED,
        "1: while one tasklet waits on its DMA the others compute, so a DPU takes max(compute, "
        "DMA); 0: no overlap at all (compute + DMA), a pessimistic bound")
    # -- host <-> DPU transfers --
    host_to_dpu_rank_bw: Param = _fixed(6.7e9, "B/s per rank", PRIM,
                                        "parallel dpu_push_xfer to the 64 DPUs of a rank")
    dpu_to_host_rank_bw: Param = _fixed(4.7e9, "B/s per rank", PRIM,
                                        "parallel dpu_push_xfer(FROM_DPU) from a rank")
    rank_scaling: Param = Param(
        1.0, 1.0, 0.0, "fraction", ASSUMED,
        "how transfer bandwidth grows with ranks: 1 = every rank moves its data at the per-rank "
        "figure at once (ranks sit on separate DIMMs/channels); 0 = the whole system shares one "
        "rank's bandwidth (host-side bottleneck). Not measured on more than one rank here")
    overlap_transfers: Param = Param(
        1, 0, 0, "0/1", ASSUMED,
        "1: the next launch's push and the last one's gather run while other ranks compute "
        "(needs >= 2 ranks: the host reaches a DPU's MRAM only while that DPU is stopped); "
        "0: push -> launch -> gather in turn, what csrc/dpu_driver.c does today")
    # -- instructions per unit of work (see KernelWork for what each unit is) --
    h_mac: Param = Param(
        5, 6, 20, "instr/(tap x channel)", KERNEL,
        "pim_hpass_row_c3 inner loop per tap: 1 weight load + per channel [1 pixel load, w*px as "
        "two 8x8 multiplies (mul_sh_ul, mul_ul_ul) + lsl_add, 1 add] + 2 loop = 18 per tap of 3 "
        "channels; best: unrolled; worst: the compiler misses the 8x8 pattern and emits mul_step "
        "chains (~8 steps per 8-bit operand)")
    h_out: Param = Param(
        6, 9, 14, "instr/(output x channel)", KERNEL,
        "pim_acc_to_u8 (sign test, shift, clamp, store) per channel + the range load, pointer "
        "and accumulator set-up per output pixel shared by its channels")
    v_mac: Param = Param(
        7, 9, 23, "instr/element", KERNEL,
        "pim_vpass_mac per element: load acc, load pixel, 2 x 8x8 multiply + lsl_add, add, store "
        "acc, loop; worst: mul_step chains as for h_mac")
    v_init: Param = Param(1, 2, 3, "instr/element", KERNEL, "pim_vpass_init: a store and the loop")
    v_finish: Param = Param(5, 7, 9, "instr/element", KERNEL,
                            "pim_vpass_finish: load, sign test, shift, clamp, store, loop")
    emit: Param = Param(
        5, 8, 12, "instr/element", KERNEL,
        "pim_emit_row per output element: load u8, table index (c*256 + v, shifted by the "
        "element size), table load, store at the (flipped) index, loop")
    row: Param = Param(
        25, 40, 80, "instr/(row x segment)", KERNEL,
        "run_rows per output row and segment: y-table reads set-up, checks, flip index, "
        "write addresses, read_big/write_big bookkeeping beyond the per-call cost")
    column: Param = Param(6, 10, 15, "instr/(column x band)", KERNEL,
                          "run_rows' per-segment check of the x windows, per output column, "
                          "once per tasklet band that touches the sample")
    sample_load: Param = Param(
        100, 150, 400, "instr/load", KERNEL,
        "load_sample: 4 DMAs and ~40 field checks, several on 64-bit values (software "
        "routines on the 32-bit DPU); every tasklet loads each sample up to its band")
    dma_call: Param = Param(5, 10, 20, "instr/call", KERNEL,
                            "read_big/write_big loop and the mram_read/mram_write call itself")

    def table(self) -> list[dict]:
        """Every parameter as a dict (name, best, nominal, worst, unit, source, why)."""
        return [{"name": f.name, **{k: getattr(getattr(self, f.name), k) for k in
                                    ("best", "nominal", "worst", "unit", "source", "why")}}
                for f in fields(self)]


@dataclass(frozen=True)
class System:
    """A UPMEM system: DPU count, clock, DPUs per rank."""
    name: str
    nr_dpus: int
    clock_hz: float
    dpus_per_rank: int = 64
    source: str = UPMEM_DOCS

    @property
    def ranks(self) -> int:
        return max(1, math.ceil(self.nr_dpus / self.dpus_per_rank))


SYSTEMS = (
    System("1 rank", 64, 350e6, source="64 DPUs per rank (8 chips x 8), 350 MHz: " + UPMEM_DOCS),
    System("640 DPUs", 640, 267e6, source="the older 640-DPU PrIM system at 267 MHz: " + PRIM),
    System("2,560 DPUs", 2560, 350e6, source="20 DIMMs, 2,560 DPUs at 350 MHz (2,556 usable): " + PRIM),
)


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
class Plan:
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
    def _of(cls, c) -> "Plan":
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


def plan_sample(sample, tables: np.ndarray, arena_bytes: int, nr_tasklets: int = 16) -> Optional[Plan]:
    """The driver's plan of one pim_sample_t (pim_dpu_plan_sample; None: refused)."""
    (ptr, keep), (tab, tables) = _sample_ptr(sample), _tables_ptr(tables)
    c = _ffi.new("pim_dpu_sample_plan_t *")
    err = _ffi.new("char[]", 512)
    ok = _lib.pim_dpu_plan_sample(ptr, tab, tables.nbytes, arena_bytes, nr_tasklets, c, err, len(err))
    return Plan._of(c) if ok else None


def row_work(sample, tables: np.ndarray, plan: Plan) -> np.ndarray:
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
    """The driver's whole plan of a batch (pim_dpu_plan): per sample its Plan and its rows'
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
        [Plan._of(c_plans[i]) for i in range(n)],
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

@dataclass
class DpuRun:
    """What one emulated launch did: per-DPU counters, transfer lengths, the kernel's work."""
    nr_dpus: int
    nr_tasklets: int
    n_images: int
    active_dpus: int
    xfer_bytes: int                 # common host->DPU length per active DPU (padded)
    out_xfer_bytes: int             # common DPU->host length per active DPU (padded)
    in_real_bytes: int              # sum of the chunks' real lengths
    out_real_bytes: int
    read_calls: np.ndarray          # [nr_dpus] emulator counters
    read_bytes: np.ndarray
    write_calls: np.ndarray
    write_bytes: np.ndarray
    host_to_dpu_bytes: np.ndarray
    dpu_to_host_bytes: np.ndarray
    dma_cycles_model: np.ndarray    # the emulator's own 77|61 + n/2 sum, a cross-check
    work: list                      # [active_dpus] KernelWork
    least_in_bytes: int             # every input byte the outputs depend on, read once
    least_out_bytes: int            # every output byte, written once
    images_per_dpu: list = field(default_factory=list)

    @classmethod
    def from_backend(cls, backend, packed, counters: Optional[list] = None,
                     info: Optional[dict] = None) -> "DpuRun":
        """Read `backend`'s counters (reset before the one run they must cover) and run_info of
        its last run of the batch whose descriptors and tables are `packed` (pack_batch). The
        split over DPUs and tasklets and each sample's plan (segment width, ring) are the
        driver's own, read from its C code (`driver_plan`)."""
        counters = counters if counters is not None else [backend.counters(d)
                                                          for d in range(backend.nr_dpus)]
        info = info if info is not None else backend.run_info()
        samples, tables = packed.samples, packed.tables
        plan = driver_plan(samples, tables, backend.nr_dpus, backend.nr_tasklets, info["arena_bytes"])
        works = [sample_work(s, tables, ring=p.ring_rows > 0) for s, p in zip(samples, plan.plans)]
        runs = plan.runs
        C = works[0].channels
        nhwc = bool(int(samples[0]["flags"]) & 4)
        dpu_work_list = []
        for d, run in enumerate(runs):
            # one write per (row, segment[, plane]) + the status block (each <= 2048 bytes here)
            per_segment = 1 if nhwc else C
            segs = (counters[d].mram_write_calls - 1) // per_segment
            dpu_work_list.append(dpu_work([works[i] for i in run], backend.nr_tasklets, segs, plan.bands[d]))
        arr = lambda name: np.array([getattr(c, name) for c in counters], dtype=np.int64)  # noqa: E731
        return cls(backend.nr_dpus, backend.nr_tasklets, len(samples), info["active_dpus"],
                   info["xfer_bytes"], info["out_xfer_bytes"], info["in_real_bytes"],
                   info["out_real_bytes"], arr("mram_read_calls"), arr("mram_read_bytes"),
                   arr("mram_write_calls"), arr("mram_write_bytes"), arr("host_to_dpu_bytes"),
                   arr("dpu_to_host_bytes"), arr("dma_cycles_model"), dpu_work_list,
                   sum(w.least_in_bytes for w in works), sum(w.out_bytes for w in works),
                   [len(r) for r in runs])

    # per-image figures (what the tables print)
    def per_image(self) -> dict:
        n = self.n_images
        reads, writes = int(self.read_bytes.sum()), int(self.write_bytes.sum())
        least = self.least_in_bytes + self.least_out_bytes
        return {
            "mram_read_bytes": reads / n, "mram_write_bytes": writes / n,
            "least_in_bytes": self.least_in_bytes / n, "least_out_bytes": self.least_out_bytes / n,
            "dma_ratio": (reads + writes) / least,
            "host_to_dpu_bytes": int(self.host_to_dpu_bytes.sum()) / n,
            "dpu_to_host_bytes": int(self.dpu_to_host_bytes.sum()) / n,
            "transfer_ratio": (int(self.host_to_dpu_bytes.sum()) + int(self.dpu_to_host_bytes.sum())) / least,
        }


def balanced(run: DpuRun) -> DpuRun:
    """What-if: the same batch with its work and DMAs spread evenly over the active DPUs and
    their tasklets: the bound of any split (the driver's is contiguous, by an estimate of work,
    and cannot cut a sample between DPUs)."""
    active = run.active_dpus
    mean = lambda v: np.full(len(v), float(np.sum(v)) / active)  # noqa: E731
    total = sum(w.total for w in run.work)
    even = np.tile(total / (active * run.nr_tasklets), (run.nr_tasklets, 1))
    return replace(run, read_calls=mean(run.read_calls), read_bytes=mean(run.read_bytes),
                   write_calls=mean(run.write_calls), write_bytes=mean(run.write_bytes),
                   work=[KernelWork(even.copy()) for _ in range(active)])


# ---- the projection --------------------------------------------------------------------------

def dma_cycles(read_calls, read_bytes, write_calls, write_bytes, a: Assumptions, case: str):
    """Cycles of a DPU's DMA engine (per DPU, arrays welcome)."""
    hidden = a.dma_latency_hidden.at(case)
    latency = a.dma_read_latency.at(case) * np.asarray(read_calls) + \
        a.dma_write_latency.at(case) * np.asarray(write_calls)
    return (1.0 - hidden) * latency + a.dma_cycles_per_byte.at(case) * (
        np.asarray(read_bytes) + np.asarray(write_bytes))


def instruction_costs(a: Assumptions, case: str) -> np.ndarray:
    return np.array([getattr(a, name).at(case) for name in WORK])


def compute_cycles(work: KernelWork, dma_calls: float, a: Assumptions, case: str) -> tuple[float, float]:
    """(cycles, instructions) of one DPU: max(total, depth x the busiest tasklet)."""
    per = work.per_tasklet @ instruction_costs(a, case)
    if per.sum() > 0:  # the DMA calls' instructions, spread like the rest of the work
        per = per * (1.0 + a.dma_call.at(case) * dma_calls / per.sum())
    total = float(per.sum())
    return max(total, a.pipeline_depth.at(case) * float(per.max(initial=0.0))), total


@dataclass
class Projection:
    """PROJECTED time of one launch on `system` (seconds) and the images/s it gives."""
    system: str
    case: str
    nr_dpus: int
    clock_hz: float
    images_per_launch: float
    t_in: float
    t_compute: float
    t_dma: float
    t_dpu: float
    t_out: float
    t_launch: float
    images_per_s: float
    bound: str
    instructions_per_image: float
    dpu_imbalance: float       # slowest DPU / mean DPU time
    tasklet_imbalance: float   # the slowest DPU's compute cycles / its instructions (1: pipeline full)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def project(run: DpuRun, system: System, a: Assumptions = Assumptions(), case: str = "nominal") -> Projection:
    """Project the measured launch onto `system` (weak scaling: same images per DPU)."""
    clock = system.clock_hz
    dmas = dma_cycles(run.read_calls, run.read_bytes, run.write_calls, run.write_bytes, a, case)
    per_dpu, comp, instrs = [], [], []
    for d, work in enumerate(run.work):
        cycles, n_instr = compute_cycles(work, float(run.read_calls[d] + run.write_calls[d]), a, case)
        instrs.append(n_instr)
        comp.append(cycles)
        if a.overlap_dma_compute.at(case):
            per_dpu.append(max(cycles, float(dmas[d])))
        else:
            per_dpu.append(cycles + float(dmas[d]))
    slowest = int(np.argmax(per_dpu))
    t_dpu = per_dpu[slowest] / clock
    t_compute, t_dma = comp[slowest] / clock, float(dmas[slowest]) / clock
    ranks_eff = 1.0 + a.rank_scaling.at(case) * (system.ranks - 1)
    # per DPU: the 72-byte header push + the chunk push, together the common length xfer_bytes
    t_in = system.nr_dpus * run.xfer_bytes / (a.host_to_dpu_rank_bw.at(case) * ranks_eff)
    t_out = system.nr_dpus * run.out_xfer_bytes / (a.dpu_to_host_rank_bw.at(case) * ranks_eff)
    if a.overlap_transfers.at(case) and system.ranks >= 2:
        t_launch = max(t_in + t_out, t_dpu)
    else:
        t_launch = t_in + t_dpu + t_out
    images = run.n_images / run.active_dpus * system.nr_dpus
    stages = {"host->DPU transfer": t_in, "DPU compute": t_compute, "DPU DMA": t_dma,
              "DPU->host transfer": t_out}
    bound = max(stages, key=stages.get)
    mean_dpu = float(np.mean(per_dpu))
    dpu_imbalance = per_dpu[slowest] / mean_dpu if mean_dpu > 0 else 1.0
    tasklet_imbalance = comp[slowest] / instrs[slowest] if instrs[slowest] > 0 else 1.0
    rate = images / t_launch if t_launch > 0 else math.inf
    return Projection(system.name, case, system.nr_dpus, clock, images, t_in, t_compute, t_dma,
                      t_dpu, t_out, t_launch, rate, bound, sum(instrs) / run.n_images,
                      dpu_imbalance, tasklet_imbalance)


def project_all(run: DpuRun, systems: Sequence[System] = SYSTEMS,
                a: Assumptions = Assumptions()) -> list[Projection]:
    return [project(run, s, a, c) for s in systems for c in CASES]


def end_to_end(dpu_images_per_s: float, host_s_per_image: float, host_cores: int) -> dict:
    """min(host rate, DPU path rate): the host decodes (and packs) on `host_cores` cores at the
    measured `host_s_per_image` each (linear scaling across cores: assumed)."""
    host = host_cores / host_s_per_image
    return {"host_images_per_s": host, "dpu_images_per_s": dpu_images_per_s,
            "images_per_s": min(host, dpu_images_per_s),
            "bound": "host decode" if host < dpu_images_per_s else "DPU path"}


__all__ = ["Assumptions", "CASES", "DpuRun", "DriverPlan", "KernelWork", "Param", "Plan", "Projection", "SYSTEMS",
           "SampleWork", "System", "WORK", "arena_bytes", "balanced", "bands", "compute_cycles", "cut_bands", "dma_cycles",
           "driver_plan", "dpu_work", "end_to_end", "plan_sample", "project", "project_all", "read_axis", "row_work",
           "sample_work", "split_by_pixels", "split_samples"]
