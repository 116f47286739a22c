"""benchmarks/harness.py's output helpers: a warning shown once per run, not once per loader,
and a constructor's chatter on standard output dropped while its result and errors pass; and
the end of a benchmark's main that the benchmarks share (settle, run_benchmark)."""
import argparse
import json
import warnings

import pytest

from benchmarks import harness


def warn_from_two_places(message: str) -> None:
    warnings.warn(message, UserWarning)
    warnings.warn(message, UserWarning)


def test_a_repeated_user_warning_is_shown_once_and_others_still_show():
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()  # Python's default: once per call site
        with harness.warnings_once():
            for _ in range(3):
                warn_from_two_places("pimloader: the DPU kernel does not pad")
            warn_from_two_places("another")
    assert [str(w.message) for w in caught] == ["pimloader: the DPU kernel does not pad",
                                                "another"]


def chatty(value):
    print("loading annotations into memory...")
    if value is None:
        raise ValueError("no value")
    return value * 2


def test_silenced_drops_prints_and_keeps_the_result_and_the_error(capsys):
    assert harness.silenced(chatty, 21) == 42
    with pytest.raises(ValueError, match="no value"):
        harness.silenced(chatty, None)
    assert capsys.readouterr().out == ""
    print("after")
    assert capsys.readouterr().out == "after\n"


def test_filters_set_before_still_apply():
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", message="pimloader: the DPU kernel")
        with harness.warnings_once():
            warn_from_two_places("pimloader: the DPU kernel does not pad")
        warnings.simplefilter("error")
        with harness.warnings_once(), pytest.raises(UserWarning, match="another"):
            warn_from_two_places("another")
    assert caught == []


def test_settle_fills_what_the_flags_leave_to_quick(monkeypatch):
    monkeypatch.delenv(harness.REFRESH_ENV, raising=False)   # results/latest/: not refreshing
    plain = harness.settle(argparse.Namespace(quick=False, count=500, data=None, out=None, plot=None),
                           "bench", {"count": 40}, data="imagenet_like", plot="bench.png")
    assert plain.count == 500 and plain.data == harness.DATA_DIR / "imagenet_like"
    assert plain.out == harness.LATEST_DIR / "bench.json"
    assert plain.plot == harness.LATEST_DIR / "bench.png"
    quick = harness.settle(argparse.Namespace(quick=True, count=500, data=None, out=None, plot=None),
                           "bench", {"count": 40}, data="imagenet_like", plot="bench.png")
    assert quick.count == 40 and quick.data == harness.DATA_DIR / "imagenet_like_quick"
    assert quick.out == harness.LATEST_DIR / "bench.quick.json" and quick.plot is None
    given = harness.settle(argparse.Namespace(quick=True, data="d", out="o.json", plot="p.png"),
                           "bench", data="imagenet_like", plot="bench.png")
    assert (given.data, given.out, given.plot) == ("d", "o.json", "p.png")


def test_run_benchmark_runs_reports_writes_and_plots_in_that_order(tmp_path, capsys):
    done = []
    args = argparse.Namespace(out=tmp_path / "sub" / "r.json", plot=None)
    results = harness.run_benchmark(args, lambda a: {"ran": a is args},
                                    lambda r: done.append(("report", r)),
                                    lambda r, path: done.append(("plot", path)))
    assert results == {"ran": True} and done == [("report", results)]   # no --plot: no plot
    assert json.loads(args.out.read_text()) == results
    assert capsys.readouterr().out == f"results written to {args.out}\n"
    args.plot = tmp_path / "p.png"
    harness.run_benchmark(args, lambda a: {"value": 0.5}, plot=lambda r, path: done.append(("plot", path)),
                          out=tmp_path / "elsewhere.json", default=str)
    assert done[-1] == ("plot", args.plot) and (tmp_path / "elsewhere.json").exists()
