"""AudioFolder and audio decoding against independent readers: Python's `wave` module
(+ numpy) for WAV, sox for FLAC; errors that name the file; the speech dataset maker.

Oracles: a 16-bit PCM sample s reads as s / 32768 and a 24-bit one as s / 2^23 (what
torchaudio.load returns); sox (libFLAC) decodes FLAC to float32 on its own. Resampling on
load is compared with torchaudio.functional.resample where torchaudio imports.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from pimloader import DecodeError
from pimloader.datasets import AudioFolder
from pimloader.decode import decode_audio

try:
    import torchaudio.functional as audio_functional
except Exception:  # torchaudio pins an older torch; it may not import
    audio_functional = None

HAS_SOX = shutil.which("sox") is not None
HAS_ESPEAK = shutil.which("espeak-ng") is not None


def write_pcm_wav(path: Path, samples: np.ndarray, rate: int, width: int = 2) -> None:
    """int samples [frames, channels] as a PCM WAV, with the standard library only."""
    frames = samples.astype("<i4")
    data = b"".join(int(v).to_bytes(4, "little", signed=True)[:width]
                    for v in frames.reshape(-1))
    with wave.open(str(path), "wb") as out:
        out.setnchannels(samples.shape[1])
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(data)


def random_pcm(rng, frames, channels, bits):
    high = 2 ** (bits - 1)
    samples = rng.integers(-high, high, size=(frames, channels))
    samples[:4] = [[-high], [high - 1], [0], [1]]  # the extremes: full-scale clipping
    return samples


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two classes of WAV clips of several widths, rates and channel counts, FLAC where
    sox can make it, a noise folder and split lists."""
    root = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    truth = {}
    for name, (rate, channels, bits) in {
            "no/a_nohash_0.wav": (16000, 1, 16), "no/b_nohash_0.wav": (8000, 2, 16),
            "yes/a_nohash_0.wav": (44100, 1, 24), "yes/c_nohash_0.wav": (11025, 1, 16),
            "yes/d_nohash_0.wav": (16000, 2, 24)}.items():
        path = root / name
        path.parent.mkdir(exist_ok=True)
        samples = random_pcm(rng, 3000 + len(truth) * 37, channels, bits)
        write_pcm_wav(path, samples, rate, bits // 8)
        truth[name] = ((samples / 2.0 ** (bits - 1)).T.astype(np.float32), rate)
    noise = root / "_background_noise_"
    noise.mkdir()
    write_pcm_wav(noise / "hiss.wav", random_pcm(rng, 20000, 1, 16), 16000)
    (root / "validation_list.txt").write_text("no/b_nohash_0.wav\n")
    (root / "testing_list.txt").write_text("yes/c_nohash_0.wav\n")
    return root, truth


def test_reads_wav_as_the_wave_module_says(folder):
    root, truth = folder
    dataset = AudioFolder(root)
    assert dataset.classes == ["no", "yes"]  # the noise folder is no class
    assert [Path(p).relative_to(root).as_posix() for p, _ in dataset.samples] == sorted(truth)
    for (path, target), (waveform, got_target) in zip(dataset.samples, dataset):
        want, _ = truth[Path(path).relative_to(root).as_posix()]
        assert got_target == target
        assert waveform.dtype == torch.float32
        assert torch.equal(waveform, torch.from_numpy(want)), path


@pytest.mark.skipif(not HAS_SOX, reason="sox is not installed (scripts/system-deps.sh)")
def test_flac_and_float_wav_match_sox(tmp_path):
    rng = np.random.default_rng(1)
    source = tmp_path / "source.wav"
    write_pcm_wav(source, random_pcm(rng, 5000, 2, 16), 22050)
    for target in ("clip.flac", "clip24.flac", "float.wav"):
        options = ["-b", "24"] if "24" in target else (["-e", "floating-point", "-b", "32"]
                                                       if "float" in target else [])
        subprocess.run(["sox", str(source), *options, str(tmp_path / target)], check=True)
        raw = subprocess.run(["sox", str(tmp_path / target), "-t", "f32", "-"], check=True,
                             capture_output=True).stdout
        want = np.frombuffer(raw, "<f4").reshape(-1, 2).T
        got, rate = decode_audio((tmp_path / target).read_bytes(), target)
        assert rate == 22050
        np.testing.assert_array_equal(got, want, err_msg=target)


def with_chunk_before_data(wav: bytes, chunk: bytes, payload: bytes) -> bytes:
    """A WAV with an extra chunk (odd sizes padded, as RIFF says) before its data chunk."""
    at = wav.index(b"data")
    extra = chunk + len(payload).to_bytes(4, "little") + payload + b"\0" * (len(payload) & 1)
    body = wav[12:at] + extra + wav[at:]
    return b"RIFF" + (len(body) + 4).to_bytes(4, "little") + b"WAVE" + body


@pytest.mark.parametrize("channels, subtype, extra, container", [
    (1, "PCM_16", None, "WAV"), (2, "PCM_16", None, "WAV"), (1, "PCM_16", b"odd", "WAV"),
    (3, "PCM_16", None, "WAV"), (6, "PCM_24", None, "WAV"),
    (2, "PCM_16", None, "WAVEX"),  # WAVE_FORMAT_EXTENSIBLE
    (3, "FLOAT", None, "WAVEX"), (2, "PCM_24", None, "WAVEX"),
    (1, "PCM_U8", None, "WAV"), (2, "PCM_32", None, "WAV"), (1, "FLOAT", b"LIST pad", "WAV"),
    (2, "DOUBLE", None, "WAV"),
    (2, "ULAW", None, "WAV"), (1, "MS_ADPCM", None, "WAV"),  # not plain: libsndfile
])
def test_wav_variants_decode_as_libsndfile_reads_them(channels, subtype, extra, container):
    """WAVs of plain samples (PCM 8-32 bit, float, double; also extensible) are read
    directly (pimloader.decode.audio, natively where built), the rest by libsndfile: both
    must give libsndfile's floats, and downmixed, torch's mean of them."""
    rng = np.random.default_rng(channels)
    encoded = io.BytesIO()
    signal = rng.uniform(-1, 1, (999, channels))
    signal[:3] = [[-1.0], [1.0], [0.0]]  # full scale: the extremes of every width
    soundfile.write(encoded, signal, 12345, format=container, subtype=subtype)
    data = encoded.getvalue()
    if extra is not None:
        data = with_chunk_before_data(data, b"LIST", extra)
    from pimloader.decode.audio import _wav_chunks, plain_wav
    direct = plain_wav(data, _wav_chunks(data)) is not None
    assert direct == (subtype not in ("ULAW", "MS_ADPCM"))
    want, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    got, got_rate = decode_audio(data, "clip.wav")
    assert got_rate == rate == 12345 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want.T)
    mono, _ = decode_audio(data, "clip.wav", downmix=True)
    assert mono.shape == (1, want.shape[0])
    assert torch.equal(torch.from_numpy(mono),
                       torch.from_numpy(want.T.copy()).mean(0, keepdim=True))


