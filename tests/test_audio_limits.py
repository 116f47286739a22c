"""Audio bombs and impossible audio headers: small files whose headers ask for the
impossible or for gigabytes.

The oracle is libsndfile through soundfile: every header pimloader refuses for its sample
rate, channel count or a second `fmt ` chunk, libsndfile refuses too, and at the edges of
its ranges both read the file to the same samples. Past `MAX_AUDIO_SAMPLES` (pimloader's
limit, as Pillow's MAX_IMAGE_PIXELS is over libjpeg) the clip's frame count is the one
libsndfile reads from the header; a warning above the limit, an error above twice it, the
error before anything is allocated. Through the decoder directly and through
PIMDataLoader over an AudioFolder: on_error="raise" names the file, "skip" skips and
counts it.
"""
from __future__ import annotations

import io
import struct
import tracemalloc
import warnings

import numpy as np
import pytest
import soundfile
import torch

import pimloader
from pimloader import DecodeError, PIMDataLoader, decode
from pimloader import transforms as T
from pimloader.datasets import AudioFolder
from pimloader.datasets.audio import AudioDecoding
from pimloader.decode import AudioBombError, AudioBombWarning, decode_audio
from pimloader.transforms.resample import _reduced_rates, filter_taps, sinc_filters

pytestmark = pytest.mark.timeout(120)
SMALL_ALLOCATION = 1 << 20   # bytes: far below what any refused header asks for


@pytest.fixture(autouse=True)
def default_limit():
    """Every test starts, and leaves, the limit at its default."""
    default = decode.MAX_AUDIO_SAMPLES
    yield
    decode.MAX_AUDIO_SAMPLES = default


def wav(rate: int = 16000, frames: int = 8, channels: int = 1, fmt_chunks: int = 1) -> bytes:
    """A 16-bit PCM WAV, its `fmt ` chunk written `fmt_chunks` times, its rate field
    `rate` as given (taken modulo 2**32)."""
    align = 2 * channels
    fmt = struct.pack("<HHIIHH", 1, channels, rate & 0xFFFFFFFF, rate * align & 0xFFFFFFFF,
                      align, 16)
    samples = (np.arange(frames * channels) % 200 - 100).astype("<i2").tobytes()
    body = (b"fmt " + struct.pack("<I", 16) + fmt) * fmt_chunks
    body += b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def flac(frames: int = 100, rate: int = 16000, claimed: int | None = None) -> bytes:
    """A FLAC by libsndfile, its STREAMINFO's total-samples field set to `claimed`."""
    buffer = io.BytesIO()
    soundfile.write(buffer, np.linspace(-0.5, 0.5, frames, dtype=np.float32), rate,
                    format="FLAC")
    data = bytearray(buffer.getvalue())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0   # STREAMINFO first
    if claimed is not None:
        at = 8 + 10   # rate (20 bits), channels (3), bits (5), total samples (36)
        packed = int.from_bytes(data[at:at + 8], "big")
        packed = packed & ~((1 << 36) - 1) | claimed
        data[at:at + 8] = packed.to_bytes(8, "big")
    return bytes(data)


def libsndfile(data: bytes):
    return soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)


REFUSED = {  # name: (bytes, the header field the error must name)
    "rate_0x80000000": (wav(rate=0x80000000), "sample rate"),
    "rate_0xffffffff": (wav(rate=0xFFFFFFFF), "sample rate"),
    "rate_0": (wav(rate=0), "sample rate"),
    "duplicate_fmt": (wav(fmt_chunks=2), "'fmt ' chunk"),
    "channels_1025": (wav(frames=1, channels=1025), "channel count"),
}
# libsndfile's edges, which both read: the highest and lowest rates, the most channels
READ = {"rate_2147483647": wav(rate=2 ** 31 - 1), "rate_1": wav(rate=1),
        "channels_1024": wav(frames=2, channels=1024)}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_libsndfile_refuses_is_refused_naming_the_file_and_field(case):
    data, field = REFUSED[case]
    with pytest.raises(soundfile.LibsndfileError):
        libsndfile(data)
    with pytest.raises(DecodeError, match=f"{case}.wav: .*{field}"):
        decode_audio(data, f"{case}.wav")


