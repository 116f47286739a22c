"""PIMDataLoader's pipeline and backend arguments, checked once, as they are made.

A leaf: every folder may import it (it imports nothing of pimloader). The defaults of the
DPU set (`NR_DPUS`, `NR_TASKLETS`) are stated here and only here; code that needs them
takes a `PipelineOptions` or these constants. Turning the options into the backend a
pipeline runs on is `pimloader.backends.select.resolve`, in one place.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

NR_DPUS = 64        # the DPU set a process allocates (a rank's 64 DPUs)
NR_TASKLETS = 16    # tasklets per DPU (the hardware runs up to 24)

BACKENDS = ("auto", "cpu", "emulator", "upmem")
CACHE_SCOPES = ("loader", "cluster")
DEFAULT_CLUSTER_TIMEOUT_S = 300.0  # a loader with timeout=0 (wait for ever) still fails then
DEFAULT_STAGING_BYTES = 256 << 20


@dataclass(frozen=True)
class ClusterScope:
    """Where this process stands in a multi-node job, for `cache_scope=` (docs/cluster_cache.md).
    `cache_scope="cluster"` reads it from torchrun's environment (WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, GROUP_RANK); give one to set it yourself (on one machine, each "node"
    is a cache namespace of its own). `staging_bytes`: each rank's shared buffer for the
    samples it fetched from other nodes and its workers have yet to read; `timeout_s`: how
    long the exchange waits for a peer before it names it as gone (None: the loader's
    `timeout`, or DEFAULT_CLUSTER_TIMEOUT_S when that is 0)."""

    nodes: int
    node: int
    local_rank: int
    local_ranks: int
    staging_bytes: int = DEFAULT_STAGING_BYTES
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("nodes", "local_ranks", "staging_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ClusterScope: {name} must be an int >= 1, got {value!r}")
        if not 0 <= self.node < self.nodes:
            raise ValueError(f"ClusterScope: node must be in [0, {self.nodes}), got {self.node!r}")
        if not 0 <= self.local_rank < self.local_ranks:
            raise ValueError(f"ClusterScope: local_rank must be in [0, {self.local_ranks}), "
                             f"got {self.local_rank!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"ClusterScope: timeout_s must be > 0, got {self.timeout_s!r}")

    @classmethod
    def from_env(cls, environ=None) -> "ClusterScope":
        """The scope torchrun gives this process (its environment variables)."""
        environ = os.environ if environ is None else environ
        names = ("WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
        missing = [name for name in names if name not in environ]
        if missing:
            raise ValueError(f"cache_scope='cluster' reads the node layout from torchrun's "
                             f"environment, which lacks {missing}: launch with torchrun, or "
                             f"pass cache_scope=pimloader.ClusterScope(nodes=, node=, "
                             f"local_rank=, local_ranks=)")
        world, local_ranks = int(environ["WORLD_SIZE"]), int(environ["LOCAL_WORLD_SIZE"])
        if world % local_ranks:
            raise ValueError(f"cache_scope='cluster' needs as many ranks on every node: "
                             f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE="
                             f"{local_ranks}")
        return cls(world // local_ranks, int(environ["GROUP_RANK"]), int(environ["LOCAL_RANK"]),
                   local_ranks)

    def with_timeout(self, loader_timeout: float) -> "ClusterScope":
        """This scope, its timeout taken from the loader's where it has none of its own."""
        if self.timeout_s is not None:
            return self
        timeout = loader_timeout if loader_timeout > 0 else DEFAULT_CLUSTER_TIMEOUT_S
        return dataclasses.replace(self, timeout_s=float(timeout))


def cache_scope_of(cache_scope, cache_bytes: int, loader_timeout: float):
    """`cache_scope=` checked and resolved: "loader", or the process's ClusterScope."""
    if isinstance(cache_scope, ClusterScope):
        scope = cache_scope
    elif cache_scope == "cluster":
        scope = ClusterScope.from_env()
    elif cache_scope == "loader":
        return "loader"
    else:
        raise ValueError(f"cache_scope must be one of {CACHE_SCOPES} or a ClusterScope, "
                         f"got {cache_scope!r}")
    if not cache_bytes:
        raise ValueError("cache_scope='cluster' partitions the encoded-sample cache: give it "
                         "cache_bytes (each node's budget)")
    return scope.with_timeout(loader_timeout)
DECODE_ON_DPU = ("auto", True, False)


# the default budget of a loader's seek indexes (pimloader.datasets.seek_indexes): about
# 80,000 photos' worth; shared memory is only taken as indexes are made
SEEK_INDEX_BYTES = 256 << 20


