"""The cost model's decode stage (pimloader.costmodel.decode): its units of work against the
kernel's own counts and an independent count from the JPEG's structure, the chain's
arithmetic by hand on a synthetic run, and the counted per-unit figures against the proxy."""
import math

import numpy as np
import pytest

from pimloader import costmodel as cm
from pimloader.backends.dpu import jpeg as DJ
from pimloader.costmodel import decode as dm
from pimloader.costmodel import proxy
from pimloader.decode import add_restart_markers, encode_jpeg

skimage_data = pytest.importorskip("skimage.data")
A, D = cm.Assumptions(), dm.DecodeAssumptions()
UNIT = {name: i for i, name in enumerate(dm.DECODE_WORK)}


def photo(height, width, grey=False):
    image = skimage_data.camera() if grey else skimage_data.astronaut()
    return np.ascontiguousarray(image[50:50 + height, 80:80 + width])


def entropy_bytes(jpeg: bytes) -> int:
    """Oracle: the scan's bytes from the end of the SOS segment to EOI, without the RSTn markers."""
    sos = jpeg.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    scan = jpeg[start:jpeg.rindex(b"\xff\xd9")]
    markers = sum(scan.count(bytes([0xFF, 0xD0 + k])) for k in range(8))
    return len(scan) - 2 * markers


@pytest.mark.parametrize("grey", [False, True])
def test_decode_work_is_what_the_kernel_and_the_file_say(grey):
    height, width = 45, 70
    jpeg = add_restart_markers(encode_jpeg(photo(height, width, grey), quality=80), 2)
    with DJ.DpuJpegDecoder(nr_dpus=1, nr_tasklets=8) as dpus:
        dpus.dpus.reset_counters()
        dpus.decode([jpeg])
        counters, last = dpus.dpus.counters(), dpus.last_work[0]
    work = dm.work_of(last, 1 if grey else 3, counters.mram_read_calls + counters.mram_write_calls)
    mcu = 8 if grey else 16                      # 4:2:0 colour: 16x16 MCUs of 6 blocks
    mcus = math.ceil(height / mcu) * math.ceil(width / mcu)
    blocks = mcus * (1 if grey else 6)
    assert work[UNIT["mcu"]] == mcus == last["mcus"]
    assert work[UNIT["huff_block"]] == work[UNIT["idct_block"]] == blocks
    assert work[UNIT["colour_pixel"]] == height * width
    assert work[UNIT["upsample_pixel"]] == (0 if grey else height * width)
    assert work[UNIT["huff_byte"]] == entropy_bytes(jpeg)
    assert work[UNIT["huff_coef"]] == work[UNIT["idct_coef"]] == last["ac_coefficients"] < 63 * blocks
    assert work[UNIT["dma_call"]] > 0 and work[UNIT["image"]] == 1


def test_interval_items_follow_the_kernels_runs():
    # strips of 4 MCUs, 1-MCU intervals: runs of 4 while every tasklet still gets one
    assert dm.interval_items(64, 1, 4, 16) == 16
    assert dm.interval_items(40, 1, 4, 16) == 20     # 40 // 16 = 2 intervals per run
    assert dm.interval_items(10, 1, 4, 16) == 10     # fewer intervals than tasklets: one each
    assert dm.interval_items(9, 8, 4, 16) == 9       # intervals longer than the strip


def synthetic_crop_run(images_per_dpu=(2, 1)):
    n, dpus = sum(images_per_dpu), len(images_per_dpu)
    work = [cm.KernelWork(np.zeros((16, len(cm.WORK)))) for _ in range(dpus)]
    zeros = np.zeros(dpus, dtype=np.int64)
    return cm.DpuRun(dpus, 16, n, dpus, 4096, 8192, 4096, 8192, zeros, zeros, zeros, zeros, zeros, zeros,
                     zeros, work, 1, 1, list(images_per_dpu))


def synthetic_image(blocks, coefs, pixels, intervals, rows, chunk=10_000):
    values = {"huff_block": blocks, "huff_coef": coefs, "huff_byte": 0, "idct_block": blocks,
              "idct_coef": coefs, "upsample_pixel": pixels, "colour_pixel": pixels, "mcu": 0,
              "dma_call": 0, "image": 0}
    return dm.DecodeImage(np.array([values[u] for u in dm.DECODE_WORK], float), 100, 200_000, 50, 100_000,
                          chunk, intervals, rows)


