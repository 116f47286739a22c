"""Instructions of the DPU kernels COUNTED on a proxy ISA, instead of assumed.

No DPU is reachable and UPMEM's simulator is not available here, so the kernels (dpu_src/)
are compiled, unchanged, for a 32-bit integer ISA that Debian's packages carry: RV32IM
(`gcc-riscv64-unknown-elf`), and RV32EM (16 registers) to bracket the DPU's 24. Each
tasklet is a hart of csrc/proxy/rv32sim.c, an instruction-counting simulator; the DPU
runtime (mram_read/write, barriers, mutexes, mem_alloc) is csrc/proxy/proxy_rt.c, which
checks the DMA rules as the emulator does. A launch is replayed from the MRAM the emulator
traced (DPUEMU_TRACE_DIR), with what the host had written into the kernel's WRAM symbols
(its `__host` arguments) written into the proxy build's same symbols, and its MRAM
afterwards must equal the emulator's byte for byte, so the counts are those of a run that
computed the right output.

What is counted per tasklet: every instruction executed in the kernel's own functions
(libgcc's helpers included: they are software on a DPU too), plus one per MRAM transfer
(the DPU's ldma/sdma); the runtime's own instructions (the copy loop standing in for the
DMA engine, barrier and mutex waits) are left out. See docs/cost_model.md for how the
proxy differs from the DPU ISA and how those differences are bracketed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from .._native_sources import native_source_root
from ..backends.dpu.toolchain import build_atomically, cache_folder, content_key, define_flags

CROSS_COMPILER = "riscv64-unknown-elf-gcc"
ISAS = {"rv32im": ("-march=rv32im", "-mabi=ilp32"),   # 32 registers
        "rv32em": ("-march=rv32em", "-mabi=ilp32e")}  # 16 registers
RUNTIME_PREFIXES = ("proxy_", "memcpy", "memset", "_start")
DMA_FUNCTIONS = ("proxy_ldma", "proxy_sdma")


class ProxyUnavailable(RuntimeError):
    """The cross compiler for the proxy ISA is not installed."""


class ProxyMismatch(RuntimeError):
    """A replayed launch left MRAM different from the emulator's: its counts are not used."""


def _root() -> Path:
    return Path(native_source_root())


def find_cross_compiler() -> Optional[str]:
    return shutil.which(CROSS_COMPILER)


def require_cross_compiler() -> str:
    found = find_cross_compiler()
    if found is None:
        raise ProxyUnavailable(
            f"counting instructions needs {CROSS_COMPILER} (Debian: apt-get install "
            f"gcc-riscv64-unknown-elf); `make bench` installs it where it can")
    return found


def build_simulator() -> str:
    """csrc/proxy/rv32sim.c built with the host's C compiler (cached)."""
    source = _root() / "csrc" / "proxy" / "rv32sim.c"
    cc = os.environ.get("CC") or shutil.which("gcc") or "cc"
    key = content_key([cc, "-O2"], [str(source)], [])
    output = os.path.join(cache_folder("pimloader-proxy"), f"rv32sim-{key}")
    if os.path.exists(output):
        return output
    return build_atomically(output, lambda partial: [cc, "-O2", "-o", partial, str(source)],
                            "building the proxy instruction counter")


