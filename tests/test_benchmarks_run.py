"""The main job's benchmarks run end to end (tiny settings), and say what they measured.

Not a speed test: nothing here asserts a figure. It keeps `make bench` (the README's first
command) from breaking silently, since CI runs only the tests: each benchmark's `--quick`
run must finish, write its JSON and report both loaders, with pimloader present."""
import importlib.util
import json
import shutil

import pytest

from benchmarks import (audio, audio_dpu_projection, audio_fixed_point, coordinated_prep,
                        decode_projection, detection, detection_projection, dpu_projection,
                        imagenet_pipeline, instruction_counts, kernel_speed, loader_overhead,
                        sample_cache)

pytestmark = pytest.mark.timeout(300)


def test_loader_overhead_quick(tmp_path):
    out = tmp_path / "loader.json"
    loader_overhead.main(["--quick", "--out", str(out)])
    results = json.loads(out.read_text())
    assert all("pimloader" in row and row["ratio"] > 0 for row in results["rows"])
    assert all("cpu" in row and "emulator" in row for row in results["transform"]["rows"])


def test_imagenet_pipeline_quick(tmp_path):
    out = tmp_path / "imagenet.json"
    imagenet_pipeline.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data")])
    results = json.loads(out.read_text())
    contenders = {name for row in results["rows"] for name in row["contenders"]}
    assert {"torchvision", "pimloader", imagenet_pipeline.EMULATOR} <= contenders
    assert results["breakdown"]


def test_kernel_speed_quick(tmp_path):
    out = tmp_path / "kernel.json"
    kernel_speed.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text())["fraction_identical_float32"] == 1.0


def test_dpu_projection_quick(tmp_path):
    out = tmp_path / "projection.json"
    dpu_projection.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data")])
    assert json.loads(out.read_text())


def test_decode_projection_quick(tmp_path):
    out = tmp_path / "decode.json"
    decode_projection.main(["--quick", "--no-count", "--out", str(out), "--data", str(tmp_path / "data")])
    results = json.loads(out.read_text())
    assert results["label"] == "PROJECTED" and results["counted"] is None
    assert [(e["pipeline"], e["dtype"]) for e in results["pipelines"]] == list(dpu_projection.PIPELINES)
    seekable = results["fallbacks"]["seekable"]   # make_seekable rewrites the progressive file
    assert seekable["not a JPEG"] == 1 and "progressive" not in seekable and seekable["dpu grey"] >= 1
    assert results["fallbacks"]["plain"]["progressive"] == 1


def plot_flags(tmp_path) -> list[str]:
    """--plot into tmp_path where matplotlib (requirements-bench.txt) is installed."""
    return ["--plot", str(tmp_path / "plot.png")] if importlib.util.find_spec("matplotlib") else []


def assert_png_if_plotted(tmp_path) -> None:
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sample_cache_quick(tmp_path):
    out = tmp_path / "cache.json"
    sample_cache.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data"),
                       *plot_flags(tmp_path)])
    results = json.loads(out.read_text())
    assert len(results["rows"]) == 3 and "dontneed_effective" in results["dontneed_probe"]
    minio = [row for name, row in results["rows"].items() if name.startswith("MinIO")]
    assert 0 < minio[0]["hit_rate"] < 1
    assert_png_if_plotted(tmp_path)


def test_coordinated_prep_quick(tmp_path):
    out = tmp_path / "coordinated.json"
    coordinated_prep.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data"),
                           *plot_flags(tmp_path)])
    rows = json.loads(out.read_text())["rows"]
    assert [(row["jobs"], row["shared"]) for row in rows] == [(2, False), (2, True)]
    assert [row["preparing_jobs"] for row in rows] == [2, 1]  # shared: one job prepares
    assert all(row["images"] == 2 * 48 and row["img_per_s"] > 0 for row in rows)
    assert_png_if_plotted(tmp_path)


