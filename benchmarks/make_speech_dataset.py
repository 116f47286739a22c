"""Make a keyword-spotting dataset in the Speech Commands layout, offline, from a seed.

Each class is a spoken word, synthesised by espeak-ng with many voices (accents and voice
variants), speeds, pitches and amplitudes, then converted by sox:

    root/<word>/<speaker>_nohash_<n>.<wav|flac>
    root/_background_noise_/{white,pink,brown}_noise.wav, babble.wav, hum.wav
    root/validation_list.txt, root/testing_list.txt   (paths relative to root, as in
                                                        Speech Commands; the rest is training)
    root/manifest.json                                 (parameters and every file's SHA-256)

Most clips are 16 kHz mono 16-bit WAV, as in Speech Commands; a share are FLAC, 8 kHz,
44.1 kHz, stereo, 24-bit or 32-bit float, so that a loader's decoding, resampling and
down-mixing are exercised. A "speaker" is one (accent, variant, pitch) voice; as in Speech
Commands, the split of a clip is decided by a hash of its speaker's name, so that a speaker
never appears in two splits. espeak-ng is deterministic, and sox runs with `-R` (its
repeatable random numbers, for the noise and the dither), so a seed gives the same bytes
on the same espeak-ng and sox versions (the manifest records them).

    python -m benchmarks.make_speech_dataset --per-word 40 --seed 0
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.progress import bar

DATA_DIR = Path(__file__).resolve().parent / "results" / "data"
DEFAULT_ROOT = DATA_DIR / "speech_commands_like"
MANIFEST_NAME = "manifest.json"
NOISE_FOLDER = "_background_noise_"
GENERATOR_VERSION = 1

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan",
           "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
SPEED_WPM = (110, 230)          # espeak-ng -s, words per minute (its default is 175)
PITCH = (10, 90)                # espeak-ng -p, 0..99 (default 50)
AMPLITUDE = (40, 180)           # espeak-ng -a, 0..200 (default 100)
VOLUME = (0.25, 1.0)            # sox vol, after synthesis: quiet speakers too
LEAD_SILENCE_S = (0.0, 0.25)    # sox pad before the word: where it starts varies
# formats other than Speech Commands' own 16 kHz mono 16-bit WAV, by share of the clips
VARIATIONS = (("flac", 0.12), ("rate_8000", 0.08), ("rate_44100", 0.08), ("stereo", 0.08),
              ("bits_24", 0.05), ("float", 0.05))
VALIDATION_PERCENT = 10
TESTING_PERCENT = 10
NOISE_SECONDS = 10             # each noise recording (Speech Commands' are about 60 s)
NOISE_RATE = 16000


@dataclass(frozen=True)
class Params:
    per_word: int = 40
    speakers: int = 60
    seed: int = 0
    noise_seconds: int = NOISE_SECONDS
    generator_version: int = GENERATOR_VERSION


@dataclass(frozen=True)
class Voice:
    accent: str
    variant: str
    pitch: int

    @property
    def speaker(self) -> str:
        """An 8-hex-digit speaker name, as Speech Commands' anonymised ids."""
        text = f"{self.accent}+{self.variant}/p{self.pitch}"
        return hashlib.sha1(text.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Clip:
    word: str
    voice: Voice
    number: int          # the speaker's n-th clip of this word (_nohash_<n>)
    speed: int
    amplitude: int
    volume: float
    lead_s: float
    rate: int = 16000
    channels: int = 1
    extension: str = "wav"
    sox_encoding: tuple = ("-b", "16", "-e", "signed-integer")

    @property
    def relative_path(self) -> str:
        return f"{self.word}/{self.voice.speaker}_nohash_{self.number}.{self.extension}"


def espeak_variants() -> list[str]:
    """The voice variants this espeak-ng ships (`espeak-ng --voices=variant`), sorted."""
    listing = subprocess.run(["espeak-ng", "--voices=variant"], check=True,
                             capture_output=True, text=True).stdout.splitlines()[1:]
    files = [line.split()[4] for line in listing if len(line.split()) >= 5]
    return sorted(name.split("/", 1)[1] for name in files if name.startswith("!v/"))


def draw_voices(rng: random.Random, count: int, variants: list[str]) -> list[Voice]:
    voices: dict[str, Voice] = {}
    while len(voices) < count:
        voice = Voice(rng.choice(ACCENTS), rng.choice(variants), rng.randint(*PITCH))
        voices.setdefault(voice.speaker, voice)
    return list(voices.values())


def apply_variation(clip: Clip, name: str) -> Clip:
    changes = {"flac": {"extension": "flac"},
               "rate_8000": {"rate": 8000}, "rate_44100": {"rate": 44100},
               "stereo": {"channels": 2},
               "bits_24": {"sox_encoding": ("-b", "24", "-e", "signed-integer")},
               "float": {"sox_encoding": ("-b", "32", "-e", "floating-point")}}[name]
    fields = {**asdict(clip), "voice": clip.voice, **changes}
    return Clip(**fields)


def draw_clips(params: Params, variants: list[str]) -> list[Clip]:
    """Every clip's parameters, drawn in a fixed order from the seed."""
    rng = random.Random(params.seed)
    voices = draw_voices(rng, params.speakers, variants)
    clips = []
    for word in WORDS:
        taken: dict[str, int] = {}
        for _ in range(params.per_word):
            voice = rng.choice(voices)
            number = taken.get(voice.speaker, 0)
            taken[voice.speaker] = number + 1
            clip = Clip(word, voice, number, rng.randint(*SPEED_WPM),
                        rng.randint(*AMPLITUDE), round(rng.uniform(*VOLUME), 3),
                        round(rng.uniform(*LEAD_SILENCE_S), 3))
            chosen = rng.random()
            for name, share in VARIATIONS:
                if chosen < share:
                    clip = apply_variation(clip, name)
                    break
                chosen -= share
            clips.append(clip)
    return clips


def synthesise(clip: Clip, root: Path) -> None:
    """espeak-ng's 22.05 kHz WAV piped through sox into the clip's rate, channels and
    format."""
    speech = subprocess.run(
        ["espeak-ng", "-v", f"{clip.voice.accent}+{clip.voice.variant}",
         "-s", str(clip.speed), "-p", str(clip.voice.pitch), "-a", str(clip.amplitude),
         "--stdout", clip.word], check=True, capture_output=True).stdout
    channels = ["remix", "1", "1v0.8"] if clip.channels == 2 else []
    out = root / clip.relative_path
    subprocess.run(["sox", "-R", "-t", "wav", "-", *clip.sox_encoding, str(out),
                    "vol", str(clip.volume), "pad", str(clip.lead_s), "0",
                    *channels, "rate", str(clip.rate)],
                   input=speech, check=True, capture_output=True)


BABBLE_SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore every summer",
    "a journey of a thousand miles begins with a single step",
    "please call me back when you have a moment to talk",
    "the train to the city leaves at half past seven tonight",
    "nobody knows exactly where the old road used to go",
)


