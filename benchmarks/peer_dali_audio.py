"""NVIDIA DALI's CPU audio pipeline as a contender of benchmarks/audio.py (an optional peer:
`pip install nvidia-dali-cuda120`, which `make bench` does; without it the contender is
skipped with a printed line).

Every operator runs on the CPU (`device_id=None`). The keyword pipeline of audio.py, step
for step: `readers.file` over AudioFolder's samples (its classes; the noise folder is not a
class) -> `decoders.audio` (libsndfile, channels averaged, resampled to 16 kHz) -> a random
1 s window (crop, or zero padding at a random place) -> a random time shift of up to 100 ms
-> a gain of +-6 dB with probability 0.8 -> background noise (a second `readers.file` over
the noise folder, a random 1 s stretch) at 5-20 dB SNR with probability 0.8 ->
`spectrogram` (power) -> `mel_filter_bank` -> `to_decibels` -> top_db 80 -> frequency
and time masks (`erase`) -> a channel axis: (1, n_mels, frames) float32, as pimloader and
the torchaudio reference give.

Where it differs from the torch/torchaudio reference:

- Random draws: DALI's generators, not torch's; the distributions are the reference's (the
  masks' are torchaudio's mask_along_axis formulas). `readers.file`'s shuffle draws from a
  buffer (`initial_fill` 1024 samples; the whole set here), not a permutation of the epoch.
- Decoding and resampling: both decode with libsndfile; the 8 and 44.1 kHz clips go
  through DALI's windowed-sinc resampler (`quality` 50: 16 lobes), not torchaudio's
  `resample` (Hann-windowed sinc, 6 zero crossings), so their waveforms differ slightly.
- Noise: each clip reads and decodes one whole noise file (DALI has no in-memory noise bank
  without a Python source); the reference keeps the decoded noises in memory. The noise is
  a stretch of one file, never repeated end to end (the files are longer than 1 s).
- Spectral conventions: the window is given as torchaudio's (periodic Hann, `window_fn`;
  DALI's default Hann differs by 0.1 dB); power spectrum, HTK mel scale without area
  normalisation (`mel_formula="htk", normalize=False`), `10 log10(max(x, 1e-10))`
  (`cutoff_db=-100`, torchaudio's amin) and each spectrogram floored at its own maximum
  minus 80 dB, all as torchaudio's MelSpectrogram and AmplitudeToDB(top_db=80). On the same
  waveform they agree within float32 rounding (about 1e-6 relative, at most 0.002 dB) where the
  value is within 60 dB of the clip's peak; in near-silent frames the two FFTs' rounding
  noise floors differ (tens of dB at -70 dB), which only matters without top_db.
- No normalisation step: the benchmark's keyword pipeline has none.
"""
from __future__ import annotations

import inspect

import torch

from benchmarks import peer_dali
from benchmarks.calls import Call, Let, Name, run_program

NAME = "DALI"
NOISE_READER = "Noise"
# the keyword pipeline of audio.py (tests/test_benchmarks_dali_tasks.py checks them against
# its transform): crop/pad length and shift in samples, gain and SNR ranges and probabilities,
# top_db and the mask widths
KEYWORD = {"length": 16000, "max_shift": 1600, "gain_db": (-6.0, 6.0), "gain_p": 0.8,
           "snr_db": (5.0, 20.0), "noise_p": 0.8, "top_db": 80.0, "freq_mask": 8.0,
           "time_mask": 20.0}
HELPERS = ("maybe", "window", "time_shift", "gain", "mix_noise", "top_db", "mask")
OUTPUTS = ("features", "labels")


