"""The host/DPU contract is written once: the CPU kernel and the DPU driver refuse a bad axis
table with the same check (csrc/axis_check.c) and the same message."""
import numpy as np
import pytest
import torch

from pimloader.backends import kernels as K
from pimloader.backends.dpu.driver import DpuDriver

RNG = np.random.default_rng(5)
IMAGE = RNG.integers(0, 256, (120, 1600, 3), dtype=np.uint8)


def _weights(tables, offset):
    """(ranges [n_out, 2] uint32, weights [n_out, taps] int16) views into the table at offset."""
    n_in, n_out, taps, _ = (int(v) for v in tables[offset:offset + 16].view("<u4"))
    ranges = tables[offset + 16:offset + 16 + 8 * n_out].view("<u4").reshape(n_out, 2)
    at = offset + 16 + 8 * n_out
    return ranges, tables[at:at + 2 * n_out * taps].view("<i2").reshape(n_out, taps)


def _past_count(tables, s):          # a nonzero weight past an output's window
    ranges, w = _weights(tables, int(s["xtab_offset"]))
    j = int(np.argmin(ranges[:, 1]))
    w[j, ranges[j, 1]] = 5


def _overflow(tables, s):            # weights whose sum can overflow the int32 accumulator
    _, w = _weights(tables, int(s["xtab_offset"]))
    w[0, :] = 32767


def _backwards(tables, s):           # a window moving back
    ranges, _ = _weights(tables, int(s["xtab_offset"]))
    ranges[1, 0] = 0
    ranges[0, 0] = 1


def _taps(tables, s):                # taps not a multiple of 4
    tables[int(s["xtab_offset"]) + 8:int(s["xtab_offset"]) + 12].view("<u4")[0] = 3


def _maps(tables, s):                # a table for another extent
    tables[int(s["ytab_offset"]):int(s["ytab_offset"]) + 4].view("<u4")[0] += 1


def _offset(tables, s):              # a misaligned offset
    s["ytab_offset"] += 4


CORRUPTIONS = [_past_count, _overflow, _backwards, _taps, _maps, _offset]


@pytest.fixture(scope="module")
def dpus():
    with DpuDriver(nr_dpus=2, nr_tasklets=4) as backend:
        yield backend


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_bad_axis_table_is_refused_the_same_way_by_both_paths(corrupt, dpus, monkeypatch):
    # a 1500-wide crop to 8 columns: windows of ~190 to ~380 taps, enough for `_overflow`
    box, size = (10, 20, 100, 1500), (24, 8)
    original = K.pack_batch

    def corrupted(*args, **kwargs):
        packed, arrays = original(*args, **kwargs)
        packed.tables = packed.tables.copy()
        packed.samples = packed.samples.copy()
        corrupt(packed.tables, packed.samples[0])
        return packed, arrays

    packed, arrays = corrupted([IMAGE], [box], size, out_dtype=torch.uint8)
    with pytest.raises(ValueError) as cpu:
        K.run_packed(packed, arrays, torch.empty((1, 3) + size, dtype=torch.uint8))
    monkeypatch.setattr(K, "pack_batch", corrupted)
    with pytest.raises(ValueError) as dpu:
        dpus.run([IMAGE], [box], size, torch.empty((1, 3) + size, dtype=torch.uint8))
    cpu_text = str(cpu.value).split("sample 0: ", 1)[1]
    dpu_text = str(dpu.value).split("sample 0: ", 1)[1]
    assert cpu_text == dpu_text
    assert "table" in cpu_text


def test_the_overflow_case_really_overflows():
    """The weights `_overflow` writes exceed what an int32 accumulator holds (else its test
    would pass on an unrelated check)."""
    packed, _ = K.pack_batch([IMAGE], [(10, 20, 100, 1500)], (24, 8), out_dtype=torch.uint8)
    tables = packed.tables.copy()
    ranges, w = _weights(tables, int(packed.samples[0]["xtab_offset"]))
    precision = int(tables[int(packed.samples[0]["xtab_offset"]) + 12:][:4].view("<u4")[0])
    assert (1 << (precision - 1)) + 255 * 32767 * int(ranges[0, 1]) > 2**31 - 1


def test_the_untouched_batch_runs_on_both():
    box, size = (10, 20, 100, 1500), (24, 8)
    cpu = torch.empty((1, 3) + size, dtype=torch.uint8)
    K.resized_crop_batch([IMAGE], [box], size, cpu)
    with DpuDriver(nr_dpus=1, nr_tasklets=4) as dpus:
        got = torch.empty_like(cpu)
        dpus.run([IMAGE], [box], size, got)
    assert torch.equal(cpu, got)


