"""DALI's CPU detection and audio pipelines (benchmarks/peer_dali_detection.py,
peer_dali_audio.py), the contenders of benchmarks/detection.py and audio.py, on tiny sets.

`make test` does not install DALI (`make bench` does): the tests that run it are skipped
there, with the reason. Not speed tests. DALI draws its own random numbers, so its outputs
are checked for what must hold whatever the draws (shapes, boxes inside the image, every
image or clip once an epoch, labels), and against the oracles where no draw is involved:
torchvision's boxes and labels under a flip-only pipeline, torchaudio's features on the
same waveform."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import soundfile
import torch
from torchvision.transforms import v2

from _coco import make_coco, torchvision_coco
from benchmarks import audio, detection, peer_dali, peer_dali_audio, peer_dali_detection
from benchmarks.calls import Call, Let, Name, run_program
from pimloader import transforms as T
from pimloader.datasets import AudioFolder

pytestmark = pytest.mark.timeout(300)
needs_dali = pytest.mark.skipif(peer_dali.missing() is not None,
                                reason=f"DALI {peer_dali.missing()}")
RATE = 16000


def test_a_pipeline_written_as_lines_runs_and_prints_as_python():
    lines = (Let("a, b", Call("divmod", 17, 5)), Let("c", Call("math.hypot", Name("a"), 4.0)))
    assert run_program(lines, {"divmod": divmod, "math": math})["c"] == 5.0
    assert [line.text() for line in lines] == ["a, b = divmod(17, 5)",
                                               "c = math.hypot(a, 4.0)"]
    with pytest.raises(ValueError, match="2 outputs for 3 names"):
        Let("a, b, c", Call("divmod", 17, 5)).run({"divmod": divmod})


def test_dali_has_a_version_of_every_detection_pipeline():
    assert {peer_dali_detection.PIPELINE_OF_MAKER[make.__name__]
            for make in detection.PIPELINES.values()} == set(peer_dali_detection.PIPELINES)


def test_dali_keyword_settings_are_the_audio_benchmarks():
    steps = audio.keyword_transform([torch.ones(RATE)], T).transforms
    crop, shift, gain, noise, _mel, to_db, freq, time = steps
    settings = peer_dali_audio.KEYWORD
    assert (settings["length"], settings["max_shift"]) == (crop.length, shift.max_shift)
    assert (settings["gain_db"], settings["gain_p"]) == ((gain.min_gain_db, gain.max_gain_db),
                                                         gain.p)
    assert (settings["snr_db"], settings["noise_p"]) == (noise.snr, noise.p)
    assert (settings["top_db"], settings["freq_mask"], settings["time_mask"]) == (
        to_db.top_db, freq.mask_param, time.mask_param)
    assert (shift.p, crop.pad_position) == (1.0, "random")


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return make_coco(tmp_path_factory.mktemp("dali_coco"), count=6, empty=1)


def epochs(loader, count=2):
    return [[sample for images, targets in loader for sample in zip(images, targets)]
            for _ in range(count)]


@needs_dali
@pytest.mark.parametrize("pipeline", ["ssd", "ssd-geometry"])
def test_dali_ssd_gives_each_image_once_with_sane_boxes(coco, pipeline):
    root, ann_file = coco
    categories = {label for _, target in torchvision_coco(root, ann_file)
                  for label in target.get("labels", torch.zeros(0)).tolist()}
    batch_size = 3 if pipeline == "ssd" else 8  # 8: the whole epoch in one batch
    loader = peer_dali_detection.DaliDetectionLoader(root, ann_file, pipeline, batch_size,
                                                     threads=2, seed=1)
    for samples in epochs(loader):
        assert sorted(target["image_id"] for _, target in samples) == list(range(1, 8))
        for image, target in samples:
            boxes = target["boxes"]
            assert image.shape == (3, 300, 300) and image.dtype == torch.float32
            assert boxes.shape == (len(target["labels"]), 4) and boxes.canvas_size == (300, 300)
            assert bool((boxes >= 0).all() and (boxes <= 300).all())
            assert bool((boxes[:, 2:] - boxes[:, :2] >= 1).all())  # sanitized
            assert set(target["labels"].tolist()) <= categories
    loader.close()


def orientation(got, expected, width):
    """'kept' or 'mirrored': which of `expected` or its mirror `got` equals."""
    mirrored = expected[:, [2, 1, 0, 3]] * torch.tensor([-1, 1, -1, 1]) + torch.tensor(
        [width, 0, width, 0])
    for name, want in (("kept", expected), ("mirrored", mirrored)):
        if torch.allclose(got, want, atol=1e-3 * width):
            return name
    raise AssertionError(f"boxes {got} are neither {expected} nor its mirror")


def closer_image(got, original):
    """'kept' or 'mirrored': which of torchvision's resize of `original` to `got`'s size,
    or its mirror, `got` is closer to."""
    resized = v2.functional.resize(original, list(got.shape[-2:]), antialias=True)
    reference = v2.functional.normalize(resized.float() / 255, detection.MEAN, detection.STD)
    errors = {name: float((got - image).abs().mean()) for name, image in
              (("kept", reference), ("mirrored", reference.flip(-1)))}
    return min(errors, key=errors.get), errors


@needs_dali
def test_dali_faster_rcnn_flips_boxes_with_the_image_and_keeps_every_label(coco):
    root, ann_file = coco
    oracle = torchvision_coco(root, ann_file, transforms=v2.ToImage())
    resize = v2.Resize(800, max_size=1333)
    loader = peer_dali_detection.DaliDetectionLoader(root, ann_file, "faster-rcnn",
                                                     batch_size=3, threads=2, seed=2)
    orientations = Counter()
    for image, target in epochs(loader, 1)[0]:
        original, expected = oracle[target["image_id"] - 1]
        height, width = original.shape[-2:]
        want_height, want_width = resize(original).shape[-2:]
        assert abs(image.shape[1] - want_height) <= 1 and abs(image.shape[2] - want_width) <= 1
        image_way, errors = closer_image(image, original)
        assert min(errors.values()) < 0.1 < max(errors.values()), errors
        orientations[image_way] += 1
        if "labels" not in expected:  # the image without annotations
            assert len(target["labels"]) == 0
            continue
        assert torch.equal(target["labels"], expected["labels"])
        scale = torch.tensor([image.shape[2] / width, image.shape[1] / height] * 2)
        assert orientation(target["boxes"], expected["boxes"] * scale, image.shape[2]) == \
            image_way
    assert sum(orientations.values()) == 7
    loader.close()


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """Two words of clips at 16, 8 and 44.1 kHz, mono and stereo, shorter and longer than 1
    s, one silent; two noise files."""
    root = tmp_path_factory.mktemp("dali_speech")
    rng = np.random.default_rng(0)
    clips = {"go/a.wav": (RATE, 1, 12000), "go/b.flac": (8000, 1, 9000),
             "go/c.wav": (44100, 2, 60000), "stop/d.wav": (RATE, 1, 24000),
             "stop/e.wav": (RATE, 2, 3000), "stop/silent.wav": (RATE, 1, 16000)}
    for name, (rate, channels, frames) in clips.items():
        (root / name).parent.mkdir(exist_ok=True)
        tone = 0.4 * np.sin(2 * np.pi * 330 * np.arange(frames) / rate)
        wave = 0 * tone if "silent" in name else tone + rng.uniform(-0.05, 0.05, frames)
        soundfile.write(root / name, np.repeat(wave[:, None], channels, 1), rate)
    (root / "_background_noise_").mkdir()
    for index in range(2):
        soundfile.write(root / "_background_noise_" / f"n{index}.wav",
                        rng.uniform(-0.3, 0.3, 3 * RATE), RATE)
    return AudioFolder(root, sample_rate=RATE, downmix=True)


@needs_dali
def test_dali_keyword_pipeline_gives_each_clip_once_as_bounded_features(speech):
    loader = peer_dali_audio.DaliAudioLoader(speech.samples, speech.noise_files(), audio.MEL,
                                             batch_size=4, threads=2, seed=3)
    frames = RATE // audio.MEL["hop_length"] + 1
    for _ in range(2):
        features, labels = (torch.cat(part) for part in zip(*loader))
        assert features.shape == (6, 1, audio.MEL["n_mels"], frames)
        assert sorted(labels.tolist()) == sorted(label for _, label in speech.samples)
        assert bool(torch.isfinite(features).all())
        for clip in features:
            kept = clip[clip != 0]  # the masks write 0 dB
            assert float(kept.max() - kept.min()) <= 80.0 + 1e-3  # top_db
    loader.close()


def dali_features(waveforms: list) -> np.ndarray:
    """The DALI pipeline's spectral lines alone, on the given waveforms."""
    from nvidia.dali import Pipeline, fn, types

    from benchmarks import dali_draws
    lines = [line for line in peer_dali_audio.program(audio.MEL)
             if line.targets == ("features",)][:4]  # spectrogram, mel, dB, top_db
    pipe = Pipeline(batch_size=len(waveforms), num_threads=1, device_id=None, seed=0)
    with pipe:
        namespace = {"fn": fn, "types": types, "top_db": dali_draws.top_db,
                     "hann_window": torch.hann_window(audio.MEL["n_fft"]).tolist(),
                     "audio": fn.external_source(source=lambda: waveforms, batch=True,
                                                 layout="t")}
        pipe.set_outputs(run_program(lines, namespace)["features"])
    pipe.build()
    (out,) = pipe.run()
    return np.stack([np.array(sample) for sample in out])


