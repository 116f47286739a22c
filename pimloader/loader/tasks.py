"""Which pipeline a loader runs: the registry of tasks.

A task (classification, detection, audio, ... or one of a user's) declares what it takes
and builds its pipeline (a `produce.Pipeline`):

    register_task(Task("video_clips", takes=is_clip_folder, build=build_clips,
                       specificity=20, describes="folders of JPEG frames"))

- `takes(dataset, transform)`: whether the task runs this dataset and the loader's
  `transform` (None when not given); cheap, nothing is built.
- `build(dataset, transform, options)`: its pipeline for them (options: a
  pimloader.options.PipelineOptions), or None when on a closer look it has nothing to offer
  (nothing lowers, the native extensions are missing); the next task is then asked.
- `specificity`: how narrow what it takes is. A task that takes only some of the datasets
  another one takes declares a higher specificity, so that it is asked first: the built-in
  ones are the transform as Python on any dataset (0), in-memory images through the fused
  kernel (10), datasets read as encoded files with their targets (classification, audio:
  20), and encoded images with annotations (detection's COCO sets: 30).
- `reads_encoded_files`: the task reads its samples as encoded files, so `cache_bytes`
  (the encoded-sample cache) applies to it; a loader with `cache_bytes` whose dataset no
  such task takes is told that the cache does not apply.

The loader calls `pipeline_for(dataset, transform, options)` once, in the main process: the
tasks that take the dataset and transform build in turn, most specific first, and the first
pipeline is the loader's (None: torch's own path). Two tasks of one specificity that both
take a dataset are an error naming both: the order of registration never decides. A name
is registered once; a second registration is refused (`unregister_task` first).

The built-in tasks register in pimloader/pipelines/__init__.py, which `import pimloader`
runs; a task written outside the package registers the same way, through
`pimloader.register_task`.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Task:
    """A task the loader can run: what it takes, how specific that is, how it builds."""

    name: str
    takes: Callable[[Any, Any], bool]          # (dataset, transform) -> bool
    build: Callable[[Any, Any, Any], Any]      # (dataset, transform, options) -> Pipeline | None
    specificity: int = 0
    reads_encoded_files: bool = False
    describes: str = ""                        # what it takes, in words (for messages)
    native: bool = True                        # its batches come from native kernels

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a task's name must be a non-empty str, got {self.name!r}")
        if not callable(self.takes) or not callable(self.build):
            raise TypeError(f"task {self.name!r}: takes and build must be callables")
        if isinstance(self.specificity, bool) or not isinstance(self.specificity, int):
            raise TypeError(f"task {self.name!r}: specificity must be an int, "
                            f"got {self.specificity!r}")


_TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Register `task` for every loader made from now on; refused (ValueError) if a task
    of that name is registered already. Returns the task."""
    if not isinstance(task, Task):
        raise TypeError(f"register_task takes a pimloader Task, got {task!r}")
    existing = _TASKS.get(task.name)
    if existing is not None:
        raise ValueError(f"a task named {task.name!r} is already registered ({existing}); "
                         f"unregister_task({task.name!r}) first, or choose another name")
    _TASKS[task.name] = task
    return task


def unregister_task(name: str) -> Task:
    """Remove the task registered as `name` (KeyError if none is) and return it."""
    try:
        return _TASKS.pop(name)
    except KeyError:
        raise KeyError(f"no task named {name!r} is registered (registered: "
                       f"{sorted(_TASKS)})") from None


def registered_tasks() -> list[Task]:
    """The registered tasks, in the order the loader asks them (most specific first)."""
    return sorted(_TASKS.values(), key=lambda task: (-task.specificity, task.name))


_LOOKUP: dict | None = None   # what once_per_lookup computed in the task_for under way


