"""The loader's registry of tasks (loader/tasks.py), its per-process resources
(loader/resources.py), and the options that never vanish (pimloader/options.py).

The extension test uses the public API only (`pimloader.register_task`, `pimloader.Task`,
`pimloader.loader`'s Pipeline, BatchProducer and Fetcher, `pimloader.decode`): a toy task,
short "videos" stored as stacks of JPEG frames, gets batches from PIMDataLoader with no
edit under pimloader/; the oracle is Pillow's decode of each frame.
"""
import io
import os

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
from PIL import Image
from torch.utils.data import Dataset

import pimloader
from benchmarks.make_dataset import make_imagenet_like
from pimloader import PIMDataLoader, Task, register_task, unregister_task
from pimloader import decode
from pimloader.loader import BatchProducer, Fetcher, Pipeline, ProcessResources
from pimloader.loader.tasks import registered_tasks, task_for

FRAMES, HEIGHT, WIDTH = 3, 24, 32


# -- a toy task, from outside the package -------------------------------------------------

class JpegClips(Dataset):
    """Short clips, each a list of JPEG frames (bytes) and a label. Indexing it decodes
    with Pillow: the oracle, and what torch's DataLoader would give."""

    def __init__(self, clips: list, labels: list) -> None:
        self.clips, self.labels = clips, labels

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, index):
        frames = [np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
                  for data in self.clips[index]]
        return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2), self.labels[index]


class FrameFetcher(Fetcher):
    """A clip's frames decoded by pimloader's decoder, stacked [T, 3, H, W] uint8."""

    def __init__(self, dataset: JpegClips, auto_collation: bool, buffers) -> None:
        super().__init__(auto_collation)
        self.dataset, self.buffers = dataset, buffers

    def one(self, index):
        self.current = f"clip {index!r}"
        frames = [decode.decode_image(data, name=f"clip {index} frame {i}")
                  for i, data in enumerate(self.dataset.clips[index])]
        self.buffers.clips += 1
        return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2), self.dataset.labels[index]

    def fetch(self, index, each=None):
        if not self.auto_collation:
            return self.one(index)
        return [self.one(i) for i in index]


class ClipBuffers:
    """A per-process resource of the toy task: counts the clips a process decoded, and
    records its close() (in a file: it runs in workers too)."""

    log = None

    def __init__(self) -> None:
        self.clips, self.closed = 0, False

    def close(self) -> None:
        self.closed = True
        if ClipBuffers.log is not None:
            with open(ClipBuffers.log, "a") as out:
                out.write(f"{os.getpid()} {self.clips}\n")


class FramePipeline(Pipeline):
    def make_producer(self, context):
        buffers = context.resources.get(ClipBuffers)
        fetcher = FrameFetcher(context.dataset, context.auto_collation, buffers)
        return BatchProducer(fetcher, context.collate_fn, context.auto_collation,
                             context.writer)


def takes_clips(dataset, transform) -> bool:
    return isinstance(dataset, JpegClips) and transform is None


def build_clips(dataset, transform, options):
    return FramePipeline()


CLIP_TASK = Task("jpeg_clips_test", takes_clips, build_clips, specificity=20,
                 describes="clips of JPEG frames")


@pytest.fixture
def clip_task(tmp_path):
    ClipBuffers.log = str(tmp_path / "closed.txt")
    register_task(CLIP_TASK)
    yield tmp_path / "closed.txt"
    unregister_task(CLIP_TASK.name)
    ClipBuffers.log = None


@pytest.fixture(scope="module")
def clips():
    rng = np.random.default_rng(5)
    encoded, labels = [], []
    for clip in range(7):
        frames = []
        for _ in range(FRAMES):
            pixels = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="JPEG", quality=90, subsampling=0)
            frames.append(out.getvalue())
        encoded.append(frames)
        labels.append(clip % 3)
    return JpegClips(encoded, labels)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_task_registered_from_outside_gets_its_batches(clip_task, clips, num_workers):
    loader = PIMDataLoader(clips, batch_size=3, num_workers=num_workers)
    assert isinstance(loader._pipeline, FramePipeline)
    got = list(loader)
    expected = list(torch.utils.data.DataLoader(clips, batch_size=3))
    assert [len(labels) for _, labels in got] == [3, 3, 1]
    for (frames, labels), (want, want_labels) in zip(got, expected):
        assert frames.shape[1:] == (FRAMES, 3, HEIGHT, WIDTH) and frames.dtype == torch.uint8
        assert torch.equal(frames, want) and torch.equal(labels, want_labels)
    assert loader.stats()[0].shared_batches == 3    # stacked into the loader's slots
    assert loader.stats()[0].backend == ""          # its own pipeline names no backend
    loader.close()
    closed = [line.split() for line in clip_task.read_text().splitlines()]
    # each process that made batches closed its resource once, having decoded every clip
    assert sum(int(count) for _, count in closed) == len(clips)
    assert len(closed) == (1 if num_workers == 0 else 2), closed


