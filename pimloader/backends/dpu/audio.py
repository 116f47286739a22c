"""Log-mel features on DPUs: the host side of dpu_src/audio_features.c, on pimloader's libdpu
emulator.

`DpuMelFeatures(spec, nr_dpus, nr_tasklets)` builds the kernel (a second kernel binary, by
the emulator's `compile_kernel`), allocates the DPUs and loads it, and broadcasts what every
DPU shares: the arguments (`DPU_AUDIO_ARGS`, a `__host` variable) and the tables
(`audio_tables.DpuMelTables`) at the MRAM heap's start. A batch of clips is spread over the
DPUs in contiguous runs of about equal frame counts; each DPU's chunk (header, descriptors,
PCM; include/pim_audio_dpu.h) goes out with dpu_prepare_xfer + one dpu_push_xfer, the
kernel runs, and one dpu_push_xfer(FROM_DPU) gathers every DPU's status and dB rows. Only
libdpu calls are used (dpu_alloc, dpu_load, dpu_broadcast_to, dpu_prepare_xfer,
dpu_push_xfer, dpu_launch, dpu_copy_from for the test build's counts, dpu_free), through
`emulator.DpuSet`; a fault is pinned on its DPU by the emulator's fault message.

Errors name the DPU and the clip (its index in the batch): kernel-detected ones as
`DpuKernelError`, faults as `DpuFaultError`, bad arguments as `ValueError` before any DPU
work. Emulated speed is not DPU speed.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from pimloader._native_sources import native_source_root
from pimloader.errors import DpuFaultError, DpuKernelError
from pimloader.options import NR_TASKLETS
from . import emulator
from .audio_tables import MAX_MASKS, Q16, DpuMelSpec, DpuMelTables, pack_masks, quantize_waveforms

_REPO = native_source_root()
KERNEL_SOURCE = os.path.join(_REPO, "dpu_src", "audio_features.c")
KERNEL_INCLUDES = (os.path.join(_REPO, "include"),)

MAGIC, VERSION, STATUS_OK = 0x50494D41, 1, 0x600D600D
FLAG_REFLECT = 1
WRAM_BYTES, WRAM_RESERVE, CACHE_BYTES = 65536, 2048, 256
DEFAULT_STACK_BYTES = 1024
MRAM_BUDGET = 63 << 20          # PIM_AUDIO_MRAM_BUDGET
MAX_LENGTH = 1 << 24            # PIM_AUDIO_MAX_LENGTH
DEBUG_HALT, DEBUG_BAD_DMA = 1, 2
ERRORS = {1: "inconsistent arguments or chunk header", 2: "kernel built for another NR_TASKLETS",
          3: "a table entry out of range", 4: "invalid clip descriptor"}
SAMPLE_CHECKS = {1: "PCM range", 2: "frame count / length", 3: "output range", 4: "gain"}

ARGS_DTYPE = np.dtype([
    ("magic", "<u4"), ("version", "<u4"), ("n_fft", "<u4"), ("hop", "<u4"), ("n_mels", "<u4"),
    ("n_freqs", "<u4"), ("pad", "<u4"), ("flags", "<u4"), ("n_stages", "<u4"), ("mel_q", "<u4"),
    ("radices", "u1", (16,)), ("log2_amin_q16", "<i4"), ("db_offset_q16", "<i4"), ("top_db_q16", "<i4"),
    ("mask_value_q16", "<i4"), ("tables_bytes", "<u4"), ("window_off", "<u4"), ("twiddle_off", "<u4"),
    ("bin_pos_off", "<u4"), ("mel_ranges_off", "<u4"), ("mel_weights_off", "<u4"), ("log2_off", "<u4"),
    ("n_weights", "<u4"), ("nr_tasklets", "<u4"), ("chunk_off", "<u4"), ("power_bits", "<u4"), ("reserved", "<u4")])
CHUNK_DTYPE = np.dtype([(name, "<u4") for name in (
    "magic", "batch_id", "n_samples", "samples_off", "in_bytes", "out_off", "out_bytes", "debug")])
SAMPLE_DTYPE = np.dtype([
    ("pcm_off", "<u4"), ("length", "<u4"), ("frames", "<u4"), ("gain", "<i4"), ("out_off", "<u4"),
    ("reserved", "<u4"), ("freq_masks", "<u2", (MAX_MASKS, 2)), ("time_masks", "<u2", (MAX_MASKS, 2))])
WORK_UNITS = ("sample", "scale", "peak", "bf2", "bf4", "odd_term", "mul_q15", "square", "power_bin", "mel_mac",
              "mel_value", "mask_value", "clamp_value", "frame")   # pim_audio_dpu.h's PIM_AUDIO_WORK_*
STATUS_DTYPE = np.dtype([(name, "<u4") for name in ("code", "batch_id", "sample", "detail")])


def round8(n: int) -> int:
    return (int(n) + 7) & ~7


def row_bytes(n_mels: int) -> int:
    return round8(4 * n_mels)


def tasklet_wram(spec: DpuMelSpec) -> int:
    """pim_audio_tasklet_bytes: frame buffer, PCM cache and one output row."""
    return round8(8 * (spec.n_fft // 2 + 1)) + CACHE_BYTES + row_bytes(spec.n_mels)


def pack_tables(tables: DpuMelTables) -> tuple:
    """The tables block (uint8, 8-byte aligned parts) and each part's offset."""
    parts = [("window_off", tables.window), ("twiddle_off", tables.twiddles), ("bin_pos_off", tables.bin_pos),
             ("mel_ranges_off", tables.mel_ranges), ("mel_weights_off", tables.mel_weights),
             ("log2_off", tables.log2_table)]
    blob, offsets = bytearray(), {}
    for name, array in parts:
        offsets[name] = len(blob)
        raw = np.ascontiguousarray(array).tobytes()
        blob += raw + bytes(round8(len(raw)) - len(raw))
    return np.frombuffer(bytes(blob), np.uint8), offsets