def test_chain_projection_by_hand():
    images = [synthetic_image(600, 5000, 10_000, 32, 100, chunk=10_000),
              synthetic_image(600, 5000, 10_000, 32, 100, chunk=20_000),
              synthetic_image(300, 1000, 5_000, 4, 50, chunk=8_000)]
    run = synthetic_crop_run((2, 1))
    system = cm.System("one rank", 64, 350e6)
    p = dm.project_chain(run, images, [500, 500, 700], system, A, D, "nominal")
    c = {u: D.costs("nominal")[i] for i, u in enumerate(dm.DECODE_WORK)}
    step2 = lambda b, k: b * (c["huff_block"] + c["idct_block"]) + k * (c["huff_coef"] + c["idct_coef"])  # noqa: E731
    step3 = lambda px: px * (c["upsample_pixel"] + c["colour_pixel"])  # noqa: E731
    # DPU 0: two images, 32 intervals and 100 rows each over 16 tasklets: the pipeline is full
    dpu0 = 2 * (step2(600, 5000) + step3(10_000))
    dma0 = 2 * (100 * 77 + 50 * 61 + 0.5 * 300_000)
    # DPU 1: 4 intervals over 16 tasklets: each issues once per 11 cycles, step 2 takes 11x its
    # one interval's instructions (a quarter of the image's)
    dpu1 = 11 * step2(300, 1000) / 4 + step3(5_000)
    assert p.t_decode == pytest.approx(max(max(dpu0, dma0), dpu1) / 350e6)
    assert p.t_in_decode == pytest.approx(64 * 30_000 / 6.7e9)                 # DPU 0's chunks
    assert p.t_in_transform == pytest.approx(64 * (1000 + 64) / 6.7e9)          # no pixels
    load = D.decoder_program_bytes.nominal + D.transform_program_bytes.nominal
    assert p.t_load == pytest.approx(64 * load / 6.7e9)
    assert p.t_out == pytest.approx(64 * 8192 / 4.7e9 + 64 * 3 * 32 / 4.7e9)  # outputs + statuses
    assert p.t_transform == pytest.approx(cm.project(run, system, A, "nominal").t_dpu)
    assert p.t_launch == pytest.approx(p.t_load + p.t_in_decode + p.t_in_transform + p.t_decode
                                       + p.t_transform + p.t_out)          # one rank: in turn
    assert p.images_per_launch == pytest.approx(1.5 * 64)
    assert p.images_per_s == pytest.approx(96 / p.t_launch)
    assert p.bound == "DPU decode"
    best = dm.project_chain(run, images, [500, 500, 700], cm.System("s", 640, 350e6), A, D, "best")
    assert best.t_launch == pytest.approx(max(best.t_load + best.t_in_decode + best.t_in_transform + best.t_out,
                                              best.t_decode + best.t_transform))


def test_chain_refuses_mismatched_samples_and_end_to_end_takes_the_slower_side():
    with pytest.raises(ValueError, match="2 decoded images"):
        dm.project_chain(synthetic_crop_run((2, 1)), [synthetic_image(1, 1, 1, 1, 1)] * 2, [1, 1, 1],
                         cm.SYSTEMS[0])
    assert dm.end_to_end(5000.0, 0.001, 2)["bound"] == "host CPU"
    assert dm.end_to_end(500.0, 0.001, 2) == {"host_images_per_s": 2000.0, "dpu_images_per_s": 500.0,
                                              "images_per_s": 500.0, "bound": "DPUs"}


@pytest.mark.skipif(proxy.find_cross_compiler() is None, reason=f"{proxy.CROSS_COMPILER} is not installed")
def test_the_counted_figures_predict_the_proxys_count():
    """The model's per-unit figures (a fit over the benchmark's photos) predict a new photo's
    counted DPU instructions within 15% in every bracket; if the kernel changes, count again
    (python -m benchmarks.decode_projection)."""
    from benchmarks.decode_counts import count_launch
    jpeg = add_restart_markers(encode_jpeg(photo(160, 224), quality=85), 4)
    elves = {isa: proxy.build_kernel(DJ.KERNEL_SOURCE, nr_tasklets=16, isa=isa) for isa in proxy.ISAS}
    launch = count_launch(jpeg, "photo", None, elves, 16)
    for case in cm.CASES:
        counted = sum(launch["parts"][case].values())
        predicted = float(np.dot(launch["work"], D.costs(case)))
        assert predicted == pytest.approx(counted, rel=0.15), case


def test_balanced_decode_what_if_takes_the_mean_dpu():
    images = [synthetic_image(600, 5000, 10_000, 32, 100), synthetic_image(600, 5000, 10_000, 32, 100),
              synthetic_image(600, 5000, 10_000, 32, 100)]
    run, system = synthetic_crop_run((2, 1)), cm.System("one rank", 64, 350e6)
    slowest = dm.project_chain(run, images, [0, 0, 0], system)
    even = dm.project_chain(run, images, [0, 0, 0], system, balanced=True)
    assert even.t_decode == pytest.approx(slowest.t_decode * 1.5 / 2)   # 3 images over 2 DPUs, not 2
    assert even.images_per_s > slowest.images_per_s


def test_fit_recovers_known_costs_and_the_idct_multiply_bracket():
    """fit_units on launches made from known per-unit costs gives them back; part_instructions
    prices the IDCT's multiplies at IDCT_MUL and the others at the general bracket."""
    from pimloader.costmodel import decode_counted as dc
    from pimloader.costmodel.counted import BRACKETS
    rng = np.random.default_rng(0)
    truth = {name: float(rng.uniform(1, 50)) for name in dm.DECODE_WORK}
    launches = []
    for _ in range(12):
        work = rng.uniform(100, 10_000, len(dm.DECODE_WORK))
        parts = {part: sum(work[UNIT[u]] * truth[u] for u in units) for part, (_, units) in dm.PARTS.items()}
        parts["rest"] = sum(work[UNIT[u]] * truth[u] for u in dm.REST)
        launches.append({"work": work.tolist(), "parts": {case: parts for case in cm.CASES}})
    fitted = dc.fit_units(launches)["nominal"]["units"]
    assert fitted == pytest.approx(truth, rel=1e-6)
    mul, alu = proxy.CLASSES.index("mul"), proxy.CLASSES.index("alu")
    table = np.zeros((2, len(proxy.CLASSES) + 1))
    table[0, mul], table[1, alu] = 10, 5          # 10 multiplies and 5 ALU instructions
    for case in cm.CASES:
        priced = dc.part_instructions({"idct_islow": table, "make_row": table}, case)
        assert priced["idct"] == pytest.approx(10 * dm.IDCT_MUL[case] + 5)
        assert priced["colour"] == pytest.approx(10 * BRACKETS[case]["mul"] + 5)
