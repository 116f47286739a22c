"""Where the emulator maps a DPU's MRAM: never across a 4 GB boundary of the host's address
space, so that the 32-bit MRAM addresses DPU code computes with increase over the whole MRAM,
as on a DPU (0x08000000 up).

The bug this guards against: a copy of the JPEG decoder mapped across such a boundary saw its
MRAM addresses wrap to 0 inside a restart interval's bytes (`end = start + length` < `start`)
and reported a false "bad Huffman code" on a valid file, now and then, wherever mmap happened
to put the copy. Here the process's address space is steered (tests/_address_space.py) so that
the next copy would land with a boundary inside the chunk's compressed data; a control shows
the steering puts a copy where asked. Oracle: Pillow's decode of the same file.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not sys.platform.startswith("linux") or sys.maxsize < 2 ** 32,
                                 reason="steers Linux's 64-bit mmap placement")]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

STEERED_LOAD = textwrap.dedent('''
    import io, json, sys
    sys.path[:0] = sys.argv[1:3]
    import numpy as np
    from PIL import Image
    from _address_space import mappings, object_span, steer_next_mapping, symbol_offset
    from pimloader.backends.dpu import jpeg as DJ
    from pimloader.backends.dpu.emulator import MRAM_SIZE
    from pimloader.decode import DecodeError, add_restart_markers, encode_jpeg

    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (192, 256, 3), dtype=np.uint8)  # noise: ~100 kB of data
    jpeg = add_restart_markers(encode_jpeg(pixels, quality=90), 4)
    expected = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))
    n_intervals = len(DJ.prepare_image(jpeg, "noise").layout.intervals)
    data_off = DJ.HEADER.itemsize + DJ.IMAGE.itemsize + n_intervals * DJ.INTERVAL.itemsize + DJ.TABLES.itemsize

    def load_at(dpus, binary, boundary_at):
        """dpu_load with the address space steered; where the copy's MRAM landed."""
        boundary = steer_next_mapping(object_span(binary), boundary_at)
        dpus.load(binary)
        base = min(start for start, _, name in mappings() if "pimloader-dpu-0" in name)
        mram = base + symbol_offset(binary, "__dpuemu_mram_begin")
        return dict(boundary_at=boundary - base, wraps=(mram >> 32) != ((mram + MRAM_SIZE) >> 32))

    with DJ.DpuJpegDecoder(1) as decoder:
        heap = symbol_offset(decoder.binary, "__sys_used_mram_end")
        control = load_at(decoder.dpus, decoder.binary, 0)
        steered = load_at(decoder.dpus, decoder.binary, heap + data_off + 1000)
        try:
            [decoded] = decoder.decode([jpeg], ["noise"])
            steered["decode"] = "equal" if np.array_equal(decoded, expected) else "differs"
        except DecodeError as error:
            steered["decode"] = str(error)
    print(json.dumps(dict(control=control, steered=steered)))
''')


def test_a_dpus_mram_is_never_mapped_across_a_4_gb_boundary():
    out = subprocess.run([sys.executable, "-c", STEERED_LOAD, ROOT, HERE], check=True, capture_output=True,
                         text=True, timeout=100).stdout
    result = json.loads(out.splitlines()[-1])
    # the steering puts a copy where asked (give or take a small mapping made meanwhile, which
    # would move the boundary a little further into the MRAM: still inside it)
    assert 0 <= result["control"]["boundary_at"] <= 1 << 20, result
    assert not result["steered"]["wraps"], result
    assert result["steered"]["decode"] == "equal"