def make_args(tables: DpuMelTables, offsets: dict, tables_bytes: int, nr_tasklets: int,
              mask_value: float) -> np.ndarray:
    spec = tables.spec
    args = np.zeros(1, ARGS_DTYPE)
    a = args[0]
    a["magic"], a["version"], a["n_fft"], a["hop"] = MAGIC, VERSION, spec.n_fft, spec.hop_length
    a["n_mels"], a["n_freqs"], a["pad"] = spec.n_mels, spec.n_freqs, spec.pad
    a["flags"] = FLAG_REFLECT if spec.pad_mode == "reflect" else 0
    a["n_stages"], a["mel_q"] = len(tables.radices), tables.mel_q
    a["radices"][:len(tables.radices)] = tables.radices
    a["log2_amin_q16"], a["db_offset_q16"] = tables.log2_amin_q16, tables.db_offset_q16
    a["top_db_q16"], a["mask_value_q16"] = tables.top_db_q16, mask_q16(mask_value)
    a["tables_bytes"], a["n_weights"] = tables_bytes, len(tables.mel_weights)
    for name, offset in offsets.items():
        a[name] = offset
    a["nr_tasklets"], a["chunk_off"], a["power_bits"] = nr_tasklets, tables_bytes, tables.power_bits
    return args


def mask_q16(value: float) -> int:
    q = int(round(float(value) * Q16))
    if not -(1 << 31) <= q < (1 << 31):
        raise ValueError(f"DPU log-mel: mask_value={value} is outside the Q16 dB range")
    return q


def wram_shortfall(spec: DpuMelSpec, tables_bytes: int, nr_tasklets: int,
                   stack_bytes: int = DEFAULT_STACK_BYTES) -> str:
    """Why the kernel's WRAM does not hold `spec` at `nr_tasklets` ("" when it does)."""
    need = tables_bytes + nr_tasklets * tasklet_wram(spec)
    have = WRAM_BYTES - WRAM_RESERVE - nr_tasklets * stack_bytes
    if need <= have:
        return ""
    return (f"n_fft={spec.n_fft}, n_mels={spec.n_mels} need {need} B of WRAM ({tables_bytes} B of "
            f"tables + {nr_tasklets} tasklets x {tasklet_wram(spec)} B) but {have} B are left after "
            f"{nr_tasklets} stacks of {stack_bytes} B: use fewer tasklets")


