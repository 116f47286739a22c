"""The README's quick-start snippets run as a new user would run them, on plain data made
here: the audio one on bare class folders (no split lists, no noise folder), and with a
noise folder; the batches' shapes are what its transform makes."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def snippet(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    matching = [block for block in blocks if marker in block]
    assert len(matching) == 1, f"one README snippet with {marker!r}, found {len(matching)}"
    return matching[0]


@pytest.mark.parametrize("with_noise", [False, True])
def test_the_audio_quick_start_on_plain_class_folders(tmp_path, with_noise):
    import soundfile
    rng = np.random.default_rng(0)
    for label in ("no", "yes"):
        (tmp_path / label).mkdir()
        for number in range(3):
            soundfile.write(tmp_path / label / f"{number}.wav",
                            rng.uniform(-0.3, 0.3, 12000).astype(np.float32), 16000)
    if with_noise:
        (tmp_path / "_background_noise_").mkdir()
        soundfile.write(tmp_path / "_background_noise_" / "hiss.wav",
                        rng.uniform(-0.1, 0.1, 32000).astype(np.float32), 16000)
    code = snippet('AudioFolder("/data/speech_commands"')
    code = code.replace('"/data/speech_commands"', repr(str(tmp_path)))
    code = code.replace("num_workers=8", "num_workers=0")
    namespace: dict = {}
    exec("from pimloader import PIMDataLoader, datasets, transforms as T\n" + code, namespace)
    features, labels = next(iter(namespace["loader"]))
    assert tuple(features.shape) == (6, 1, 40, 101) and sorted(labels.tolist()) == [0] * 3 + [1] * 3
    assert bool(namespace["noise"]) == with_noise