def build_kernel(source: str, *, nr_tasklets: int, isa: str = "rv32im", optimisation: str = "-O2",
                 defines: Optional[Mapping[str, object]] = None) -> str:
    """The DPU kernel `source` built for the proxy ISA with the DPU build's flags (cached)."""
    if isa not in ISAS:
        raise ValueError(f"isa must be one of {sorted(ISAS)}, got {isa!r}")
    cc = require_cross_compiler()
    root = _root()
    proxy, dpu_include, include = root / "csrc" / "proxy", root / "csrc" / "emulator" / "dpu_include", root / "include"
    flags = [*ISAS[isa], optimisation, "-g", "-ffreestanding", "-nostdlib", "-static", "-fno-pic",
             f"-DNR_TASKLETS={int(nr_tasklets)}", *define_flags(defines),
             f"-I{include}", f"-I{dpu_include}", "-include", str(proxy / "proxy_prelude.h")]
    runtime, script = proxy / "proxy_rt.c", proxy / "proxy.ld"
    key = content_key([cc, *flags], [source, str(runtime), str(script)], [str(include), str(dpu_include)])
    output = os.path.join(cache_folder("pimloader-proxy"), f"{Path(source).stem}-{isa}-{key}.elf")
    if os.path.exists(output):
        return output
    return build_atomically(
        output, lambda partial: [cc, *flags, "-T", str(script), "-Wl,--no-warn-rwx-segments", "-o", partial,
                                 source, str(runtime), "-lgcc"],
        f"building {source} for the {isa} proxy")


@dataclass(frozen=True)
class Symbol:
    name: str
    start: int
    size: int

    @property
    def runtime(self) -> bool:
        return self.name.startswith(RUNTIME_PREFIXES)