@dataclass(frozen=True)
class PipelineOptions:
    """PIMDataLoader's pipeline arguments (see its docstring), checked as they are made."""

    backend: str = "auto"
    on_error: str = "raise"
    reduced_dct: object = "auto"
    memory_format: torch.memory_format = torch.contiguous_format
    nr_dpus: int = NR_DPUS
    nr_tasklets: int = NR_TASKLETS
    dpu_profile: str = ""
    cache_bytes: int = 0
    decode_on_dpu: object = "auto"
    cache_scope: object = "loader"   # or a ClusterScope (cache_scope_of)
    batched: bool = True             # batch_size is not None (samples come in batches)
    cache_seekable: bool = False     # the cache keeps seekable copies of the JPEGs it takes
    seek_index_bytes: int = SEEK_INDEX_BYTES  # shared memory for seek indexes of JPEGs

    def __post_init__(self) -> None:
        if (isinstance(self.cache_bytes, bool) or not isinstance(self.cache_bytes, int)
                or self.cache_bytes < 0):
            raise ValueError(f"cache_bytes must be an int >= 0 (0: no cache), "
                             f"got {self.cache_bytes!r}")
        if (isinstance(self.seek_index_bytes, bool) or not isinstance(self.seek_index_bytes, int)
                or self.seek_index_bytes < 0):
            raise ValueError(f"seek_index_bytes must be an int >= 0 (0: no seek indexes), "
                             f"got {self.seek_index_bytes!r}")
        if not isinstance(self.cache_seekable, bool):
            raise TypeError(f"cache_seekable must be True or False, got {self.cache_seekable!r}")
        if self.cache_seekable and not self.cache_bytes:
            raise ValueError("cache_seekable=True makes the encoded-sample cache keep seekable "
                             "copies of JPEGs: give it cache_bytes (its budget) too")
        if self.memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError(f"memory_format must be torch.contiguous_format or "
                             f"torch.channels_last, got {self.memory_format!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.reduced_dct not in ("auto", True, False):
            raise ValueError(f"reduced_dct must be 'auto', True or False, "
                             f"got {self.reduced_dct!r}")
        if not isinstance(self.dpu_profile, str):
            raise TypeError(f"dpu_profile must be a libdpu profile string, "
                            f"got {self.dpu_profile!r}")
        check_decode_on_dpu(self.decode_on_dpu, self.backend)
        if self.cache_scope != "loader" and not isinstance(self.cache_scope, ClusterScope):
            raise ValueError(f"cache_scope must be 'loader' or a ClusterScope (resolve "
                             f"'cluster' with cache_scope_of), got {self.cache_scope!r}")

    def dpu_decode(self, refusal: str = "") -> bool:
        """Whether a DPU backend decodes the task's images (decode_on_dpu: "auto" is on).
        `refusal` says why the task (or its dataset) cannot have them decoded on DPUs, ""
        when it can: then "auto" is off and True is a ValueError saying why, so that the
        option never vanishes without a word."""
        if not refusal:
            return self.decode_on_dpu is not False
        if self.decode_on_dpu is True:
            raise ValueError(f"decode_on_dpu=True does not apply to this loader: {refusal}; "
                             f"pass decode_on_dpu='auto' (then off) or False")
        return False


def check_decode_on_dpu(decode_on_dpu, backend: str) -> None:
    """Refuses a bad `decode_on_dpu=` (before anything is built), and True with a backend
    that can never be a DPU one."""
    if not any(decode_on_dpu is value for value in DECODE_ON_DPU):
        raise ValueError(f"decode_on_dpu must be 'auto', True or False, got {decode_on_dpu!r}")
    if decode_on_dpu is True and backend == "cpu":
        raise ValueError("decode_on_dpu=True needs a DPU backend (backend='emulator' or 'upmem'); "
                         "backend='cpu' decodes on the host")


def check_transform(transform) -> None:
    """Refuses, as the loader is made, a `transform=` that is not callable or holds a step
    that is not (looked for in the `transforms` lists of Compose, RandomApply, RandomChoice,
    RandomOrder): a TypeError naming it, where torch would raise at the first sample."""
    if transform is None:
        return
    where = _first_uncallable(transform, "transform")
    if where is not None:
        path, step = where
        raise TypeError(f"{path} must be callable (a torchvision transform, a Compose of "
                        f"them, or a function of the image), got {step!r} "
                        f"({type(step).__name__})")


def _first_uncallable(step, path: str):
    """(where, step) of the first step of `step` (itself included) that is not callable."""
    if not callable(step):
        return path, step
    steps = getattr(step, "transforms", None)
    if isinstance(steps, (list, tuple)):
        for position, inner in enumerate(steps):
            found = _first_uncallable(inner, f"{path}.transforms[{position}]")
            if found is not None:
                return found
    return None
