"""The task benchmarks' plots (benchmarks/plot_tasks.py) drawn from small results in the
layouts benchmarks/detection.py and audio.py write: a PNG per benchmark, one group per
pipeline and workers, and a clear line instead of a plot when a JSON is missing. Skipped
where matplotlib (requirements-bench.txt) is not installed."""
import json

import pytest

from benchmarks import plot_tasks

pytest.importorskip("matplotlib")
PNG = b"\x89PNG\r\n\x1a\n"


def detection_results(with_environment: bool) -> dict:
    groups = [{"pipeline": pipeline, "workers": workers,
               "images_per_s": {"torchvision": 20.0 + workers, "pimloader": 45.0,
                                **({"pim emulator*": 9.0} if workers == 0 else {}),
                                "DALI": 30.0},
               "kernel_fraction": {"pimloader": 1.0}}
              for pipeline in ("faster-rcnn", "ssd") for workers in (0, 2)]
    results = {"settings": {"count": 16, "epochs": 1, "warmup": 0, "batch_size": 8},
               "groups": groups, "stages": {}}
    if with_environment:
        results["environment"] = {"cpus": 2, "machine": "x86_64", "loadavg_before": [4.0, 4, 4],
                                  "loadavg_after": [5.0, 5, 5], "wall_s": 30.0,
                                  "date": "2026-12-01T20:00:00Z"}
    return results


def audio_results() -> dict:
    def entry(rate, base):
        return {"median_clips_s": rate, "epoch_s": [1.0], "cpu_ms_per_clip": 1.0,
                "ratio": rate / base}
    rows = [{"workers": workers, "clips": 160,
             "contenders": {"torch + torchaudio": entry(300.0, 300.0),
                            "pimloader": entry(900.0, 300.0), "DALI": entry(450.0, 300.0)}}
            for workers in (0, 2)]
    return {"benchmark": "audio", "date": "2026-12-01 20:00:00 UTC",
            "machine": {"cpus": 2, "platform": "Linux", "load_average_1m": 4.5},
            "route": "fused kernel", "batch_size": 16, "rows": rows}


def test_groups_carry_each_contenders_rate_and_its_ratio_to_the_baseline():
    groups = plot_tasks.detection_groups(detection_results(False))
    assert [label for label, _ in groups] == ["faster-rcnn\n0 workers", "faster-rcnn\n2 workers",
                                              "ssd\n0 workers", "ssd\n2 workers"]
    assert groups[1][1]["pimloader"] == (45.0, 45.0 / 22.0)
    assert "pim emulator*" not in groups[1][1]
    assert plot_tasks.audio_groups(audio_results())[0][1]["pimloader"] == (900.0, 3.0)


@pytest.mark.parametrize("with_environment", [True, False])
def test_plots_are_written_from_the_json(tmp_path, with_environment, capsys):
    (tmp_path / "detection.json").write_text(json.dumps(detection_results(with_environment)))
    (tmp_path / "audio.json").write_text(json.dumps(audio_results()))
    plot_tasks.main(["--detection", str(tmp_path / "detection.json"),
                     "--audio", str(tmp_path / "audio.json"), "--out-dir", str(tmp_path / "docs")])
    for name in ("detection.png", "audio.png"):
        assert (tmp_path / "docs" / name).read_bytes()[:8] == PNG
    assert capsys.readouterr().out.count("wrote ") == 2


def test_a_missing_json_is_named_and_nothing_is_drawn(tmp_path, capsys):
    plot_tasks.main(["--detection", str(tmp_path / "none.json"),
                     "--audio", str(tmp_path / "none.json"), "--out-dir", str(tmp_path)])
    assert capsys.readouterr().out.count("none.json is missing") == 2
    assert not list(tmp_path.glob("*.png"))