def split_clips(frames: np.ndarray, nr_dpus: int) -> list:
    """Contiguous runs of clips, one per DPU, cut where the running frame count crosses
    d / nr_dpus of the total (a DPU may get none)."""
    total = np.cumsum(frames)
    cuts = np.searchsorted(total, total[-1] * np.arange(1, nr_dpus) / nr_dpus, side="right") if len(frames) else []
    edges = [0, *[int(c) for c in cuts], len(frames)]
    return [(edges[d], edges[d + 1]) for d in range(nr_dpus)]


class DpuMelFeatures:
    """Log-mel dB features of int16 clips on (emulated) DPUs:
    `with DpuMelFeatures(DpuMelSpec(n_mels=40, top_db=80), nr_dpus=4) as mel: feats = mel(waves)`."""

    def __init__(self, spec=None, *, nr_dpus: int = 4, nr_tasklets: int = NR_TASKLETS,
                 stack_bytes: int = DEFAULT_STACK_BYTES, profile: str = "", mask_value: Optional[float] = None,
                 count_work: bool = False) -> None:
        """`spec`: a DpuMelSpec, or a FeatureSpec (transforms/audio_spec.py; its mask_value is
        the default of `mask_value`)."""
        if spec is not None and not isinstance(spec, DpuMelSpec):
            mask_value = spec.mask_value if mask_value is None else mask_value
            spec = DpuMelSpec.from_feature_spec(spec)
        mask_value = 0.0 if mask_value is None else mask_value
        self.spec = spec or DpuMelSpec()
        if not 1 <= int(nr_tasklets) <= 24:
            raise ValueError(f"nr_tasklets must be 1..24, got {nr_tasklets}")
        self.nr_tasklets = int(nr_tasklets)
        self.tables = DpuMelTables.build(self.spec)
        self._tables_blob, offsets = pack_tables(self.tables)
        self._check_wram(int(stack_bytes))
        self._args = make_args(self.tables, offsets, len(self._tables_blob), self.nr_tasklets, mask_value)
        defines = {"STACK_SIZE_DEFAULT": int(stack_bytes)}
        if count_work:  # a test build that counts the cost model's units (work_counts())
            defines["PIM_AUDIO_COUNT_WORK"] = 1
        self.binary = emulator.compile_kernel(KERNEL_SOURCE, nr_tasklets=self.nr_tasklets,
                                              include_dirs=KERNEL_INCLUDES, defines=defines)
        self._dpus = emulator.DpuSet(int(nr_dpus), profile or "backend=emulator")
        self.nr_dpus = self._dpus.nr_dpus
        self._batch_id = 0
        self._needs_load = True
        self._names: Optional[list] = None

    def _check_wram(self, stack_bytes: int) -> None:
        shortfall = wram_shortfall(self.spec, len(self._tables_blob), self.nr_tasklets, stack_bytes)
        if shortfall:
            raise ValueError(f"DPU log-mel: {shortfall}")

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        dpus, self._dpus = getattr(self, "_dpus", None), None
        if dpus is not None:
            dpus.close()

    def __enter__(self) -> "DpuMelFeatures":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # a safety net only; call close()
        try:
            self.close()
        except Exception:
            pass

    def counters(self) -> emulator.Counters:
        """The emulator's DMA and transfer counts since the last batch started."""
        return self._live().counters()

    def work_counts(self) -> np.ndarray:
        """uint64 [nr_dpus, nr_tasklets, units] of the last launch (WORK_UNITS order), from a
        `count_work=True` build: what the cost model's counts are checked against."""
        dpus = self._live()
        size = self.nr_tasklets * len(WORK_UNITS) * 8
        return np.stack([dpus.copy_from("work_counts", size, index=d).view(np.uint64)
                         .reshape(self.nr_tasklets, len(WORK_UNITS)) for d in range(self.nr_dpus)])

    def _live(self) -> emulator.DpuSet:
        if self._dpus is None:
            raise RuntimeError("DpuMelFeatures is closed")
        return self._dpus

    # -- running -------------------------------------------------------------------------
    def __call__(self, waveforms, freq_masks=None, time_masks=None, out: Optional[np.ndarray] = None,
                 names: Optional[list] = None) -> np.ndarray:
        """Float waveforms [N, L] (full scale 1.0) -> float32 dB [N, n_mels, frames]; `names`
        (one per clip) are what errors call the clips (default "clip i")."""
        pcm, gains = quantize_waveforms(np.asarray(waveforms))
        rows = self.run_pcm(pcm, gains, freq_masks=freq_masks, time_masks=time_masks, names=names)
        frames = self.spec.frames(pcm.shape[1])
        if out is None:
            out = np.empty((len(pcm), self.spec.n_mels, frames), np.float32)
        elif out.shape != (len(pcm), self.spec.n_mels, frames) or out.dtype != np.float32:
            raise ValueError(f"out must be float32 {(len(pcm), self.spec.n_mels, frames)}, got {out.dtype} {out.shape}")
        for i, r in enumerate(rows):
            np.multiply(r.T, np.float32(1.0 / Q16), out=out[i], casting="unsafe")
        return out

    def run_pcm(self, pcm, gains=None, lengths=None, *, freq_masks=None, time_masks=None,
                debug: int = 0, debug_dpu: int = -1, names: Optional[list] = None) -> list:
        """int16 PCM [N, L] (clip i: pcm[i, :lengths[i]], the waveform x 2^(15 + gains[i])) ->
        each clip's int32 dB in Q16, [frames, n_mels]: what the kernel wrote, bit for bit.
        `debug`/`debug_dpu` are test hooks (DEBUG_HALT, DEBUG_BAD_DMA); `names` as for
        `__call__`."""
        pcm = np.asarray(pcm)
        self._names = list(names) if names is not None else None
        if pcm.ndim != 2 or pcm.dtype != np.int16:
            raise ValueError(f"DPU log-mel: pcm must be int16 [N, L], got {pcm.dtype} {pcm.shape}")
        n = len(pcm)
        gains = np.zeros(n, np.int32) if gains is None else np.asarray(gains, np.int32).reshape(n)
        lengths = np.full(n, pcm.shape[1]) if lengths is None else np.asarray(lengths, np.int64).reshape(n)
        for i in range(n):
            if not 0 <= lengths[i] <= min(pcm.shape[1], MAX_LENGTH):
                raise ValueError(f"DPU log-mel: sample {i}: length {lengths[i]} outside 0..{pcm.shape[1]}"
                                 + (f" (the kernel takes at most {MAX_LENGTH} samples)" if lengths[i] > MAX_LENGTH else ""))
            if not -16 <= gains[i] <= 15:
                raise ValueError(f"DPU log-mel: sample {i}: gain {gains[i]} outside -16..15")
            self.spec.check_length(int(lengths[i]), i)
        if n == 0:
            return []
        frames = np.array([self.spec.frames(int(x)) for x in lengths], np.int64)
        masks = (pack_masks(freq_masks, n, "freq_masks"), pack_masks(time_masks, n, "time_masks"))
        runs = split_clips(frames, self.nr_dpus)
        chunks, layout = self._pack(pcm, gains, lengths, frames, masks, runs, debug, debug_dpu)
        gathered = self._launch(chunks, layout, runs)
        return self._unpack(gathered, layout, runs, frames)

    def _pack(self, pcm, gains, lengths, frames, masks, runs, debug, debug_dpu) -> tuple:
        self._batch_id = (self._batch_id + 1) & 0xFFFFFFFF
        row = row_bytes(self.spec.n_mels)
        in_bytes = [round8(CHUNK_DTYPE.itemsize + SAMPLE_DTYPE.itemsize * (b - a))
                    + sum(round8(2 * int(lengths[i])) for i in range(a, b)) for a, b in runs]
        out_off = round8(max(in_bytes))
        out_bytes = [STATUS_DTYPE.itemsize + row * int(frames[a:b].sum()) for a, b in runs]
        out_len = round8(max(out_bytes))
        if len(self._tables_blob) + out_off + out_len > MRAM_BUDGET:
            raise ValueError(f"DPU log-mel: {len(pcm)} clips need {out_off + out_len} B of MRAM per DPU on "
                             f"{self.nr_dpus} DPUs: use more DPUs or smaller batches")
        chunks = []
        for d, (a, b) in enumerate(runs):
            buf = np.zeros(out_off, np.uint8)
            desc = np.zeros(b - a, SAMPLE_DTYPE)
            at = round8(CHUNK_DTYPE.itemsize + SAMPLE_DTYPE.itemsize * (b - a))
            out_at = out_off + STATUS_DTYPE.itemsize
            for k, i in enumerate(range(a, b)):
                length = int(lengths[i])
                buf[at:at + 2 * length] = pcm[i, :length].view(np.uint8)
                desc[k] = (at, length, frames[i], gains[i], out_at, 0, masks[0][i], masks[1][i])
                at += round8(2 * length)
                out_at += row * int(frames[i])
            head = np.array([(MAGIC, self._batch_id, b - a, CHUNK_DTYPE.itemsize, in_bytes[d], out_off,
                              out_bytes[d], debug if debug_dpu in (-1, d) else 0)], CHUNK_DTYPE)
            buf[:CHUNK_DTYPE.itemsize] = head.view(np.uint8)
            buf[CHUNK_DTYPE.itemsize:CHUNK_DTYPE.itemsize + desc.nbytes] = desc.view(np.uint8)
            chunks.append(buf)
        return chunks, (out_off, out_len)

    def _launch(self, chunks: list, layout: tuple, runs: list) -> np.ndarray:
        dpus = self._live()
        chunk_off = len(self._tables_blob)
        if self._needs_load:  # first use, or after a fault: WRAM (barriers, mutexes) as it stopped
            dpus.load(self.binary)
            dpus.broadcast("DPU_AUDIO_ARGS", self._args.view(np.uint8))
            dpus.broadcast(emulator.HEAP_POINTER_NAME, self._tables_blob)
            self._needs_load = False
        dpus.reset_counters()
        dpus.push(emulator.HEAP_POINTER_NAME, chunks, offset=chunk_off)
        try:
            dpus.launch()
        except emulator.DpuError as error:
            self._needs_load = True
            raise self._fault(error, runs) from error
        return dpus.gather(emulator.HEAP_POINTER_NAME, layout[1], offset=chunk_off + layout[0])

    def _fault(self, error: emulator.DpuError, runs: list) -> Exception:
        for d, (a, b) in enumerate(runs):
            detail = self._dpus.fault_message(d)
            if detail:
                return DpuFaultError(f"DPU log-mel: DPU {d} ({self._clips(a, b)}) faulted in dpu_launch: {detail}",
                                     error.code, d)
        return DpuFaultError(f"DPU log-mel: dpu_launch failed: {error}", error.code, None)

    def _unpack(self, gathered: np.ndarray, layout: tuple, runs: list, frames: np.ndarray) -> list:
        row = row_bytes(self.spec.n_mels)
        out = []
        for d, (a, b) in enumerate(runs):
            status = gathered[d, :STATUS_DTYPE.itemsize].view(STATUS_DTYPE)[0]
            if status["code"] != STATUS_OK or status["batch_id"] != self._batch_id:
                raise self._kernel_error(d, a, b, status)
            at = STATUS_DTYPE.itemsize
            for i in range(a, b):
                size = row * int(frames[i])
                rows = gathered[d, at:at + size].view(np.int32).reshape(int(frames[i]), row // 4)
                out.append(rows[:, :self.spec.n_mels].copy())
                at += size
        return out

    def _kernel_error(self, d: int, a: int, b: int, status) -> DpuKernelError:
        code = int(status["code"])
        if status["batch_id"] != self._batch_id and code == STATUS_OK:
            return DpuKernelError(f"DPU log-mel: DPU {d} returned batch {status['batch_id']}, not {self._batch_id}",
                                  code, d)
        what = ERRORS.get(code, f"status 0x{code:x}")
        if code == 4:
            clip = self._clip(a + int(status["sample"]))
            what = f"{clip}: {what} ({SAMPLE_CHECKS.get(int(status['detail']), status['detail'])})"
        return DpuKernelError(f"DPU log-mel: DPU {d} ({self._clips(a, b)}) refused its chunk: {what}", code, d)

    def _clip(self, index: int) -> str:
        return self._names[index] if self._names is not None else f"clip {index}"

    def _clips(self, a: int, b: int) -> str:
        """The clips a..b-1 of the batch, as errors name them."""
        if self._names is None:
            return f"clips {a}..{b - 1}"
        return ", ".join(self._names[a:b]) or "no clip"


__all__ = ["DpuMelFeatures", "DpuMelSpec", "split_clips"]