@pytest.mark.parametrize("case", sorted(READ))
def test_what_libsndfile_reads_at_its_edges_decodes_to_its_samples(case):
    want, want_rate = libsndfile(READ[case])
    got, rate = decode_audio(READ[case], f"{case}.wav")
    assert rate == want_rate and np.array_equal(got, want.T)


def test_the_limit_is_set_like_max_image_pixels():
    assert decode.MAX_AUDIO_SAMPLES == 2 ** 26 and pimloader.AudioBombError is AudioBombError
    assert issubclass(AudioBombError, DecodeError)
    for wrong in (0, -1, True, 2.5, "1000"):
        with pytest.raises(ValueError, match="MAX_AUDIO_SAMPLES"):
            decode.MAX_AUDIO_SAMPLES = wrong
    decode.MAX_AUDIO_SAMPLES = np.int64(1000)
    assert decode.MAX_AUDIO_SAMPLES == 1000 and type(decode.MAX_AUDIO_SAMPLES) is int
    decode.MAX_AUDIO_SAMPLES = None
    assert decode.MAX_AUDIO_SAMPLES is None


def _allocated_peak(call) -> tuple:
    """(the exception `call` raised, or None; the peak of memory traced meanwhile)."""
    tracemalloc.start()
    try:
        call()
    except Exception as error:  # noqa: BLE001 - returned, asserted by the caller
        return error, tracemalloc.get_traced_memory()[1]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return None, peak


def test_a_flac_claiming_2_36_samples_is_refused_before_allocation():
    """STREAMINFO claims 68,719,476,735 samples (256 GiB of float32) in 100 real ones:
    libsndfile reports that count (soundfile.read would allocate all of it); pimloader
    refuses from it with nothing allocated."""
    data = flac(claimed=(1 << 36) - 1)
    assert soundfile.info(io.BytesIO(data)).frames == (1 << 36) - 1
    error, peak = _allocated_peak(lambda: decode_audio(data, "claims.flac"))
    assert isinstance(error, AudioBombError), error
    assert "claims.flac" in str(error) and "frame count (68,719,476,735 frames" in str(error)
    assert peak < SMALL_ALLOCATION