@pytest.mark.parametrize("riff_size", ["first part", "whole file"])
@pytest.mark.parametrize("tail", [b"\x01" * 8, b""])
def test_a_second_data_chunk_decodes_as_libsndfile_reads_it(riff_size, tail):
    """Fuzz finding 3 (docs/results.md), minimal: a second `data` chunk after the first,
    beyond the RIFF size or within it. libsndfile walks on to the file's end and reads the
    later chunk (or, when that chunk ends the file, refuses it: libsndfile 1.2.2);
    pimloader read the first one (both accepted the file, with different samples). Now
    pimloader gives libsndfile's samples, or refuses what it refuses."""
    first, later = io.BytesIO(), np.linspace(-1, 1, 12).reshape(-1, 1)
    soundfile.write(first, np.zeros((8, 1)), 8000, format="WAV", subtype="PCM_16")
    pcm = (later * 32767).astype("<i2").tobytes()
    data = first.getvalue() + b"data" + len(pcm).to_bytes(4, "little") + pcm + tail
    if riff_size == "whole file":
        data = data[:4] + (len(data) - 8).to_bytes(4, "little") + data[8:]
    try:
        want, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except soundfile.LibsndfileError:
        with pytest.raises(DecodeError, match="clip.wav"):
            decode_audio(data, "clip.wav")
        return
    assert want.shape[0] == len(later)   # libsndfile reads the later chunk
    got, got_rate = decode_audio(data, "clip.wav")
    assert got_rate == rate
    np.testing.assert_array_equal(got, want.T)


@pytest.mark.parametrize("subtype", ["G721_32", "GSM610"])
def test_a_codec_libsndfile_cannot_seek_in_decodes_as_it_reads_by_count(subtype):
    """Fuzz finding 5 (docs/results.md): libsndfile opens G.721 ADPCM and GSM 6.10 WAVs as
    not seekable, and soundfile then reads them only by count (`read()` with no count is a
    ValueError, "frames must be specified"). pimloader raised that ValueError; now it reads
    what libsndfile reads, by the count the file states."""
    encoded = io.BytesIO()
    soundfile.write(encoded, np.sin(np.linspace(0, 40, 800)).reshape(-1, 1) * 0.5, 8000,
                    format="WAV", subtype=subtype)
    data = encoded.getvalue()
    with soundfile.SoundFile(io.BytesIO(data)) as file:
        assert not file.seekable()
        want = file.read(file.frames, dtype="float32", always_2d=True)
    got, rate = decode_audio(data, "clip.wav")
    assert rate == 8000 and got.shape == (1, want.shape[0]) and want.shape[0] >= 800
    np.testing.assert_array_equal(got, want.T)


