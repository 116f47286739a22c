"""benchmarks/peers.py: the peer contenders (DALI, FFCV) run on a tiny dataset where they are
installed, and are reported as missing, without stopping the run, where they are not.

Not a speed test: nothing here asserts a figure. `make test` does not install the peers
(`make bench` does), so their tests are skipped there, with the reason. Where a peer runs,
its validation pipeline is checked against torchvision's (the oracle): the same images in
the same order, within what different resizers and JPEG decoders give."""
import importlib.util
import io
import json
import math

import pytest
import torch
from torchvision.datasets import ImageFolder

from benchmarks import peer_dali, peer_ffcv, peers
from benchmarks.calls import Call, Name
from benchmarks.make_dataset import make_imagenet_like
from benchmarks.pipelines import make_transform, tensor_loader

pytestmark = pytest.mark.timeout(300)
TINY = ["--count", "24", "--classes", "3", "--batch-size", "8", "--epochs", "2",
        "--warmup", "1"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("peers") / "photos", count=24, classes=3)


def run_peers(photos, tmp_path, contenders):
    out = tmp_path / "peers.json"
    peers.main([*TINY, "--data", str(photos), "--out", str(out), "--plot",
                str(tmp_path / "peers.png"), "--contenders", *contenders])
    return json.loads(out.read_text())


def torchvision_validation(photos):
    dataset = ImageFolder(photos, make_transform("val", "float32"), loader=tensor_loader)
    return (torch.stack([image for image, _ in dataset]), torch.tensor(dataset.targets))


def every_batch(loader):
    images, labels = zip(*((x.clone(), y.to(torch.int64)) for x, y in loader))
    return torch.cat(images), torch.cat(labels)


def assert_close_to_torchvision(images, labels, photos):
    expected, expected_labels = torchvision_validation(photos)
    assert torch.equal(labels, expected_labels)
    per_image = (images - expected).abs().mean(dim=(1, 2, 3))
    # Another resizer and decoder (and for FFCV a re-encoded JPEG) move a normalised value by
    # about 0.05 on average; one image shifted, or the training crop, moves it by over 0.6.
    assert per_image.mean() < 0.15 and per_image.max() < 0.4, per_image


def test_a_missing_peer_is_reported_and_the_run_goes_on(photos, tmp_path, monkeypatch,
                                                        capsys):
    monkeypatch.setattr(peer_dali, "missing", lambda: "not installed: (this test)")
    monkeypatch.setattr(peer_ffcv, "missing", lambda: "not installed: (this test too)")
    results = run_peers(photos, tmp_path, ["DALI", "FFCV"])
    assert results["missing"] == {"DALI": "not installed: (this test)",
                                  "FFCV": "not installed: (this test too)"}
    assert [list(row["contenders"]) for row in results["rows"]] == [["torchvision"]] * 2
    printed = capsys.readouterr().out
    assert "DALI: not installed: (this test)" in printed
    assert "torch.utils.data.DataLoader(torchvision.datasets.ImageFolder" in printed
    if importlib.util.find_spec("matplotlib") is None:  # not in requirements-dev.txt
        assert "no plot" in printed
    else:
        assert (tmp_path / "peers.png").stat().st_size > 0


def test_a_call_runs_and_prints_the_same_thing():
    call = Call("math.hypot", 3.0, Call("math.sqrt", 16))
    assert call.run({"math": math}) == 5.0
    assert call.text() == "math.hypot(3.0, math.sqrt(16))"
    assert call.text(extra="{...}") == "math.hypot(3.0, math.sqrt(16), extra={...})"
    assert Call("str.join", ", ", ["a"]).text() == "str.join(', ', ['a'])"
    with pytest.raises(NameError, match="'np' is not in the namespace"):
        Name("np.float32").resolve({"math": math})


@pytest.mark.skipif(peer_dali.missing() is not None, reason=f"DALI {peer_dali.missing()}")
def test_dali_runs_both_pipelines_and_validates_like_torchvision(photos, tmp_path):
    results = run_peers(photos, tmp_path, ["DALI"])
    for row in results["rows"]:
        assert row["contenders"]["DALI"]["ratio"] > 0
    train = results["rows"][0]["contenders"]["DALI"]["pipeline_text"]
    assert "fn.decoders.image_random_crop(device='cpu'" in train and "device_id=None" in train
    loader = peer_dali.DaliLoader(photos, "val", batch_size=8, threads=2, seed=0,
                                  shuffle=False)
    try:
        assert_close_to_torchvision(*every_batch(loader), photos)
        assert_close_to_torchvision(*every_batch(loader), photos)  # a second epoch, the same
    finally:
        loader.close()


@pytest.mark.skipif(peer_ffcv.missing() is not None, reason=f"FFCV {peer_ffcv.missing()}")
def test_ffcv_runs_both_pipelines_from_a_cached_beton(photos, tmp_path):
    results = run_peers(photos, tmp_path, ["FFCV"])
    for row in results["rows"]:
        assert row["contenders"]["FFCV"]["ratio"] > 0
    beton = results["prepared"]["FFCV"]["path"]
    assert beton.startswith(str(photos.parent / "ffcv"))
    assert peer_ffcv.ensure_beton(photos, photos.parent / "ffcv", 2) == (
        peer_ffcv.beton_path(photos, photos.parent / "ffcv"), None)  # written once
    loader = peer_ffcv.FfcvLoader(beton, "val", batch_size=8, workers=2, seed=0,
                                  shuffle=False)
    try:
        assert_close_to_torchvision(*every_batch(loader), photos)
    finally:
        loader.close()


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bars_show_on_a_terminal_only_and_yield_to_tqdm_disable(monkeypatch):
    from benchmarks import progress
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress.sys, "stderr", io.StringIO())  # not a terminal: no bar
    assert isinstance(progress.bar(range(3)), progress.Silent)
    assert list(progress.bar(range(3))) == [0, 1, 2]
    terminal = Terminal()
    monkeypatch.setattr(progress.sys, "stderr", terminal)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert isinstance(progress.bar(range(3)), progress.Silent)
    monkeypatch.setenv("TQDM_DISABLE", "0")
    report, close = progress.reporter("copying", unit="file")
    for done in range(1, 4):
        report(done, 3)
    close()
    if importlib.util.find_spec("tqdm") is None:  # not in requirements-dev.txt: no bar
        assert terminal.getvalue() == ""
    else:
        assert "copying:" in terminal.getvalue()  # drawn (tqdm throttles the updates)