def test_a_second_task_of_one_name_is_refused(clip_task):
    with pytest.raises(ValueError, match="a task named 'jpeg_clips_test' is already registered"):
        register_task(Task("jpeg_clips_test", takes_clips, build_clips))
    with pytest.raises(ValueError, match="'classification' is already registered"):
        register_task(Task("classification", takes_clips, build_clips))
    with pytest.raises(TypeError, match="register_task takes a pimloader Task"):
        register_task(build_clips)


def _options(**kwargs):
    return pimloader.PipelineOptions(**kwargs)


def test_the_most_specific_task_wins_whatever_the_order_of_registration(clips, clip_task):
    wider = Task("any_clips_test", lambda dataset, transform: isinstance(dataset, JpegClips),
                 lambda *args: "wider", specificity=5)
    narrower = Task("narrow_clips_test", takes_clips, lambda *args: "narrower", specificity=25)
    for first, second in ((wider, narrower), (narrower, wider)):
        register_task(first)
        register_task(second)
        try:
            assert task_for(clips, None, _options())[1] == "narrower"
            # where the narrower one does not take them, the wider one runs
            assert task_for(clips, v2.Identity(), _options())[1] == "wider"
        finally:
            unregister_task(first.name)
            unregister_task(second.name)
    # a narrower task that builds nothing passes to the next
    register_task(Task("no_clips_test", takes_clips, lambda *args: None, specificity=40))
    try:
        task, pipeline = task_for(clips, None, _options())
        assert task is CLIP_TASK and isinstance(pipeline, FramePipeline)
    finally:
        unregister_task("no_clips_test")


def test_two_tasks_of_one_specificity_that_take_a_dataset_are_an_error(clips, clip_task):
    register_task(Task("same_clips_test", takes_clips, build_clips, specificity=20))
    try:
        with pytest.raises(ValueError, match="tasks 'jpeg_clips_test' and 'same_clips_test' "
                                             "both take this dataset"):
            PIMDataLoader(clips, batch_size=2)
    finally:
        unregister_task("same_clips_test")


def test_detection_is_asked_before_classification_for_its_specificity():
    order = [task.name for task in registered_tasks() if not task.name.endswith("_test")]
    assert order == ["detection", "audio", "classification", "in_memory", "python_transform"]
    specificity = {task.name: task.specificity for task in registered_tasks()}
    assert specificity["detection"] > specificity["classification"] > specificity["in_memory"]


def test_cache_bytes_says_when_no_task_reads_encoded_files(clips, clip_task):
    with pytest.warns(UserWarning, match="cache_bytes applies only to datasets read as encoded "
                                         "files on the native path \\(a COCO detection set,"):
        PIMDataLoader(clips, batch_size=2, cache_bytes=1 << 20)


# -- the per-process resources ------------------------------------------------------------

class Closing:
    def __init__(self, log: list, name: str, fails: bool = False) -> None:
        self.log, self.name, self.fails = log, name, fails

    def close(self):
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} cannot close")


def test_resources_are_made_once_and_closed_last_first_all_of_them():
    log = []
    resources = ProcessResources()
    first = resources.get("a", lambda: Closing(log, "a", fails=True))
    assert resources.get("a", lambda: Closing(log, "other")) is first and len(resources) == 1
    resources.get("b", lambda: Closing(log, "b"))
    with pytest.raises(RuntimeError, match="a cannot close"):
        resources.close()
    assert log == ["b", "a"] and len(resources) == 0
    assert resources.get("a", lambda: Closing(log, "again")).name == "again"  # made afresh