@pytest.mark.parametrize("kind", ["wav", "flac"])
def test_warning_above_the_limit_error_above_twice(kind):
    """Pillow's rule with samples for pixels, on genuine files: at the limit silent, above
    it the samples of libsndfile and a warning, above twice it an error."""
    decode.MAX_AUDIO_SAMPLES = 1000
    make = (lambda frames: wav(frames=frames // 2, channels=2)) if kind == "wav" else flac
    for frames, expect in ((1000, None), (1500, AudioBombWarning), (2000, AudioBombWarning),
                           (2002, AudioBombError)):
        data = make(frames)
        want, _ = libsndfile(data)
        assert want.size == frames
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if expect is AudioBombError:
                with pytest.raises(AudioBombError, match=f"clip.{kind}: .*frame count"):
                    decode_audio(data, f"clip.{kind}")
                continue
            got, _ = decode_audio(data, f"clip.{kind}")
        assert np.array_equal(got, want.T)
        assert [w.category for w in caught] == ([] if expect is None else [AudioBombWarning])
    decode.MAX_AUDIO_SAMPLES = None
    assert decode_audio(make(2002), "clip")[0].size == 2002


def test_a_flac_of_unknown_length_is_refused_as_libsndfile_fails_on_it():
    """STREAMINFO's total of 0 means "unknown": libsndfile then reports 2**63 - 1 frames,
    on which soundfile.read fails, and reading it block by block fails at its last block;
    pimloader refuses it from the header, naming the field."""
    data = flac(frames=150_000, claimed=0)
    with pytest.raises(ValueError):
        libsndfile(data)
    with soundfile.SoundFile(io.BytesIO(data)) as file, pytest.raises(soundfile.LibsndfileError):
        while len(file.read(4096, dtype="float32")) == 4096:
            pass
    with pytest.raises(DecodeError, match="stream.flac: .*frame count is unknown"):
        decode_audio(data, "stream.flac")


@pytest.mark.parametrize("rates", [(44100, 16000), (8000, 16000), (48000, 16000),
                                   (22050, 16000), (11025, 16000), (16000, 44100), (7, 3)])
def test_filter_taps_are_those_of_the_filters(rates):
    orig, new = _reduced_rates(*rates)
    filters, _ = sinc_filters(orig, new)
    assert filter_taps(*rates) == filters.numel()


def test_a_rate_whose_resampling_filters_are_a_bomb_is_refused_before_allocation():
    """2,147,483,647 Hz is a rate libsndfile reads; to 16 kHz (prime to it) torchaudio's
    filters would hold 34 trillion taps. The dataset refuses it from the header."""
    data = READ["rate_2147483647"]
    assert libsndfile(data)[1] == 2 ** 31 - 1
    decoding = AudioDecoding(sample_rate=16000)
    error, peak = _allocated_peak(lambda: decoding(data, "fast.wav"))
    assert isinstance(error, AudioBombError), error
    assert "fast.wav" in str(error) and "sample rate (2,147,483,647 Hz" in str(error)
    assert peak < SMALL_ALLOCATION
    assert decoding(wav(rate=44100, frames=441), "usual.wav").shape == (1, 160)


BAD_CLIPS = {**{f"{case}.wav": data for case, (data, _) in REFUSED.items()},
             "claims.flac": flac(claimed=(1 << 36) - 1), "stream.flac": flac(claimed=0)}


@pytest.fixture(scope="module")
def good_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    for label in ("go", "stop"):
        (root / label).mkdir()
        for i in range(3):
            (root / label / f"{i}.wav").write_bytes(wav(frames=400 + 50 * i))
    return root


def _with_bad(good_root, tmp_path, name: str, data: bytes):
    root = tmp_path / "clips"
    for path in good_root.rglob("*.wav"):
        target = root / path.relative_to(good_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    (root / "stop" / f"zz_{name}").write_bytes(data)
    return root


def _loader(root, on_error, sample_rate=None, workers=0, **kwargs):
    dataset = AudioFolder(root, sample_rate=sample_rate, downmix=True)
    return PIMDataLoader(dataset, transform=T.CropOrPad(400), batch_size=4,
                         num_workers=workers, on_error=on_error, **kwargs)


@pytest.mark.parametrize("name", sorted(BAD_CLIPS))
def test_the_loader_names_the_file_or_skips_and_counts_it(good_root, tmp_path, name):
    root = _with_bad(good_root, tmp_path, name, BAD_CLIPS[name])
    with pytest.raises(DecodeError, match=f"zz_{name}"):
        list(_loader(root, "raise"))
    loader = _loader(root, "skip")
    labels = torch.cat([labels for _, labels in loader])
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert loader.stats()[-1].skipped_samples == 1


def test_the_loader_skips_a_rate_whose_resampling_is_a_bomb(good_root, tmp_path):
    root = _with_bad(good_root, tmp_path, "fast.wav", READ["rate_2147483647"])
    with pytest.raises(AudioBombError, match="zz_fast.wav: .*sample rate"):
        list(_loader(root, "raise", sample_rate=16000))
    loader = _loader(root, "skip", sample_rate=16000)
    assert sum(len(labels) for _, labels in loader) == 6
    assert loader.stats()[-1].skipped_samples == 1


def test_the_loader_warns_between_the_limit_and_twice_it(good_root, tmp_path):
    root = _with_bad(good_root, tmp_path, "long.wav", wav(frames=600))
    decode.MAX_AUDIO_SAMPLES = 500
    with pytest.warns(AudioBombWarning, match="zz_long.wav"):
        assert sum(len(labels) for _, labels in _loader(root, "raise")) == 7


def test_the_limit_set_before_the_epoch_reaches_spawned_workers(good_root, tmp_path):
    """A spawned worker imports pimloader afresh, at the default limit: the loader hands
    it the main process's."""
    root = _with_bad(good_root, tmp_path, "long.wav", wav(frames=1001))
    decode.MAX_AUDIO_SAMPLES = 500
    with pytest.raises(AudioBombError, match="zz_long.wav"):
        list(_loader(root, "raise", workers=1, multiprocessing_context="spawn"))
