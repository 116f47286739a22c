"""Where a benchmark run writes (benchmarks/harness.py): its JSON, plots and pages go to the
git-ignored results/latest/ unless PIMLOADER_BENCH_REFRESH=1 (`python -m benchmarks
--refresh`, `make bench REFRESH=1`) asks for the committed results/ and docs/; a benchmark
that reads another's JSON reads the run's, else the committed one with a line saying so.
Each test points the harness's folders at a temporary copy, so the repository is untouched."""
import argparse
import json
import shutil
import types

import pytest

import benchmarks.__main__ as job
from benchmarks import harness, op_costs, viability

COMMITTED = harness.RESULTS_DIR
VIABILITY_INPUTS = ("imagenet_pipeline", "kernel_speed", "dpu_projection", "op_costs",
                    "decode_projection", "detection_projection", "audio", "audio_dpu_projection")


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """results/, results/latest/ and docs/ under tmp_path, and no refresh asked."""
    results, docs = tmp_path / "results", tmp_path / "docs"
    monkeypatch.setattr(harness, "RESULTS_DIR", results)
    monkeypatch.setattr(harness, "LATEST_DIR", results / "latest")
    monkeypatch.setattr(harness, "DOCS", docs)
    monkeypatch.delenv(harness.REFRESH_ENV, raising=False)
    return types.SimpleNamespace(results=results, latest=results / "latest", docs=docs)


def files_under(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


@pytest.mark.parametrize("setting, refreshed", [(None, False), ("0", False), ("", False),
                                                ("1", True)])
def test_paths_are_the_untracked_folder_unless_a_refresh_is_asked(folders, monkeypatch,
                                                                 setting, refreshed):
    if setting is not None:
        monkeypatch.setenv(harness.REFRESH_ENV, setting)
    json_dir, plot_dir = ((folders.results, folders.docs) if refreshed
                          else (folders.latest, folders.latest))
    assert harness.results_path("bench", quick=False) == json_dir / "bench.json"
    assert harness.results_path("bench", quick=True) == json_dir / "bench.quick.json"
    args = harness.settle(argparse.Namespace(quick=False, data=None, out=None, plot=None),
                          "bench", data="imagenet_like", plot="bench.png")
    assert (args.out, args.plot) == (json_dir / "bench.json", plot_dir / "bench.png")
    assert args.data == harness.DATA_DIR / "imagenet_like"   # data is shared either way


def test_a_quick_run_writes_under_latest_and_over_the_committed_only_when_asked(
        folders, monkeypatch):
    op_costs.main(["--quick"])
    assert files_under(folders.results) == ["latest/op_costs.quick.json"]
    monkeypatch.setenv(harness.REFRESH_ENV, "1")
    op_costs.main(["--quick"])
    assert files_under(folders.results) == ["latest/op_costs.quick.json", "op_costs.quick.json"]
    assert not folders.docs.exists()


def test_another_benchmarks_json_is_the_runs_else_the_committed_with_a_note(folders, capsys):
    folders.latest.mkdir(parents=True)
    for name in VIABILITY_INPUTS:
        shutil.copy(COMMITTED / f"{name}.json", folders.results)
    ran = json.loads((COMMITTED / "op_costs.json").read_text())
    (folders.latest / "op_costs.json").write_text(json.dumps({**ran, "date": "this run"}))
    committed_before = files_under(folders.results)

    table = viability.main(["--plot", str(folders.latest / "viability.png")])
    assert table["sources"]["op_costs"] == "this run"
    committed_dates = {name: json.loads((COMMITTED / f"{name}.json").read_text())["date"]
                       for name in ("imagenet_pipeline", "dpu_projection", "decode_projection")}
    assert {name: table["sources"][name] for name in committed_dates} == committed_dates
    printed = capsys.readouterr().out
    for name in VIABILITY_INPUTS:
        note = (f"note: no {folders.latest / f'{name}.json'} from this run: reading the "
                f"committed {folders.results / f'{name}.json'}")
        assert (note in printed) == (name != "op_costs"), name
    written = set(files_under(folders.results)) - set(committed_before)
    assert {"latest/viability.json", "latest/viability.md"} <= written
    assert all(path.startswith("latest/") for path in written) and not folders.docs.exists()
    assert json.loads((folders.latest / "viability.json").read_text()) == table


def test_make_bench_refresh_reaches_every_benchmark(folders, monkeypatch):
    monkeypatch.setenv(harness.REFRESH_ENV, "0")   # not refreshing; --refresh's setting undone
    seen = {}
    for name, module in vars(job).items():
        if isinstance(module, types.ModuleType) and hasattr(module, "main"):
            monkeypatch.setattr(module, "main", lambda argv, name=name: seen.update(
                {name: (harness.run_dir(), harness.plots_dir(), argv)}))
    job.main([])
    assert {"loader_overhead", "naive_sweep", "viability", "plot"} <= set(seen)
    assert all(where == (folders.latest, folders.latest, []) for where in seen.values())
    seen.clear()
    job.main(["--refresh", "--quick"])
    assert "viability" in seen and "plot" not in seen   # --quick draws nothing
    assert all(where == (folders.results, folders.docs, ["--quick"]) for where in seen.values())