@pytest.mark.skipif(shutil.which("riscv64-unknown-elf-gcc") is None, reason="no riscv64-unknown-elf-gcc")
def test_instruction_counts_quick(tmp_path):
    out = tmp_path / "counts.json"
    results = instruction_counts.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data")])
    saved = json.loads(out.read_text())
    assert [(e["pipeline"], e["dtype"]) for e in saved["pipelines"]] == list(dpu_projection.PIPELINES)
    for entry in results["pipelines"]:  # the model, with the counted units, reproduces the count
        assert entry["per_image_model"]["nominal"] == pytest.approx(entry["per_image_counted"]["nominal"], rel=0.15)
    assert all(size["instructions"] < saved["iram_instructions"] for size in saved["static_size"].values())


def test_audio_fixed_point_quick(tmp_path):
    out = tmp_path / "audio.json"
    audio_fixed_point.main(["--quick", "--out", str(out)])
    results = json.loads(out.read_text())["results"]
    kinds = next(iter(results.values()))
    assert {"white noise", "chirp"} <= set(kinds)
    assert all(0 <= row["all"]["mean"] <= row["all"]["max"] for row in kinds.values())


def test_audio_dpu_projection_quick(tmp_path):
    out = tmp_path / "audio_projection.json"
    audio_dpu_projection.main(["--quick", "--out", str(out)])
    rows = next(iter(json.loads(out.read_text())["results"].values()))["projections"]
    assert {row["case"] for row in rows} == {"best", "nominal", "worst"}
    assert all(row["clips_per_s"] > 0 for row in rows)



# the emulator contender routes the SSD samples that pad or adjust colours to the CPU kernel,
# which pimloader warns about once per loader (asserted in test_colour_pad.py)
@pytest.mark.filterwarnings("ignore:pimloader. the DPU kernel does not")
def test_detection_quick(tmp_path, capsys):
    out = tmp_path / "detection.json"
    report = detection.main(["--quick", "--out", str(out), "--root", str(tmp_path / "coco"),
                             *plot_flags(tmp_path)])
    saved = json.loads(out.read_text())
    assert {g["pipeline"] for g in saved["groups"]} == set(detection.PIPELINES)
    assert all({"torchvision", "pimloader"} <= set(g["images_per_s"]) for g in report["groups"])
    assert_png_if_plotted(tmp_path)
    assert "loading annotations" not in capsys.readouterr().out  # pycocotools' chatter dropped


def test_detection_projection_quick(tmp_path):
    out = tmp_path / "detection_projection.json"
    detection_projection.main(["--quick", "--out", str(out), "--root", str(tmp_path / "coco")])
    saved = json.loads(out.read_text())
    assert saved["label"] == "PROJECTED" and saved["assumptions"]
    entries = {entry["pipeline"]: entry for entry in saved["pipelines"]}
    assert set(entries) == set(detection_projection.PIPELINES)
    assert entries["faster-rcnn"]["padded_share"] == 0   # no zoom-out: every image on DPUs
    assert sum(launch["share"] for launch in entries["faster-rcnn"]["launches"]) == \
        pytest.approx(1.0)
    assert all(p["images_per_s"] > 0 for e in entries.values() for p in e["projections"])


@pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("sox") is None,
                    reason="the speech dataset needs espeak-ng and sox")
def test_audio_quick(tmp_path):
    out = tmp_path / "audio.json"
    audio.main(["--quick", "--out", str(out), "--root", str(tmp_path / "speech"),
                *plot_flags(tmp_path)])
    saved = json.loads(out.read_text())
    assert saved["rows"] and saved["ms_per_clip_by_stage"]
    assert_png_if_plotted(tmp_path)