def program(mel: dict, keyword: dict = KEYWORD) -> tuple:
    """The pipeline's lines for torchaudio's MelSpectrogram(**mel) features (keys
    sample_rate, n_fft, hop_length, n_mels)."""
    rate, n_fft, hop, n_mels = mel["sample_rate"], mel["n_fft"], mel["hop_length"], mel["n_mels"]
    frames = keyword["length"] // hop + 1
    decode = dict(dtype=Name("types.FLOAT"), downmix=True, sample_rate=float(rate))
    return (
        Let("encoded, labels", Call("fn.readers.file", files=Name("files"),
                                    labels=Name("labels_of_files"), random_shuffle=True,
                                    pad_last_batch=True, name=peer_dali.READER)),
        Let("audio, audio_rate", Call("fn.decoders.audio", Name("encoded"), **decode)),
        Let("audio", Call("window", Name("audio"), keyword["length"])),
        Let("audio", Call("time_shift", Name("audio"), keyword["max_shift"])),
        Let("audio", Call("gain", Name("audio"), *keyword["gain_db"], keyword["gain_p"])),
        Let("noise_encoded, noise_labels", Call("fn.readers.file", files=Name("noise_files"),
                                                random_shuffle=True, name=NOISE_READER)),
        Let("noise, noise_rate", Call("fn.decoders.audio", Name("noise_encoded"), **decode)),
        Let("noise", Call("window", Name("noise"), keyword["length"])),
        Let("audio", Call("mix_noise", Name("audio"), Name("noise"), *keyword["snr_db"],
                          keyword["noise_p"])),
        Let("features", Call("fn.spectrogram", Name("audio"), nfft=n_fft, window_length=n_fft,
                             window_step=hop, window_fn=Name("hann_window"),
                             center_windows=True, reflect_padding=True, power=2, layout="ft")),
        Let("features", Call("fn.mel_filter_bank", Name("features"), sample_rate=float(rate),
                             nfilter=n_mels, freq_low=0.0, freq_high=rate / 2,
                             mel_formula="htk", normalize=False)),
        Let("features", Call("fn.to_decibels", Name("features"), multiplier=10.0,
                             reference=1.0, cutoff_db=-100.0)),
        Let("features", Call("top_db", Name("features"), keyword["top_db"])),
        Let("features", Call("mask", Name("features"), "f", keyword["freq_mask"], n_mels)),
        Let("features", Call("mask", Name("features"), "t", keyword["time_mask"], frames)),
        Let("features", Call("fn.expand_dims", Name("features"), axes=[0],
                             new_axis_names="c")),
    )


def describe(pipeline: Call, lines: tuple, clips: int, noises: int) -> str:
    from benchmarks import dali_draws
    helpers = "\n".join(inspect.getsource(getattr(dali_draws, name)) for name in HELPERS)
    helpers = "\n".join("    " + line for line in helpers.splitlines())
    body = "\n".join(f"    {line.text()}" for line in lines)
    return (f"nvidia.dali {pipeline.text()}; files, labels_of_files = AudioFolder(root)'s "
            f"{clips} samples; noise_files = its {noises} background-noise files; "
            f"hann_window = torch.hann_window(n_fft, periodic=True).tolist():\n{body}\n"
            f"  outputs {', '.join(OUTPUTS)} as torch tensors; with "
            f"(benchmarks/dali_draws.py):\n{helpers}")


class DaliAudioLoader:
    """(features, labels) batches of DALI's keyword pipeline over an AudioFolder's samples
    and noise folder; one epoch per iteration."""

    def __init__(self, samples: list, noise_files: list, mel: dict, batch_size: int,
                 threads: int, seed: int = 0):
        from nvidia.dali import Pipeline, fn, types

        from benchmarks import dali_draws

        if not noise_files:
            raise ValueError("DALI: the keyword pipeline mixes background noise; the folder "
                             "has no noise files")
        self.dataset = samples  # what audio.py counts an epoch against
        self._lines = program(mel)
        pipeline = Call("Pipeline", batch_size=batch_size, num_threads=threads, device_id=None,
                        seed=seed,
                        prefetch_queue_depth=peer_dali.prefetch_for(len(samples), batch_size))
        self.text = describe(pipeline, self._lines, len(samples), len(noise_files))
        namespace = {"fn": fn, "types": types, "Pipeline": Pipeline,
                     "files": [str(path) for path, _ in samples],
                     "labels_of_files": [int(label) for _, label in samples],
                     "noise_files": [str(path) for path in noise_files],
                     "hann_window": torch.hann_window(mel["n_fft"], periodic=True).tolist(),
                     **{name: getattr(dali_draws, name) for name in HELPERS}}
        self._epochs = peer_dali.DaliEpochs(
            peer_dali.build_pipeline(pipeline, namespace, self._graph), batch_size,
            self._batch)
        self.samples = self._epochs.samples

    def _graph(self, namespace: dict) -> list:
        bound = run_program(self._lines, namespace)
        return [bound[name] for name in OUTPUTS]

    @staticmethod
    def _batch(outputs, keep: int, copy: bool):
        features, labels = (peer_dali.dense(output, copy) for output in outputs)
        return features[:keep], labels.view(-1)[:keep].to(torch.int64)

    def __iter__(self):
        return iter(self._epochs)

    def close(self) -> None:
        self._epochs = None


# -- the hook of benchmarks/audio.py ---------------------------------------------------------

_announced: list = []


def contender(folder, workers: int, batch_size: int, mel: dict) -> dict:
    """{NAME: DALI's loader} with threads = max(1, workers), its exact pipeline printed the
    first time; {} with a printed line when DALI cannot run here."""
    reason = peer_dali.missing()
    if reason:
        print(f"  {NAME}: skipped, {reason}", flush=True)
        return {}
    loader = DaliAudioLoader(folder.samples, folder.noise_files(), mel, batch_size,
                             max(1, workers))
    if not _announced:
        _announced.append(True)
        print(f"  {NAME} {peer_dali.version()} (num_threads = max(1, workers) in each group): "
              f"{loader.text}", flush=True)
    return {NAME: loader}
