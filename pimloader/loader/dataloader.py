"""PIMDataLoader: torch's DataLoader, with batches written in place into reusable slots."""
from __future__ import annotations

import inspect
from typing import TypeVar

import torch
from torch.utils.data import DataLoader

from pimloader.options import (NR_DPUS, NR_TASKLETS, SEEK_INDEX_BYTES, PipelineOptions,
                               cache_scope_of, check_transform)

from . import _coordinated, _group
from ._multi import MultiProcessIter
from ._resume import load_loader_state, loader_state_dict, take_pending
from ._single import SingleProcessIter
from ._state import LoaderState
from ._stats import EpochStats
from .tasks import pipeline_for


_T_co = TypeVar("_T_co", covariant=True)


class PIMDataLoader(DataLoader[_T_co]):
    """A drop-in replacement for `torch.utils.data.DataLoader`.

    It takes the same arguments with the same meaning, defaults and errors, and yields the
    same batches in the same order for the same `generator` seed. When samples hold
    tensors or numpy arrays of a fixed shape and dtype and `collate_fn` is the default,
    each sample is written straight into its place in a preallocated batch slot (shared
    memory when there are workers) and the batch is lent out as views over that slot, which
    is reused once the user drops every reference to the batch.

    Extra keyword arguments:

    transform: a torchvision (v2 or v1) transform or Compose applied to each image. When
        the dataset's samples can be read as encoded bytes (torchvision's ImageFolder or
        DatasetFolder, pimloader.datasets.ImageFolder, a list of (path, target) pairs), the
        transform is lowered to native code: region-of-interest JPEG decoding and one fused
        crop/resize/flip/convert/normalize kernel writing into the batch slot. A dataset's
        own `transform` is taken over the same way. For other datasets the transform acts
        on each sample's image (its first element), in the workers: uint8 CHW tensors (or
        tv_tensors.Image) of 1 or 3 channels go through the same fused kernel, anything
        else through the transform as Python. Parameters are drawn as torchvision draws
        them, so a seed gives the same crops and flips.
    backend: "auto" (UPMEM DPUs when the SDK build is present, else the native CPU kernels,
        else torch's path), "cpu" (native kernels; an error if they are not built),
        "upmem" (the fused kernel on UPMEM DPUs; an error without the SDK build) or
        "emulator" (the same DPU kernel and driver on pimloader's libdpu emulator: a test
        bed whose speed says nothing about DPU speed).
    nr_dpus, nr_tasklets: the DPU set each worker allocates (DPU backends only).
    decode_on_dpu: "auto" (default: on with a DPU backend), True (an error with
        backend="cpu") or False: the DPU backends decode the JPEGs of image folders
        themselves, on the DPUs that transform them (the host sends only the compressed
        restart intervals each crop needs); the files they cannot take (progressive, CMYK,
        no restart markers in a large image...), samples needing padding or colour and
        reduced-DCT draft decodes are decoded on the host. stats() counts both, the
        fallbacks by reason (docs/loader.md "JPEG decoding on DPUs").
    dpu_profile: the libdpu profile string of that allocation ("" by default: hardware for
        "upmem"; "backend=simulator" runs on UPMEM's functional simulator).
    on_error: "raise" (default) or "skip": skip samples that fail to decode, and count them
        (on every path; a batch whose every sample fails is one DecodeError: README "Errors").
    reduced_dct: decode JPEGs at a reduced DCT scale where the crop is at least twice the
        output size: "auto" (default: on for RandomResizedCrop pipelines, off otherwise),
        True or False. It saves decoding work and changes pixels slightly.
    memory_format: torch.contiguous_format (default) or torch.channels_last: the memory
        format of image batches the native path writes into slots (the kernel writes NHWC
        directly; the batch is an NCHW-shaped channels_last tensor).
    cache_bytes: 0 (default: off) or the byte budget of a shared-memory cache of encoded
        samples (native encoded-image path only; a warning says when it does not apply):
        filled by the first reads, never evicted, shared by all workers and epochs, freed
        by close(). Hits and misses are in stats() (docs/loader.md "Encoded-sample cache").
    cache_scope: "loader" (default: the cache above, one per loader) or "cluster" (or a
        pimloader.ClusterScope): under torch.distributed, CoorDL's partitioned cache: each
        node caches cache_bytes of its own part of the dataset, shared by its local ranks
        and their workers, and a rank fetches the samples other nodes hold from them
        (docs/cluster_cache.md: launch, what is cached where, failure).
    cache_seekable: False (default) or True (with cache_bytes): the cache keeps each JPEG
        it takes as a seekable copy, with restart markers added losslessly (the same
        pixels; decode.add_restart_markers): the first read of a JPEG pays a transcode
        (about one more decode), and every later crop of it is decoded from the restart
        intervals around the crop instead of from the file's start. It pays for random
        crops (RandomResizedCrop) over more than a few epochs (docs/loader.md
        "Encoded-sample cache").
    seek_index_bytes: the shared-memory budget of the seek indexes of the JPEGs a
        RandomResizedCrop-like pipeline decodes (default 256 MiB, at most 16 KB per sample
        and a quarter of what /dev/shm has free: it is allocated whole; 0: none). The second time a crop of a JPEG without restart
        markers is decoded, pimloader records where its Huffman data stands every 64
        pixels of each row (about 3 KB a photo, one more decode's work), and from then on
        decodes each crop from the rows' data around it only: the same pixels, less
        decoding. Counted in stats() (docs/loader.md "Seek indexes").
    share_with, share_jobs: coordinated prep (docs/loader.md "Coordinated prep"): the name
        of a group of `share_jobs` (>= 2) jobs on this machine whose loaders are configured
        alike (dataset, sampler, batching, seeds, workers, transform); at the first iter()
        the first job to arrive prepares every batch once, the others start no workers and
        read the same batches, in the same order, from its shared slots. A job whose
        configuration differs is refused (ValueError); a consuming job that dies is dropped
        with a warning; the producing job's end raises SharedPrepError in the others.

    Extra methods: `stats()` (per-epoch timings), `close()` (ends persistent workers, leaves
    a coordinated-prep group) and use as a context manager.
    """

    def __init__(self, dataset, *args, transform=None, backend: str = "auto",
                 on_error: str = "raise", reduced_dct="auto",
                 memory_format=torch.contiguous_format, nr_dpus: int = NR_DPUS,
                 nr_tasklets: int = NR_TASKLETS, dpu_profile: str = "", cache_bytes: int = 0,
                 share_with: str | None = None, share_jobs: int | None = None,
                 decode_on_dpu="auto", cache_scope="loader", cache_seekable: bool = False,
                 seek_index_bytes: int = SEEK_INDEX_BYTES, **kwargs) -> None:
        super().__init__(dataset, *args, **kwargs)
        scope = cache_scope_of(cache_scope, cache_bytes, self.timeout)
        if scope != "loader" and (share_with is not None or not self.in_order):
            raise ValueError("cache_scope='cluster' needs in_order=True (its staging is "
                             "reclaimed in delivery order) and no share_with")
        options = PipelineOptions(backend, on_error, reduced_dct, memory_format, nr_dpus,
                                  nr_tasklets, dpu_profile, cache_bytes, decode_on_dpu, scope,
                                  batched=self.batch_size is not None,
                                  cache_seekable=cache_seekable,
                                  seek_index_bytes=seek_index_bytes)
        _group.check_share_arguments(share_with, share_jobs)
        check_transform(transform)
        self._on_error = on_error
        self._pipeline, self._path = pipeline_for(dataset, transform, options)
        self._share = None
        if share_with is not None:
            self._share = (share_with, share_jobs,
                           _group.configuration(self, transform, options))

    def __iter__(self):
        if self.__dict__.get("_share") is None:
            return super().__iter__()
        state = self._state
        if state.group is None:
            name, jobs, config = self._share
            state.group = _coordinated.attach(name, jobs, config, self.timeout)
            if state.group.is_producer:
                state.publish = state.group.publish
        if state.group.is_producer:
            return _coordinated.ProducerIter(super().__iter__(), state.group)
        return _coordinated.ConsumerIter(self, state.group, state)

    def _get_iterator(self):
        resume = take_pending(self)
        if self._pipeline is not None:
            # shared state (a sample cache), before workers
            self._pipeline.open_shared(workers=self.num_workers > 0)
        if self.num_workers == 0:
            return SingleProcessIter(self, self._state, resume)
        self.check_worker_number_rationality()
        return MultiProcessIter(self, self._state, resume)

    def state_dict(self) -> dict:
        """The loader's position, as torchdata's StatefulDataLoader.state_dict(): taken
        between batches, it describes the point after the batches received so far (also
        each producer's random state then); after an epoch's end, the start of the next.
        A plain, versioned dict of Python values and tensors (docs/loader.md)."""
        self._refuse_in_group("state_dict")
        return loader_state_dict(self)

    def load_state_dict(self, state_dict: dict) -> None:
        """Make the next iter() continue from `state_dict` (from state_dict() of a loader
        over the same dataset, sampler and num_workers); persistent workers are restarted."""
        self._refuse_in_group("load_state_dict")
        load_loader_state(self, state_dict)

    def _refuse_in_group(self, method: str) -> None:
        if self.__dict__.get("_share") is not None:
            raise ValueError(f"{method}() is not supported with share_with: the group's "
                             f"position is its producing job's")

    @property
    def _state(self) -> LoaderState:
        state = self.__dict__.get("_pimloader_state")
        if state is None:
            pipeline = self.__dict__.get("_pipeline")
            state = self.__dict__["_pimloader_state"] = LoaderState(
                pipeline.kernel_backend() if pipeline is not None else ("", False),
                self.__dict__.get("_path"))
        return state

    def stats(self) -> list[EpochStats]:
        """One EpochStats per epoch started so far, the current one last."""
        return list(self._state.history)

    def close(self) -> None:
        """Stop persistent workers (each frees its DPU set as it exits), free the DPU set
        of the main process and the batch slots kept for later epochs now, rather than when
        the loader is garbage-collected. Batches still held stay valid; the loader can be
        iterated again (it starts afresh)."""
        iterator = self._iterator
        self._iterator = None
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        self._state.close_group()
        self._state.release_buffers()
        self._state.close_resources()
        if self._pipeline is not None:
            self._pipeline.close_shared()

    def __enter__(self) -> "PIMDataLoader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _signature_with_extras() -> inspect.Signature:
    """torch's DataLoader signature followed by pimloader's keyword-only extras, so that
    tools reading the signature see exactly torch's parameters, kinds and defaults."""
    torch_signature = inspect.signature(DataLoader.__init__)
    extras = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
              for name, default in (("transform", None), ("backend", "auto"),
                                    ("on_error", "raise"), ("reduced_dct", "auto"),
                                    ("memory_format", torch.contiguous_format),
                                    ("nr_dpus", NR_DPUS), ("nr_tasklets", NR_TASKLETS),
                                    ("dpu_profile", ""), ("cache_bytes", 0),
                                    ("share_with", None), ("share_jobs", None),
                                    ("decode_on_dpu", "auto"), ("cache_scope", "loader"),
                                    ("cache_seekable", False),
                                    ("seek_index_bytes", SEEK_INDEX_BYTES))]
    return torch_signature.replace(
        parameters=[*torch_signature.parameters.values(), *extras])


PIMDataLoader.__init__.__signature__ = _signature_with_extras()