def test_splits_follow_the_lists(folder):
    root, truth = folder
    names = {split: [Path(p).relative_to(root).as_posix()
                     for p, _ in AudioFolder(root, split=split).samples]
             for split in ("training", "validation", "testing")}
    assert names["validation"] == ["no/b_nohash_0.wav"]
    assert names["testing"] == ["yes/c_nohash_0.wav"]
    assert sorted(sum(names.values(), [])) == sorted(truth)
    with pytest.raises(ValueError, match="split must be"):
        AudioFolder(root, split="train")


def test_resample_and_downmix_on_load(folder):
    root, truth = folder
    dataset = AudioFolder(root, sample_rate=16000, downmix=True)
    for (path, _), (waveform, _) in zip(dataset.samples, dataset):
        samples, rate = truth[Path(path).relative_to(root).as_posix()]
        mono = torch.from_numpy(samples).mean(dim=0, keepdim=True)
        assert waveform.shape == (1, -(-mono.shape[1] * 16000 // rate))
        if audio_functional is not None:
            assert torch.equal(waveform, audio_functional.resample(mono, rate, 16000)), path
    noise = dataset.background_noise()
    assert len(noise) == 1 and noise[0].shape == (1, 20000)


def test_transform_and_target_transform(folder):
    root, _ = folder
    dataset = AudioFolder(root, transform=lambda w: w[:, :10], target_transform=lambda t: -t)
    waveform, target = dataset[len(dataset) - 1]
    assert waveform.shape[1] == 10 and target == -1


@pytest.mark.parametrize("content, cause", [
    (b"", "empty"),
    (b"not audio at all" * 8, "cannot decode"),
    ("header", "no audio frames"),
    ("truncated", "truncated"),
])
def test_broken_files_are_named(tmp_path, content, cause):
    good, empty = io.BytesIO(), io.BytesIO()
    soundfile.write(good, np.zeros(800, np.float32), 16000, format="WAV", subtype="PCM_16")
    soundfile.write(empty, np.zeros(0, np.float32), 16000, format="WAV", subtype="PCM_16")
    content = {"header": empty.getvalue(),
               "truncated": good.getvalue()[:900]}.get(content, content)
    (tmp_path / "word").mkdir()
    (tmp_path / "word" / "bad.wav").write_bytes(content)
    with pytest.raises(DecodeError, match=f"bad.wav.*{cause}") as raised:
        AudioFolder(tmp_path)[0]
    assert raised.value.name.endswith("bad.wav")


def test_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        AudioFolder(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no class folders"):
        AudioFolder(tmp_path)
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="empty_class holds no file"):
        AudioFolder(tmp_path)
    assert len(AudioFolder(tmp_path, allow_empty=True)) == 0
    with pytest.raises(FileNotFoundError, match="validation_list.txt"):
        AudioFolder(tmp_path, allow_empty=True, split="validation")
    with pytest.raises(FileNotFoundError, match="no noise clips"):
        AudioFolder(tmp_path, allow_empty=True).background_noise()
    with pytest.raises(ValueError, match="sample_rate"):
        AudioFolder(tmp_path, sample_rate=0)


@pytest.mark.skipif(not (HAS_SOX and HAS_ESPEAK),
                    reason="espeak-ng and sox are not installed (scripts/system-deps.sh)")
def test_speech_dataset_is_reproducible_and_in_speech_commands_layout(tmp_path):
    from benchmarks.make_speech_dataset import NOISE_FOLDER, WORDS, Params, make_dataset
    params = Params(per_word=3, speakers=6, seed=5, noise_seconds=1)
    first = make_dataset(tmp_path / "a", params)
    second = make_dataset(tmp_path / "b", params)
    manifest = (first / "manifest.json").read_text()
    assert manifest.split('"tools"')[1] == (second / "manifest.json").read_text().split('"tools"')[1]
    dataset = AudioFolder(first, sample_rate=16000, downmix=True)
    assert dataset.classes == sorted(WORDS) and len(dataset) == 3 * len(WORDS)
    assert len(dataset.background_noise()) >= 4 and (first / NOISE_FOLDER).is_dir()
    listed = (first / "validation_list.txt").read_text().split() + \
        (first / "testing_list.txt").read_text().split()
    assert all((first / name).is_file() for name in listed)
    for waveform, _ in dataset:
        assert waveform.shape[0] == 1 and waveform.shape[1] > 1600
        assert 0 < waveform.abs().max() <= 1