def make_noises(folder: Path, variants: list[str], rng: random.Random, seconds: int) -> None:
    """Coloured noises and a mains hum from sox's synth; a babble of six espeak-ng voices
    mixed together (the same kind of files as Speech Commands' noise folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    synth = ["sox", "-R", "-n", "-r", str(NOISE_RATE), "-b", "16", "-c", "1"]
    for colour in ("white", "pink", "brown"):
        subprocess.run([*synth, str(folder / f"{colour}_noise.wav"), "synth",
                        str(seconds), f"{colour}noise", "vol", "0.5"],
                       check=True, capture_output=True)
    subprocess.run([*synth, str(folder / "hum.wav"), "synth", str(seconds),
                    "sine", "50", "sine", "150", "sine", "250", "remix", "-", "vol", "0.2"],
                   check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as scratch:
        voices = []
        for i, sentence in enumerate(BABBLE_SENTENCES):
            path = Path(scratch) / f"{i}.wav"
            text = " . ".join([sentence] * 4)
            subprocess.run(["espeak-ng", "-v", f"{rng.choice(ACCENTS)}+{rng.choice(variants)}",
                            "-s", str(rng.randint(*SPEED_WPM)), "-w", str(path), text],
                           check=True, capture_output=True)
            voices.append(str(path))
        subprocess.run(["sox", "-R", "-m", *voices, "-r", str(NOISE_RATE), "-b", "16",
                        str(folder / "babble.wav"), "trim", "0", str(seconds),
                        "gain", "-n", "-3"], check=True, capture_output=True)


def split_of(relative_path: str) -> str:
    """'validation', 'testing' or 'training', from a hash of the clip's speaker (the part
    of its name before `_nohash_`), as Speech Commands decides its splits."""
    speaker = Path(relative_path).name.split("_nohash_")[0]
    percent = int(hashlib.sha1(speaker.encode()).hexdigest(), 16) % 10000 / 100
    if percent < VALIDATION_PERCENT:
        return "validation"
    if percent < VALIDATION_PERCENT + TESTING_PERCENT:
        return "testing"
    return "training"


def write_split_lists(root: Path, clips: list[Clip]) -> None:
    lists = {"validation": [], "testing": []}
    for clip in clips:
        split = split_of(clip.relative_path)
        if split in lists:
            lists[split].append(clip.relative_path)
    for split, paths in lists.items():
        (root / f"{split}_list.txt").write_text("".join(p + "\n" for p in sorted(paths)))


def tool_versions() -> dict:
    def first_line(command):
        return subprocess.run(command, capture_output=True, text=True).stdout.splitlines()[0]
    return {"espeak-ng": first_line(["espeak-ng", "--version"]),
            "sox": first_line(["sox", "--version"])}


def manifest(root: Path, params: Params) -> dict:
    files = {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
             for path in sorted(root.rglob("*")) if path.is_file()
             and path.name != MANIFEST_NAME}
    return {"params": asdict(params), "tools": tool_versions(), "files": files}


def make_dataset(root: Path, params: Params, workers: int | None = None) -> Path:
    """Write the dataset under `root` (replacing what is there) and return `root`."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed: scripts/system-deps.sh installs "
                               f"it (apt-get install espeak-ng sox)")
    variants = espeak_variants()
    clips = draw_clips(params, variants)
    if root.exists():
        shutil.rmtree(root)
    for word in WORDS:
        (root / word).mkdir(parents=True)
    make_noises(root / NOISE_FOLDER, variants, random.Random(params.seed + 1),
                params.noise_seconds)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool, \
            bar(total=len(clips), desc="speech set", unit="clip") as progress:
        for _ in pool.map(lambda clip: synthesise(clip, root), clips):
            progress.update()
    write_split_lists(root, clips)
    (root / MANIFEST_NAME).write_text(json.dumps(manifest(root, params), indent=1))
    return root


def ensure_dataset(root: Path = DEFAULT_ROOT, params: Params = Params()) -> Path:
    """The dataset at `root`, made only if it is missing or was made with other
    parameters."""
    try:
        made = json.loads((root / MANIFEST_NAME).read_text())["params"]
    except (OSError, ValueError, KeyError):
        made = None
    return root if made == asdict(params) else make_dataset(root, params)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--per-word", type=int, default=Params.per_word,
                        help="clips per word (class)")
    parser.add_argument("--speakers", type=int, default=Params.speakers,
                        help="distinct voices (accent, variant, pitch)")
    parser.add_argument("--seed", type=int, default=Params.seed)
    parser.add_argument("--noise-seconds", type=int, default=NOISE_SECONDS,
                        help="length of each background-noise recording")
    parser.add_argument("--workers", type=int, default=None,
                        help="parallel synthesis threads (default: the CPU count)")
    args = parser.parse_args(argv)
    root = make_dataset(args.root, Params(args.per_word, args.speakers, args.seed,
                                               args.noise_seconds),
                        args.workers)
    count = sum(1 for _ in root.glob("*/*_nohash_*"))
    print(f"{count} clips of {len(WORDS)} words in {root}")


if __name__ == "__main__":
    main()