def functions(elf: str) -> list[Symbol]:
    """The ELF's functions (nm's text symbols with a size), by address."""
    nm = require_cross_compiler().replace("gcc", "nm")
    lines = subprocess.run([nm, "-S", "--defined-only", elf], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTW":
            found.append(Symbol(parts[3], int(parts[0], 16), int(parts[1], 16)))
    return sorted(found, key=lambda s: s.start)


def static_size(elf: str) -> dict:
    """The kernel's code size (the runtime's left out): bytes, and 4-byte RV32 instructions
    against the DPU's 4,096-instruction IRAM."""
    kernel = [s for s in functions(elf) if not s.runtime]
    text = sum(s.size for s in kernel)
    return {"text_bytes": text, "instructions": text // 4,
            "by_function": {s.name: s.size // 4 for s in sorted(kernel, key=lambda s: -s.size)}}


def data_symbols(elf: str) -> dict:
    """The ELF's data objects (nm's data and bss symbols): name -> (address, size)."""
    nm = require_cross_compiler().replace("gcc", "nm")
    lines = subprocess.run([nm, "-S", "--defined-only", elf], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    found = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[2] in "bBdDgGsSrR":
            found[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return found


@dataclass
class Launch:
    """One DPU run the emulator traced: its MRAM before and after, its tasklets, and what
    the host had written into WRAM symbols (the -wram.txt lines, or None)."""
    mram_in: Path
    mram_out: Path
    nr_tasklets: int
    wram: Optional[Path] = None


def traced_launches(trace_dir: str) -> list[Launch]:
    """The runs under `trace_dir` (DPUEMU_TRACE_DIR), in launch order."""
    found = []
    for meta in sorted(Path(trace_dir).glob("*.tasklets")):
        stem = str(meta)[:-len(".tasklets")]
        wram = Path(stem + "-wram.txt")
        found.append(Launch(Path(stem + "-in.bin"), Path(stem + "-out.bin"), int(meta.read_text()),
                            wram if wram.exists() else None))
    return found


def wram_records(elf: str, trace: Path) -> bytes:
    """The emulator's host->WRAM writes of a launch (`trace`, its -wram.txt) as rv32sim's
    --wram-in records, at the addresses the proxy build `elf` gives the same symbols."""
    symbols = data_symbols(elf)
    records = bytearray()
    for line in trace.read_text().splitlines():
        if line == "overflow":
            raise ProxyMismatch(f"{trace.name}: the host wrote more WRAM ranges than the trace keeps")
        name, offset, data = line.split(" ")
        payload = bytes.fromhex(data)
        if name not in symbols:
            raise ProxyMismatch(f"{trace.name}: the host wrote WRAM symbol {name!r}, which the proxy build "
                                f"{Path(elf).name} lacks")
        address, size = symbols[name]
        if int(offset) + len(payload) > size:
            raise ProxyMismatch(f"{trace.name}: {len(payload)} bytes at offset {offset} of {name!r} "
                                f"overrun its {size} bytes in the proxy build")
        records += (address + int(offset)).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload
    return bytes(records)


@dataclass
class Replay:
    """What a replayed launch executed, per tasklet (hart)."""
    kernel: np.ndarray        # [T] kernel instructions, one per DMA call included
    dma_calls: np.ndarray     # [T]
    runtime: np.ndarray       # [T] the proxy runtime's own instructions (left out of `kernel`)
    classes: dict             # the kernel's instructions by class (alu, mul, div, load, ..., dma)
    by_function: dict = field(default_factory=dict)               # name: instructions, all tasklets
    by_function_per_tasklet: dict = field(default_factory=dict)   # name: [T] instructions
    counts: Optional[np.ndarray] = None   # [T, text words] executions of each instruction
    text_lo: int = 0                      # address of counts[:, 0]

    @property
    def total(self) -> int:
        return int(self.kernel.sum())


def replay(elf: str, launch: Launch, *, simulator: Optional[str] = None, budget: int = 20_000_000_000) -> Replay:
    """Runs the proxy build `elf` of a kernel on `launch`'s MRAM with its tasklets; raises
    ProxyMismatch unless the MRAM after the run equals the emulator's."""
    simulator = simulator or build_simulator()
    expected = launch.mram_out.read_bytes()
    out, histogram = Path(str(launch.mram_out) + ".proxy"), Path(str(launch.mram_out) + ".histogram")
    wram = Path(str(launch.mram_out) + ".wram")
    command = [simulator, elf, "--harts", str(launch.nr_tasklets), "--mram-in", str(launch.mram_in),
               "--mram-out", str(out), str(len(expected)), "--histogram", str(histogram), "--budget", str(budget)]
    try:
        if launch.wram is not None:
            wram.write_bytes(wram_records(elf, launch.wram))
            command += ["--wram-in", str(wram)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ProxyMismatch(f"{launch.mram_in.name}: the proxy run failed: {done.stderr.strip()}")
        if out.read_bytes() != expected:
            raise ProxyMismatch(f"{launch.mram_in.name}: the proxy's MRAM differs from the emulator's")
        summary = json.loads(done.stdout)
        counts = np.fromfile(histogram, dtype=np.uint64).reshape(launch.nr_tasklets, -1).astype(np.int64)
    finally:
        for path in (out, histogram, wram):
            path.unlink(missing_ok=True)
    return _attribute(counts, summary["text"][0], functions(elf), instruction_classes(elf, summary["text"][0],
                                                                                      counts.shape[1]))


CLASSES = ("alu", "mul", "div", "load", "store", "branch", "jump", "system")


def instruction_classes(elf: str, text_lo: int, words: int) -> np.ndarray:
    """The class (an index into CLASSES) of each 32-bit word of the executable segment."""
    data = Path(elf).read_bytes()
    phoff, phentsize, phnum = (int.from_bytes(data[a:a + n], "little") for a, n in ((28, 4), (42, 2), (44, 2)))
    for i in range(phnum):
        ph = data[phoff + i * phentsize:phoff + (i + 1) * phentsize]
        offset, vaddr, filesz = (int.from_bytes(ph[a:a + 4], "little") for a in (4, 8, 16))
        if int.from_bytes(ph[24:28], "little") & 1 and vaddr == text_lo:
            code = np.frombuffer(data[offset:offset + min(filesz, 4 * words)], dtype="<u4")
            break
    else:
        raise ValueError(f"{elf}: no executable segment at {text_lo:#x}")
    code = np.concatenate([code, np.zeros(words - len(code), dtype=code.dtype)])
    opcode, funct3, funct7 = code & 0x7F, (code >> 12) & 7, code >> 25
    cls = np.zeros(words, dtype=np.int64)
    muldiv = (opcode == 0x33) & (funct7 == 1)
    for index, mask in ((1, muldiv & (funct3 < 4)), (2, muldiv & (funct3 >= 4)), (3, opcode == 0x03),
                        (4, opcode == 0x23), (5, opcode == 0x63), (6, (opcode == 0x6F) | (opcode == 0x67)),
                        (7, opcode == 0x73)):
        cls[mask] = index
    return cls


def _attribute(counts: np.ndarray, text_lo: int, symbols: Sequence[Symbol], classes: np.ndarray) -> Replay:
    T = counts.shape[0]
    in_kernel = np.zeros(counts.shape[1], dtype=bool)
    kernel, runtime, dma = np.zeros(T, np.int64), np.zeros(T, np.int64), np.zeros(T, np.int64)
    by_function, by_function_per_tasklet = {}, {}
    for s in symbols:
        lo, hi = (s.start - text_lo) // 4, (s.start + s.size - text_lo) // 4
        per_hart = counts[:, lo:hi].sum(axis=1)
        if s.name in DMA_FUNCTIONS:
            dma += counts[:, lo]  # entries: the function's first instruction
        if s.runtime:
            runtime += per_hart
        else:
            kernel += per_hart
            in_kernel[lo:hi] = True
            by_function[s.name] = int(per_hart.sum())
            by_function_per_tasklet[s.name] = per_hart
    executed = counts.sum(axis=0) * in_kernel
    by_class = {name: int(executed[classes == i].sum()) for i, name in enumerate(CLASSES)}
    by_class["dma"] = int(dma.sum())
    counts = counts * in_kernel  # the runtime's instructions are accounted for above
    return Replay(kernel + dma, dma, runtime, by_class, by_function, by_function_per_tasklet, counts, text_lo)


def inline_chains(elf: str, addresses: Sequence[int]) -> dict:
    """For each address, the functions it belongs to, innermost inlined one first (the DWARF
    line tables of the -g build; -g does not change the code gcc emits)."""
    addr2line = require_cross_compiler().replace("gcc", "addr2line")
    text = "\n".join(f"{a:#x}" for a in addresses)
    lines = subprocess.run([addr2line, "-e", elf, "-a", "-f", "-i"], input=text, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    chains, current = {}, None
    for i, line in enumerate(lines):
        if line.startswith("0x") and (i + 1 < len(lines)):
            current = int(line, 16)
            chains[current] = []
        elif current is not None and not line.startswith(("/", "??:")) and ":" not in line:
            chains[current].append(line)
    return {a: tuple(chain) for a, chain in chains.items()}


def by_source_function(elf: str, replays: Sequence[Replay], wanted: Sequence[str]) -> list[dict]:
    """Per replay, the kernel's instructions by source function, inlined ones included, as
    [T, len(CLASSES) + 1] arrays (per tasklet, per instruction class, the DMA calls last):
    an instruction goes to the innermost function of its inline chain that is in `wanted`,
    else to the function it was compiled into; the DMA calls are "(dma)"."""
    executed = np.flatnonzero(sum(r.counts.sum(axis=0) for r in replays))
    text_lo, words = replays[0].text_lo, replays[0].counts.shape[1]
    classes = instruction_classes(elf, text_lo, words)
    chains = inline_chains(elf, [text_lo + 4 * int(w) for w in executed])
    owners: dict = {}
    for w in executed:
        chain = chains.get(text_lo + 4 * int(w), ()) or ("?",)
        owners.setdefault(next((f for f in chain if f in wanted), chain[-1]), []).append(int(w))
    out = []
    for r in replays:
        per = {}
        for name, ws in owners.items():
            table = np.zeros((r.counts.shape[0], len(CLASSES) + 1), dtype=np.int64)
            for c in range(len(CLASSES)):
                picked = [w for w in ws if classes[w] == c]
                table[:, c] = r.counts[:, picked].sum(axis=1)
            per[name] = table
        dma = np.zeros((r.counts.shape[0], len(CLASSES) + 1), dtype=np.int64)
        dma[:, -1] = r.dma_calls
        per["(dma)"] = dma
        out.append(per)
    return out