def test_a_forked_child_neither_sees_nor_closes_its_parents_resources():
    log = []
    resources = ProcessResources()
    resources.get("set", lambda: Closing(log, "parent's"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: report what it sees, then close its copy
        try:
            seen = "set" in resources
            mine = resources.get("set", lambda: Closing(log, "child's")).name
            resources.close()
            os.write(write, f"{seen} {mine} {log}".encode())
        finally:
            os._exit(0)
    os.close(write)
    reply = os.read(read, 1000).decode()
    os.waitpid(pid, 0)
    assert reply == "False child's [\"child's\"]"
    assert log == [] and "set" in resources   # the parent's is untouched, still open
    resources.close()
    assert log == ["parent's"]


# -- options: decode_on_dpu where nothing decodes on DPUs, and what stats() says -----------

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_imagenet_like(tmp_path_factory.mktemp("tasks") / "set", count=4, classes=2)


TRAIN = v2.Compose([v2.RandomResizedCrop(16), v2.ToDtype(torch.float32, scale=True)])
EMULATOR = dict(backend="emulator", nr_dpus=2, nr_tasklets=2)


def test_decode_on_dpu_true_is_refused_where_nothing_is_decoded_on_dpus(tmp_path):
    from _coco import make_coco
    from pimloader.datasets import AudioFolder, CocoDetection
    images, annotations = make_coco(tmp_path / "coco", count=2)
    coco = CocoDetection(images, annotations,
                         transforms=v2.Compose([v2.ToImage(), v2.Resize((16, 16))]))
    with pytest.raises(ValueError, match="decode_on_dpu=True does not apply to this loader: "
                                         "detection images are decoded on the host"):
        PIMDataLoader(coco, decode_on_dpu=True, **EMULATOR)
    tensors = torch.utils.data.TensorDataset(torch.zeros(2, 3, 20, 20, dtype=torch.uint8))
    with pytest.raises(ValueError, match="the dataset returns its images decoded"):
        PIMDataLoader(tensors, transform=TRAIN, decode_on_dpu=True, **EMULATOR)
    (tmp_path / "audio" / "yes").mkdir(parents=True)
    import soundfile
    soundfile.write(tmp_path / "audio" / "yes" / "a.wav", np.zeros(1600, np.float32), 16000)
    from pimloader import transforms as T
    clips = AudioFolder(tmp_path / "audio", sample_rate=16000)
    with pytest.raises(ValueError, match="audio clips are decoded on the host"):
        PIMDataLoader(clips, transform=T.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=40),
                      decode_on_dpu=True, **EMULATOR)
    # with "auto" it is simply off there, and stats() says so
    loader = PIMDataLoader(tensors, transform=TRAIN, batch_size=2, **EMULATOR)
    list(loader)
    assert (loader.stats()[0].backend, loader.stats()[0].dpu_decode) == ("emulator", False)
    loader.close()


def test_stats_say_which_backend_runs_and_whether_it_decodes(folder):
    with PIMDataLoader(pimloader.datasets.ImageFolder(folder), batch_size=2, transform=TRAIN,
                       backend="cpu") as loader:
        list(loader)
        assert (loader.stats()[0].backend, loader.stats()[0].dpu_decode) == ("cpu", False)
    with PIMDataLoader(pimloader.datasets.ImageFolder(folder), batch_size=2, transform=TRAIN,
                       **EMULATOR) as loader:
        list(loader)
        assert (loader.stats()[0].backend, loader.stats()[0].dpu_decode) == ("emulator", True)
    with PIMDataLoader(pimloader.datasets.ImageFolder(folder), batch_size=2, transform=TRAIN,
                       decode_on_dpu=False, **EMULATOR) as loader:
        list(loader)
        assert (loader.stats()[0].backend, loader.stats()[0].dpu_decode) == ("emulator", False)
    auto = PIMDataLoader(pimloader.datasets.ImageFolder(folder), batch_size=2, transform=TRAIN)
    list(auto)
    from pimloader.backends.select import upmem_available
    assert auto.stats()[0].backend == ("upmem" if upmem_available() else "cpu")
    auto.close()
    plain = PIMDataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 2)), batch_size=2)
    list(plain)
    assert (plain.stats()[0].backend, plain.stats()[0].dpu_decode) == ("", False)