@needs_dali
def test_dali_spectral_steps_agree_with_torchaudio_within_60_db_of_the_peak():
    torchaudio_transforms = pytest.importorskip("torchaudio.transforms")
    rng = np.random.default_rng(4)
    t = np.arange(RATE) / RATE
    waves = [(0.3 * np.sin(2 * np.pi * f * t) + rng.normal(0, 0.02, RATE)).astype(np.float32)
             for f in (220, 1000, 3100)]
    got = dali_features(waves)
    want = torchaudio_transforms.AmplitudeToDB(top_db=80.0)(
        torchaudio_transforms.MelSpectrogram(**audio.MEL)(torch.from_numpy(np.stack(waves))))
    want = want.numpy()
    assert got.shape == want.shape
    near_peak = want > want.max(axis=(1, 2), keepdims=True) - 60
    assert np.abs(got - want)[near_peak].max() < 0.01


def test_a_missing_dali_is_skipped_with_a_printed_line(monkeypatch, capsys):
    monkeypatch.setattr(peer_dali, "missing", lambda: "not installed: (this test)")
    monkeypatch.setattr(peer_dali_detection, "_announced", set())
    assert peer_dali_detection.contenders(detection.ssd) == []
    assert peer_dali_audio.contender(None, 2, 8, audio.MEL) == {}
    assert capsys.readouterr().out == "  DALI: skipped, not installed: (this test)\n" * 2


@needs_dali
def test_dali_window_and_time_shift_draw_every_legal_offset_and_only_those():
    from nvidia.dali import Pipeline, fn

    from benchmarks import dali_draws
    clips = [np.arange(1, 6, dtype=np.float32), np.arange(1, 10, dtype=np.float32)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=5)
    with pipe:
        clip = fn.external_source(source=lambda: clips, batch=True, layout="t")
        pipe.set_outputs(dali_draws.window(clip, 7), dali_draws.time_shift(clip, 2))
    pipe.build()
    seen = [set(), set(), set()]
    for _ in range(150):
        windows, shifted = pipe.run()
        for index in range(2):
            seen[index].add(tuple(np.array(windows[index]).tolist()))
        seen[2].add(tuple(np.array(shifted[0]).tolist()))
    short, long = (clip.tolist() for clip in clips)
    assert seen[0] == {tuple([0.0] * before + short + [0.0] * (2 - before)) for before in range(3)}
    assert seen[1] == {tuple(long[start:start + 7]) for start in range(3)}
    padded = [0.0, 0.0] + short + [0.0, 0.0]
    assert seen[2] == {tuple(padded[2 - shift:7 - shift]) for shift in range(-2, 3)}
