"""What fixed point costs a model: a small keyword classifier trained on float log-mel
features and on the DPU kernel's, same data, same seeds.

    python -m benchmarks.audio_classifier            # about 15 minutes on two shared cores
    python -m benchmarks.audio_classifier --quick    # a few minutes

Data: the ten Speech Commands keywords (yes, no, up, down, left, right, on, off, stop, go)
spoken by espeak-ng in many voices, speeds and pitches (needs espeak-ng), each clip placed at
a random offset in 1 s at 16 kHz, at a random level, with white noise at a random SNR
(5-30 dB); a seeded split into train and test clips (by variant: the test clips' voice,
speed and pitch combinations are never trained on). Features: n_fft 400, hop 160, 40 mels,
top_db 80, from the float reference (torchaudio, or the torch formulation) and from the DPU
kernel on the emulator; standardised with the training set's mean and deviation. Model: three
3x3 conv layers (16, 32, 32 channels) with batch norm, ReLU and max-pooling, max-pooling to
2 x 4, a linear layer; Adam, fixed epochs. Reported per seed: test accuracy trained and tested on
float features, trained and tested on DPU features, and the float-trained model tested on
DPU features; and how often the two models agree.
"""
from __future__ import annotations

import argparse
import itertools

import numpy as np
import torch
from torch import nn

from benchmarks.audio_fixed_point import RATE, resample, spoken_word_waveform
from benchmarks import audio_reference
from benchmarks.harness import results_path, write_results
from pimloader.backends.dpu.audio import DpuMelFeatures
from pimloader.backends.dpu.audio_tables import DpuMelSpec

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-scotland", "en-us+m7", "en-029+f2", "en-gb-x-rp+f4",
          "en-us+m3")
SPEEDS = (120, 150, 180)
PITCHES = (30, 50, 70)
SPEC = DpuMelSpec(sample_rate=RATE, n_fft=400, hop_length=160, n_mels=40, top_db=80.0)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audio_classifier", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer variants and epochs; *.quick.json")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def make_clips(variants: list, rng: np.random.Generator) -> tuple:
    """(waveforms [N, RATE], labels, variant index) for every word in every variant."""
    waves, labels, groups = [], [], []
    for g, (voice, speed, pitch) in enumerate(variants):
        for label, word in enumerate(WORDS):
            pcm, rate = spoken_word_waveform(word, voice, speed, pitch)
            x = resample(pcm, rate)[:RATE]
            clip = np.zeros(RATE)
            start = int(rng.integers(0, RATE - len(x) + 1))
            clip[start:start + len(x)] = x / max(np.abs(x).max(), 1e-9) * 10 ** (rng.uniform(-25, -1) / 20)
            noise = rng.standard_normal(RATE)
            noise *= np.sqrt(np.mean(clip ** 2) / np.mean(noise ** 2) / 10 ** (rng.uniform(5, 30) / 10))
            clip += noise
            waves.append(clip / max(1.0, np.abs(clip).max()))
            labels.append(label)
            groups.append(g)
    return np.stack(waves), np.array(labels), np.array(groups)


class KeywordNet(nn.Module):
    def __init__(self, classes: int = len(WORDS)) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveMaxPool2d((2, 4)))
        self.head = nn.Linear(32 * 8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def standardise(train: np.ndarray, *others: np.ndarray) -> list:
    mean, std = train.mean(), train.std() + 1e-6
    return [torch.as_tensor((a - mean) / std, dtype=torch.float32)[:, None] for a in (train, *others)]


def train(x: torch.Tensor, y: torch.Tensor, seed: int, epochs: int) -> KeywordNet:
    torch.manual_seed(seed)
    model = KeywordNet()
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    order = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x), generator=order).split(32):
            optimiser.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimiser.step()
    return model.eval()


@torch.no_grad()
def predict(model: KeywordNet, x: torch.Tensor) -> np.ndarray:
    return model(x).argmax(1).numpy()


def main(argv=None) -> dict:
    args = parse_args(argv)
    rng = np.random.default_rng(0)
    variants = list(itertools.product(VOICES[:4] if args.quick else VOICES, SPEEDS, PITCHES))
    rng.shuffle(variants)
    if spoken_word_waveform("yes", "en-us", 150, 50) is None:
        print("espeak-ng is missing: no speech, no classifier comparison (apt-get install espeak-ng)")
        return {}
    waves, labels, groups = make_clips(variants, rng)
    test_groups = set(range(0, len(variants), 4))                   # a quarter of the variants
    test = np.isin(groups, list(test_groups))
    with DpuMelFeatures(SPEC, nr_dpus=8, nr_tasklets=16) as mel:
        dpu = mel(waves)
    ref = audio_reference.reference_db(waves.astype(np.float32), SPEC)
    y_train, y_test = torch.as_tensor(labels[~test]), labels[test]
    f_train, f_test, f_test_dpu = standardise(ref[~test], ref[test], dpu[test])
    d_train, d_test = standardise(dpu[~test], dpu[test])
    epochs = 5 if args.quick else args.epochs
    rows = []
    for seed in range(1 if args.quick else args.seeds):
        on_float, on_dpu = train(f_train, y_train, seed, epochs), train(d_train, y_train, seed, epochs)
        p_float, p_dpu, p_cross = predict(on_float, f_test), predict(on_dpu, d_test), predict(on_float, f_test_dpu)
        rows.append({"seed": seed, "float": float((p_float == y_test).mean()), "dpu": float((p_dpu == y_test).mean()),
                     "float model on DPU features": float((p_cross == y_test).mean()),
                     "agreement": float((p_float == p_dpu).mean())})
    print(f"keyword classifier, {len(WORDS)} words, {int((~test).sum())} train / {int(test.sum())} test clips "
          f"(held-out voice/speed/pitch variants), {epochs} epochs; reference: {audio_reference.which()}")
    print(f"{'seed':>4} {'float':>7} {'DPU':>7} {'float model, DPU feats':>23} {'agreement':>10}")
    for r in rows:
        print(f"{r['seed']:>4} {r['float']:7.3f} {r['dpu']:7.3f} {r['float model on DPU features']:23.3f} "
              f"{r['agreement']:10.3f}")
    result = {"train": int((~test).sum()), "test": int(test.sum()), "epochs": epochs, "rows": rows,
              "reference": audio_reference.which()}
    write_results(result, args.out or results_path("audio_classifier", args.quick))
    return result


if __name__ == "__main__":
    main()
