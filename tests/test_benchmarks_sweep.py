"""The naive sweep, its cost table, the stall analysis and the viability table: their code
paths run on a tiny dataset, the tables follow from their JSON alone, and the shares the
stall analysis reports add up within the loop's own measurement.

Not a speed test: nothing here asserts a figure of this machine."""
import importlib.util
import json
import math
import os
import resource
import struct
import time
from pathlib import Path

import pytest

from benchmarks import cost_table, harness, naive_sweep, op_costs, stall, viability
from benchmarks.cpu_time import CpuClock
from benchmarks.make_dataset import make_imagenet_like
from pimloader.costmodel.provisioning import GPU_RATES, Prices, dimms_for

pytestmark = pytest.mark.timeout(300)

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("sweep") / "data", count=40, classes=4)


# -- CPU time of live and reaped children -------------------------------------------------

class _SpinningChild:
    """A forked child that spins `seconds` of CPU, sends its own process_time() and stays
    alive until released; reaped with os.wait4, whose rusage is its CPU time as the OS
    counted it."""

    def __init__(self, seconds: float):
        report_r, report_w = os.pipe()
        release_r, self._release = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:                       # the child: spin, report, wait, exit
            try:
                os.close(self._release)         # so that the parent's exit releases it too
                end = time.process_time() + seconds
                while time.process_time() < end:
                    pass
                os.write(report_w, struct.pack("d", time.process_time()))
                os.read(release_r, 1)
            finally:
                os._exit(0)
        os.close(report_w)
        os.close(release_r)
        with os.fdopen(report_r, "rb") as report:
            self.reported = struct.unpack("d", report.read(8))[0]

    def release_and_reap(self) -> float:
        """Let the child exit; its utime + stime from wait4."""
        os.write(self._release, b"x")
        os.close(self._release)
        _, status, usage = os.wait4(self.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return usage.ru_utime + usage.ru_stime


def _own_cpu() -> float:
    """This process's CPU seconds, every thread's (what CpuClock counts as its own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("children_file", [True, False])
def test_cpu_clock_counts_a_child_once_alive_or_reaped(children_file, monkeypatch):
    """The clock adds this process's own CPU time to its children's. The oracle is the OS's:
    the child's CPU time is its own process_time() while it is alive and wait4's rusage once
    reaped, and this process's share lies between getrusage taken just inside and just
    outside the clock's calls, whatever else its threads were doing meanwhile (in the
    whole suite they may spin). A child counted twice or not at all is 0.3 s off."""
    if not children_file:   # a kernel without /proc/<pid>/task/<tid>/children
        monkeypatch.setattr(Path, "glob", lambda self, pattern: iter(()))
    tick = 1 / os.sysconf("SC_CLK_TCK")   # /proc counts utime and stime in whole ticks
    outer_start = _own_cpu()
    clock = CpuClock().start()
    inner_start = _own_cpu()
    child = _SpinningChild(0.3)
    try:
        inner = _own_cpu() - inner_start
        alive = clock.elapsed()
        outer = _own_cpu() - outer_start
    finally:
        child_cpu = child.release_and_reap()
    assert child.reported + inner - 2 * tick <= alive <= child.reported + outer + tick, \
        (child.reported, inner, outer, alive)
    inner = _own_cpu() - inner_start
    reaped = clock.elapsed()
    outer = _own_cpu() - outer_start
    assert child_cpu + inner - 1e-5 <= reaped <= child_cpu + outer + 1e-5, \
        (child_cpu, inner, outer, reaped)


# -- the scaffolding the benchmarks share --------------------------------------------------

def test_interleaved_rounds_put_every_contender_once_in_each_position():
    names = ["a", "b", "c"]
    rounds = [harness.interleaved(names, r) for r in range(6)]
    assert all(sorted(order) == names for order in rounds)
    for position in range(3):   # over any 3 consecutive rounds, each name once in each place
        assert sorted(order[position] for order in rounds[1:4]) == names
    assert rounds[0] == rounds[3] == names


def test_results_are_written_as_indented_json_with_the_run_window(tmp_path, capsys):
    window = harness.RunWindow()
    results = {"environment": {**harness.machine(), **window.load_and_wall()}}
    path = tmp_path / "deep" / "r.json"
    harness.write_results(results, path)
    assert json.loads(path.read_text()) == json.loads(json.dumps(results))
    assert path.read_text().endswith("\n") and f"results written to {path}" in capsys.readouterr().out
    env = results["environment"]
    assert env["wall_s"] >= 0 and len(env["loadavg_before"]) == len(env["loadavg_after"]) == 3


# -- the naive sweep and the cost table ---------------------------------------------------

def test_naive_sweep_quick_rows_and_cost_table(tmp_path, data):
    out = tmp_path / "sweep.json"
    naive_sweep.main(["--quick", "--workers", "1", "2", "--data", str(data), "--out", str(out),
                      "--projection", str(RESULTS / "dpu_projection.json")])
    results = json.loads(out.read_text())
    assert [row["workers"] for row in results["rows"]] == [1, 2]
    for row in results["rows"]:
        assert set(row["loaders"]) == set(naive_sweep.LOADERS)
        for entry in row["loaders"].values():
            assert entry["cpu_ms_per_image"] > 0 and entry["median_img_s"] > 0
    table = results["cost_table"]
    assert [row["gpu"] for row in table["rows"]] == [gpu.name for gpu in GPU_RATES]
    for row in table["rows"]:
        dpu, per_dpu = row[cost_table.LABEL], table["dpu"]["dpu_images_per_s_per_dpu"]
        for case, dimms in dpu["dimms"].items():   # the fewest whole DIMMs reaching the target
            assert dimms * 128 * per_dpu[case] >= row["target_img_s"]
            assert (dimms - 1) * 128 * per_dpu[case] < row["target_img_s"]


def _sweep(cpu_ms: float) -> dict:
    stats = {"fetch_s": 0.1, "decode_s": 0.5, "write_s": 0.4}
    loaders = {name: {"cpu_ms_per_image": cpu_ms, "img_s_per_worker": 500.0,
                      "median_epoch_stats": stats} for name in naive_sweep.LOADERS}
    return {"date": "d",
            "rows": [{"workers": 1, "loaders": {}}, {"workers": 2, "loaders": loaders}]}


def _projection(per_dpu_nominal: float) -> dict:
    projections = [{"system": "2,560 DPUs", "case": case, "images_per_s": rate * 2560}
                   for case, rate in (("best", 2 * per_dpu_nominal), ("nominal", per_dpu_nominal),
                                      ("worst", per_dpu_nominal / 4))]
    return {"date": "d", "systems": [{"name": "2,560 DPUs", "nr_dpus": 2560, "clock_hz": 350e6}],
            "assumptions": [{"name": "host_to_dpu_rank_bw", "nominal": 6.7e9},
                            {"name": "dpu_to_host_rank_bw", "nominal": 4.7e9}],
            "pipelines": [{"pipeline": "train", "dtype": "float32", "projections": projections,
                           "host_copy_s_per_image": 1e-4,
                           "per_image": {"host_to_dpu_bytes": 6.7e5, "dpu_to_host_bytes": 4.7e5}}]}


def test_every_assumption_has_a_source_and_a_rate_per_dpu_must_be_positive():
    assert all(gpu.images_per_s.source and gpu.at() > 0 for gpu in GPU_RATES)
    assert all(price["source"] and price["best"] <= price["worst"] for price in Prices().table())
    with pytest.raises(ValueError, match="rate per DPU must be positive"):
        dimms_for(2470, 0.0)


def test_cost_table_follows_from_its_json_alone():
    sweep, projection = _sweep(cpu_ms=2.0), _projection(per_dpu_nominal=10.0)
    first, again = cost_table.build(sweep, projection), cost_table.build(sweep, projection)
    assert first == again
    assert cost_table.format_table(first) == cost_table.format_table(again)
    a100 = next(row for row in first["rows"] if row["gpu"] == "A100 AMP")
    vcpu, life = Prices().vcpu_hour.nominal, Prices().amortisation_hours.nominal
    # by hand: 2 ms of CPU per image at 2,470 img/s keeps 4.94 cores busy
    assert a100["loaders"]["pimloader"]["cores"] == pytest.approx(4.94)
    assert a100["loaders"]["pimloader"]["usd_per_hour"] == pytest.approx(4.94 * vcpu)
    # host with DPUs: 2 ms x (1 - 0.4 kernel share) + 0.1 copy + 0.1 + 0.1 transfers = 1.5 ms
    dpu = a100[cost_table.LABEL]
    assert dpu["cores"] == pytest.approx(2470 * 1.5e-3)
    assert dpu["dimms"] == {"best": 1, "nominal": 2, "worst": 8}   # 2470 / (rate x 128)
    assert dpu["break_even_usd_per_dimm"] == pytest.approx((4.94 - 3.705) * vcpu * life / 2)
    assert "no DPU rows" in cost_table.format_table(cost_table.build(sweep, None))


def test_break_even_is_a_price_only_for_a_saving_the_measurement_can_see():
    prices = Prices()
    core_life_usd = prices.vcpu_hour.nominal * prices.amortisation_hours.nominal
    paying = cost_table.break_even(5.0, 3.0, 0.1, 2, prices)
    assert paying["break_even_usd_per_dimm"] == pytest.approx(2.0 * core_life_usd / 2)
    assert paying["break_even_why_none"] is None
    assert cost_table.format_break_even(paying) == f"${core_life_usd:,.0f}"
    for dpu_cores in (3.0, 3.4):   # saves no core, or needs more
        never = cost_table.break_even(3.0, dpu_cores, 0.1, 2, prices)
        assert never["break_even_usd_per_dimm"] is None
        assert never["break_even_why_none"].startswith("never")
        assert cost_table.format_break_even(never).startswith("never")
    unknown = cost_table.break_even(5.0, 3.0, None, 2, prices)   # one timed epoch: no spread
    assert unknown["break_even_usd_per_dimm"] == paying["break_even_usd_per_dimm"]
    assert cost_table.format_break_even(unknown) == f"${core_life_usd:,.0f} (no spread)"
    # what the 2026-12-01 run printed as "1": 0.0024 cores saved, within a 0.07-core spread
    noise = cost_table.break_even(1.0056, 1.0032, 0.07, 1, prices)
    assert noise["break_even_usd_per_dimm"] is None and noise["cores_saved"] > 0
    assert cost_table.format_break_even(noise) == "n/a (+0.00 c, spread 0.07)"


def test_cost_table_takes_the_spread_from_the_sweeps_epochs():
    sweep = _sweep(cpu_ms=1.5)
    sweep["rows"][-1]["images"] = 1000
    host = sweep["rows"][-1]["loaders"][cost_table.DPU_HOST]
    # 1.4-1.6 ms per image over 3 epochs: 0.2 ms of spread; the DPU host path is 1.2 ms
    # (1.5 x 0.6 + 0.1 + 0.1 + 0.1), so it saves 0.3 ms per image: more than the spread
    host["epoch_cpu_s"] = [1.4, 1.5, 1.6]
    a100 = next(row for row in cost_table.build(sweep, _projection(10.0))["rows"]
                if row["gpu"] == "A100 AMP")[cost_table.LABEL]
    assert a100["saving_spread_cores"] == pytest.approx(2470 * 0.2e-3)
    assert a100["cores_saved"] == pytest.approx(2470 * 0.3e-3)
    assert a100["break_even_usd_per_dimm"] > 0
    host["epoch_cpu_s"] = [1.3, 1.5, 1.7]   # 0.4 ms of spread: the 0.3 ms saving is noise
    a100 = next(row for row in cost_table.build(sweep, _projection(10.0))["rows"]
                if row["gpu"] == "A100 AMP")[cost_table.LABEL]
    assert a100["break_even_usd_per_dimm"] is None
    assert a100["break_even_why_none"].startswith("n/a")


# -- stall analysis -----------------------------------------------------------------------

@pytest.mark.parametrize("workers, step", [(0, "sleep"), (2, "busy")])
def test_stall_shares_add_up_within_the_loop(tmp_path, data, workers, step):
    out = tmp_path / "stall.json"
    stall.main(["--quick", "--data", str(data), "--out", str(out), "--step-ms", "2",
                "--workers", str(workers), "--step", step])
    results = json.loads(out.read_text())
    (row,) = results["rows"]
    assert set(row["loaders"]) == set(stall.LOADERS)
    for name, entry in row["loaders"].items():
        shares = entry["shares"]
        assert sum(shares.values()) == pytest.approx(1.0)
        assert min(shares.values()) >= 0, shares   # waits + steps fit in the loop's wall time
        ms = entry["per_batch_ms"]
        assert ms["step"] >= 2.0
        if name == "torchvision":                  # no stats(): only wait and step
            assert set(ms) == {"wait_loop", "step"}
            continue
        assert 0 <= ms["deliver"] <= ms["in_next"] <= ms["wait_loop"] + 1e-9, ms
        inside = ms["deliver"] + ms["wait"]        # the stages spent in next() add up to it
        if workers == 0:                           # producing happens inside next() too
            inside += ms["fetch"] + ms["decode"] + ms["transform"]
        assert ms["wait"] >= -1e-9 and inside == pytest.approx(ms["in_next"]), ms


# -- the viability table ------------------------------------------------------------------

def _inputs():
    return [json.loads((RESULTS / f"{name}.json").read_text())
            for name in ("imagenet_pipeline", "kernel_speed", "dpu_projection", "op_costs",
                         "decode_projection", "detection_projection", "audio",
                         "audio_dpu_projection")]


def test_op_costs_quick_measures_every_operation(tmp_path):
    out = tmp_path / "op_costs.json"
    op_costs.main(["--quick", "--out", str(out)])
    results = json.loads(out.read_text())
    assert set(results["torchvision_cpu_ms"]) == set(op_costs.OPS)
    assert all(ms > 0 for ms in results["torchvision_cpu_ms"].values())
    cumulative = results["pimloader_cumulative_cpu_ms"]
    assert sum(results["pimloader_cpu_ms"].values()) == pytest.approx(cumulative["colour"])


def test_viability_table_follows_from_its_json_alone(tmp_path):
    table = viability.build(*_inputs())
    assert table == viability.build(*_inputs())
    assert viability.build(*_inputs()[:3])["rows"]   # op_costs and decode_projection are optional
    assert sum(row["op"].startswith("decode on DPUs") for row in table["rows"]) == 2
    rates = table["rates"]
    for row in table["rows"]:
        transfer_ms = (row["bytes_in"] / rates["host_to_dpu_rank_bw"]
                       + row["bytes_out"] / rates["dpu_to_host_rank_bw"]) * 1e3
        assert row["transfer_ms"] == pytest.approx(transfer_ms)
        host_ms = row[f"{row['host_reference']}_cpu_ms"]
        extra_ms = row.get("host_extra_ms", 0.0)   # host work the DPU path adds (decode on DPUs)
        if row["dpus_per_core"] is not None:       # net host time saved per image > 0
            assert transfer_ms + extra_ms < host_ms
            dpu_ms = row["dpu_cycles"]["nominal"] / 350e6 * 1e3
            assert row["dpus_per_core"] == math.ceil(dpu_ms / (host_ms - transfer_ms - extra_ms))
            if row["dpus_per_core"]:   # a DIMM's 128 DPUs against the cores they free
                cores_freed = 128 / row["dpus_per_core"]
                assert row["break_even_usd_per_dimm"] == pytest.approx(
                    cores_freed * Prices().vcpu_hour.nominal * 3 * 8760)
        elif row["verdict"].startswith("never"):
            assert transfer_ms + extra_ms >= host_ms
    doc = tmp_path / "viability.md"
    plotting = importlib.util.find_spec("matplotlib") is not None  # requirements-bench.txt
    viability.main(["--doc", str(doc), "--out", str(tmp_path / "viability.json")]
                   + (["--plot", str(tmp_path / "viability.png")] if plotting else []))
    text = doc.read_text()
    if plotting:
        assert "](viability.png)" in text
        assert (tmp_path / "viability.png").read_bytes()[:4] == b"\x89PNG"
    assert all(row["op"] in text for row in table["rows"])
    assert sum(row["op"].startswith("detection: ") for row in table["rows"]) == 3
    assert "to be filled as the detection pipeline lands" not in text
    assert "to be filled as the audio pipeline lands" not in text
    without = viability.build(*_inputs()[:5])   # detection_projection and audio are optional too
    assert not any(row["op"].startswith(("detection: ", "audio: ")) for row in without["rows"])
    assert ("detection", viability.LATER[0][1]) in without["later"]
    assert ("audio", viability.LATER[1][1]) in without["later"]


def test_viability_audio_rows_split_the_fused_step():
    rows = {row["op"]: row for row in viability.build(*_inputs())["rows"]}
    fused = next(row for op, row in rows.items() if op.startswith("audio: fused log-mel"))
    stages = [row for op, row in rows.items() if op.startswith("audio: - ")]
    assert len(stages) == len(viability.AUDIO_STAGES)
    for case in ("best", "nominal", "worst"):   # every counted unit lands in one stage
        assert sum(row["dpu_cycles"][case] for row in stages) == pytest.approx(
            fused["dpu_cycles"][case], rel=1e-9)
    projection = _inputs()[-1]["results"]
    setting = next(v for k, v in projection.items() if k.startswith("n_mels=40"))
    assert fused["dpu_cycles"]["nominal"] == max(
        p["instructions_per_clip"] for p in setting["projections"] if p["case"] == "nominal")
    assert fused["bytes_out"] == setting["dma_per_clip"]["gather_bytes_per_dpu"] / _inputs()[-1]["clips_per_dpu"]