def test_shards_quick(tmp_path):
    """Every contender over shards (local, their seekable copy, nginx or http.server) and
    the Arrow table (and its seekable copy) reads the whole set each epoch; the seekable
    runs' contenders are those of the plain ones but the twins without seek indexes (which
    change nothing where every JPEG has restart markers), over shards and cells whose JPEGs
    all have restart markers."""
    pytest.importorskip("webdataset")
    datasets = pytest.importorskip("datasets")
    from benchmarks import shards
    from pimloader import TarShards
    from pimloader.decode import is_jpeg, seek_info
    out = tmp_path / "shards.json"
    shards.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data")])
    results = json.loads(out.read_text())
    runs = results["runs"]
    assert set(runs) == {"local", "local seekable", "http", "http seekable", "arrow",
                         "arrow seekable"}
    for storage in ("local", "http", "arrow"):
        plain = [row["contender"] for row in runs[storage]["rows"]]
        assert [row["contender"] for row in runs[f"{storage} seekable"]["rows"]] == \
            [name for name in plain if name not in shards.UNINDEXED]
        assert sum(name in shards.UNINDEXED for name in plain) == 1
    copy = TarShards(sorted(map(str, (tmp_path / "data" / "shards-seekable").glob("*.tar"))))
    images = [copy[index][0] for index in range(len(copy))]
    assert len(images) == results["count"]
    assert all(seek_info(data) is not None for data in images if is_jpeg(data))
    table = datasets.load_from_disk(str(tmp_path / "data" / "arrow-seekable"))
    cells = [cell["bytes"] for cell in table.cast_column("image", datasets.Image(decode=False))["image"]]
    assert len(cells) == results["count"]
    assert all(seek_info(data) is not None for data in cells if is_jpeg(data))
    for run in runs.values():
        names = {row["contender"] for row in run["rows"]}
        assert any(name.startswith("pimloader") for name in names)
        assert all(row["samples"] == results["count"] for row in run["rows"])


def _first_draws(count: int, nodes: int, epochs: int) -> list[int]:
    """Per epoch, the samples some node draws for the first time (DistributedSampler, seed 0):
    what a per-node cache that holds the whole set reads from storage."""
    from torch.utils.data.distributed import DistributedSampler
    seen = [set() for _ in range(nodes)]
    firsts = []
    for epoch in range(epochs):
        first = 0
        for node in range(nodes):
            sampler = DistributedSampler(range(count), num_replicas=nodes, rank=node, seed=0)
            sampler.set_epoch(epoch)
            drawn = set(sampler)
            first += len(drawn - seen[node])
            seen[node] |= drawn
        firsts.append(first)
    return firsts


def test_cluster_cache_quick(tmp_path):
    """Storage reads add up: the set once in epoch 0 whatever the cache; every epoch without
    one; after it, what a node had not drawn before with a per-node cache that holds the
    set, and nothing with the partitioned cache whose budgets hold it (0.5x); the projection
    reads the measurement and agrees with it there."""
    from benchmarks import cluster_cache, cluster_cache_projection
    out = tmp_path / "cluster.json"
    cluster_cache.main(["--quick", "--out", str(out), "--data", str(tmp_path / "data")])
    results = json.loads(out.read_text())
    count, size = results["count"], results["dataset_bytes"]
    rows = results["jobs"]["2"]["rows"]
    assert {row["contender"] for row in rows} == set(cluster_cache.CONTENDERS)
    for row in rows:
        assert row["samples"] == count
        if row["epoch"] == 0 or row["contender"] == cluster_cache.NO_CACHE:
            assert (row["storage_reads"], row["storage_bytes"]) == (count, size), row
    firsts = _first_draws(count, 2, results["epochs"])
    for row in rows:
        if row["ratio"] == 0.5 and row["contender"] == cluster_cache.PER_NODE:
            assert row["storage_reads"] == firsts[row["epoch"]], row
        if row["ratio"] == 0.5 and row["contender"] == cluster_cache.PARTITIONED:
            assert row["exchanged"] > 0 and row["exchanged_bytes"] > 0
            if row["epoch"] > 0:
                assert (row["storage_reads"], row["storage_bytes"]) == (0, 0), row
    projected = tmp_path / "projection.json"
    cluster_cache_projection.main(["--quick", "--measured", str(out), "--out", str(projected)])
    projection = json.loads(projected.read_text())
    assert projection["label"] == "PROJECTION" and projection["rows"]
    assert all(check["model"] == check["measured"] == 0 for check in projection["checks"]
               if check["ratio"] == 0.5 and check["contender"] == cluster_cache.PARTITIONED)