def once_per_lookup(function):
    """`function(dataset, transform)`, computed once per loader construction for the same
    dataset and transform objects: what a task's `takes` finds (a source over 1.28M files,
    say) its `build`, and the other tasks, get again for free. Outside a lookup it is
    `function` itself."""
    @functools.wraps(function)
    def memoized(dataset, transform):
        if _LOOKUP is None:
            return function(dataset, transform)
        key = (function, id(dataset), id(transform))
        if key not in _LOOKUP:
            _LOOKUP[key] = function(dataset, transform)
        return _LOOKUP[key]
    return memoized


def task_for(dataset, transform, options) -> tuple[Task | None, Any]:
    """(the task, its pipeline) for this dataset and transform: the most specific task that
    takes them and builds a pipeline; (None, None) when none does."""
    global _LOOKUP
    outer, _LOOKUP = _LOOKUP, {}
    try:
        return _first_task(dataset, transform, options)
    finally:
        _LOOKUP = outer


def _first_task(dataset, transform, options) -> tuple[Task | None, Any]:
    levels: dict[int, list[Task]] = {}
    for task in registered_tasks():
        levels.setdefault(task.specificity, []).append(task)
    for specificity, tasks in levels.items():
        taking = [task for task in tasks if task.takes(dataset, transform)]
        if len(taking) > 1:
            names = " and ".join(repr(task.name) for task in taking)
            raise ValueError(f"tasks {names} both take this dataset and transform, with the "
                             f"same specificity ({specificity}): register the narrower one "
                             f"with a higher specificity")
        if taking:
            pipeline = taking[0].build(dataset, transform, options)
            if pipeline is not None:
                return taking[0], pipeline
    return None, None


@dataclass(frozen=True)
class LoaderPath:
    """Which path a loader took and why, as `EpochStats.task` / `.path` say it."""

    task: str      # the task's name; "" for torch's own path
    native: bool   # whether its batches come from native kernels
    why: str


HINT = ("README, 'Which path your dataset takes': a dataset whose items are encoded bytes, "
        "with T.Decode() first in the loader's transform, takes the native path")
_NOTICED: set = set()


def pipeline_for(dataset, transform, options):
    """(the loader's pipeline for its dataset and `transform` (None: torch's own path),
    the LoaderPath). Says when `cache_bytes` does not apply, refuses `decode_on_dpu=True`
    when no task runs the dataset natively, and notices once per process and dataset type
    that a loader runs its dataset as Python (PathNotice)."""
    task, pipeline = task_for(dataset, transform, options)
    if options.cache_bytes and (task is None or not task.reads_encoded_files):
        readers = [task.describes or task.name for task in registered_tasks()
                   if task.reads_encoded_files]
        warnings.warn(f"cache_bytes applies only to datasets read as encoded files on the "
                      f"native path ({'; '.join(readers)}); this loader reads its dataset "
                      f"without a cache", stacklevel=3)
    if pipeline is None:
        options.dpu_decode("no task of pimloader runs this dataset and transform natively "
                           "(they take torch's own path)")
    path = path_of(task, pipeline, dataset, transform)
    if not path.native:
        _notice_once(path, dataset)
    return pipeline, path


def path_of(task, pipeline, dataset, transform) -> LoaderPath:
    kind = type(dataset).__name__
    if pipeline is None:
        return LoaderPath("", False, f"no native task takes a {kind}"
                          f"{' with this transform' if transform is not None else ''}: its "
                          f"__getitem__ runs as under torch, batched into shared slots ({HINT})")
    if not task.native:
        return LoaderPath(task.name, False, f"no native task takes a {kind} with this "
                          f"transform: it runs as Python on each sample ({HINT})")
    return LoaderPath(task.name, True, f"native: {task.describes or task.name}")


def _notice_once(path: LoaderPath, dataset) -> None:
    from pimloader.errors import PathNotice
    key = (type(dataset), path.task)
    if key not in _NOTICED:
        _NOTICED.add(key)
        warnings.warn(PathNotice(f"pimloader: {path.why}"), stacklevel=4)