def test_pack_batch_fills_pim_sample_t_by_name():
    """What C reads, field by field (cffi's view of pim_sample_t), is what pack_batch meant."""
    images = [IMAGE[:50, :70], np.ascontiguousarray(IMAGE[:40, :30])]
    boxes = [(3, 4, 20, 30), (0, 5, 40, 25)]
    packed, arrays = K.pack_batch(images, boxes, (7, 9), hflip=[True, False], vflip=[False, True],
                                  interpolation="bicubic", layout="NHWC", out_dtype=torch.float16)
    c = K.ffi.cast("pim_sample_t *", K.ffi.from_buffer(packed.samples))
    flips = [K.lib.PIM_FLAG_HFLIP, K.lib.PIM_FLAG_VFLIP]
    for i, (arr, (top, left, h, w)) in enumerate(zip(arrays, boxes)):
        s = c[i]
        assert (s.src_offset, s.dst_offset) == (0, i * 7 * 9 * 3 * 2)
        assert (s.src_h, s.src_w, s.src_stride) == (arr.shape[0], arr.shape[1], arr.strides[0])
        assert (s.crop_top, s.crop_left, s.crop_h, s.crop_w, s.out_h, s.out_w) == (top, left, h, w, 7, 9)
        assert (s.channels, s.out_esize, s.interp) == (3, 2, K.lib.PIM_INTERP_BICUBIC)
        assert s.flags == K.lib.PIM_FLAG_NHWC | flips[i]
        for offset, n_in, n_out in ((s.xtab_offset, w, 9), (s.ytab_offset, h, 7)):
            axis = K.ffi.cast("pim_axis_t *", K.ffi.from_buffer(packed.tables[offset:]))
            assert (axis.n_in, axis.n_out) == (n_in, n_out)


def test_the_numpy_mirrors_match_the_c_structs_field_by_field():
    for ctype, dtype in (("pim_sample_t", K.SAMPLE_DTYPE), ("pim_extra_t", K.EXTRA_DTYPE),
                         ("pim_axis_t", K.AXIS_DTYPE)):
        fields = K.ffi.typeof(ctype).fields
        assert [name for name, _ in fields] == list(dtype.names)
        for name, field in fields:
            assert field.offset == dtype.fields[name][1]
            assert K.ffi.sizeof(field.type) == dtype.fields[name][0].itemsize


def test_the_cost_model_plans_with_the_drivers_code():
    """The cost model's plan of a batch is the driver's (pim_dpu_plan): a sample the driver
    refuses is refused by the model with the driver's words, and an accepted batch's plan
    splits and bands it as the driver reports (active DPUs, arena)."""
    from pimloader import costmodel as cm
    big = RNG.integers(0, 256, (1411, 1411, 3), dtype=np.uint8)
    lut = K.normalize_lut(3, torch.float32)
    packed, _ = K.pack_batch([big], [(0, 0, 1411, 1411)], (4, 4), interpolation="bicubic")
    with DpuDriver(1, 16) as dpus:
        with pytest.raises(ValueError) as driver:
            dpus.run([big], [(0, 0, 1411, 1411)], (4, 4), torch.empty((1, 3, 4, 4)), interpolation="bicubic",
                     lut=lut)
        with pytest.raises(ValueError) as model:
            cm.driver_plan(packed.samples, packed.tables, 1, 16, cm.arena_bytes(16))
        assert "WRAM per tasklet" in str(driver.value)
        assert str(driver.value).split("sample 0: ")[1] == str(model.value).split("sample 0: ")[1]

        images = [IMAGE[:60, :80], IMAGE[:100, :160], IMAGE[:30, :30]]
        boxes = [(0, 0, 60, 80), (0, 0, 100, 160), (0, 0, 30, 30)]
        dpus.run(images, boxes, (24, 8), torch.empty((3, 3, 24, 8)), lut=lut)
        info = dpus.run_info()
        packed, _ = K.pack_batch(images, boxes, (24, 8))
        plan = cm.driver_plan(packed.samples, packed.tables, 1, 16, info["arena_bytes"])
        assert info["arena_bytes"] == cm.arena_bytes(16)
        assert len(plan.runs) == info["active_dpus"] == 1 and plan.runs[0] == range(0, 3)
        assert plan.bands[0][0].start == 0 and plan.bands[0][-1].stop == 3 * 24
        assert [int(r.sum()) for r in plan.row_work] == [int(cm.row_work(s, packed.tables, p).sum())
                                                          for s, p in zip(packed.samples, plan.plans)]
