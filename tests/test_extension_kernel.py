"""A new kind of kernel run, added from outside the package through the public API only.

The kind here: per-channel 256-bin histograms of uint8 images (what a data-quality check or
histogram equalisation needs), a run of which is a batch of CHW images. It is registered on
the CPU backend alone; no method of any backend or of the router is added for it. Oracle:
numpy's bincount, image by image.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import torch

from pimloader.backends import Backend, Kernel, RunKind, register_kernel, register_kind
from pimloader.backends.base import Done
from pimloader.backends.cpu import CpuBackend
from pimloader.backends.select import Router

HISTOGRAMS = register_kind(RunKind("histograms", items="images",
                                   work="count histograms")).name


@dataclass
class HistogramRun:
    images: torch.Tensor            # uint8 [N, C, H, W]
    kind: ClassVar[str] = HISTOGRAMS


@register_kernel(HISTOGRAMS, CpuBackend)
class CpuHistograms(Kernel):
    closed = 0

    def unsupported(self, item) -> str:
        channels = item
        return "" if channels <= 4 else "count more than 4 channels"

    def submit(self, run: HistogramRun) -> Done:
        flat = run.images.reshape(*run.images.shape[:2], -1).long()
        counts = torch.zeros(*run.images.shape[:2], 256, dtype=torch.int64)
        counts.scatter_add_(2, flat, torch.ones_like(flat))
        return Done(counts)

    def close(self) -> None:
        type(self).closed += 1


class Elsewhere(Backend):
    """A backend with no kernel of the new kind (as the DPU backend has none)."""

    name = "elsewhere"
    kernel = "the elsewhere kernel"


def images(seed: int, n: int = 5, channels: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, channels, 13, 17), dtype=torch.uint8, generator=generator)


def bincounts(batch: torch.Tensor) -> np.ndarray:
    return np.stack([[np.bincount(channel.numpy().ravel(), minlength=256) for channel in image]
                     for image in batch])


def test_the_cpu_backend_runs_the_new_kind_and_its_kernel_closes_with_it():
    backend, batch = CpuBackend(), images(0)
    closed = CpuHistograms.closed
    counts = backend.submit(HistogramRun(batch)).wait()
    assert np.array_equal(counts.numpy(), bincounts(batch))
    assert backend.kernel_for(HISTOGRAMS) is backend.kernel_for(HISTOGRAMS)   # made once
    backend.close()
    assert CpuHistograms.closed == closed + 1


def test_the_router_passes_over_a_backend_without_the_kind_and_says_so_once():
    router = Router([Elsewhere(), CpuBackend()])
    with pytest.warns(UserWarning, match="the elsewhere kernel does not count histograms; "
                                         "such images run on the CPU kernel"):
        kernel = router.kernel_for(HISTOGRAMS, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # said once per router
        assert router.kernel_for(HISTOGRAMS, 3) is kernel
    batch = images(1, channels=4)
    assert np.array_equal(kernel.submit(HistogramRun(batch)).wait().numpy(), bincounts(batch))
    with pytest.raises(ValueError, match="no backend runs these images: the elsewhere kernel "
                                         "does not count histograms; the CPU kernel does not "
                                         "count more than 4 channels"):
        router.kernel_for(HISTOGRAMS, 5)
    with pytest.raises(NotImplementedError, match="the elsewhere kernel does not count"):
        Elsewhere().submit(HistogramRun(batch))


def test_a_subclass_inherits_its_base_classs_kernel_unless_it_registers_its_own():
    class Derived(CpuBackend):
        pass

    assert isinstance(Derived().kernel_for(HISTOGRAMS), CpuHistograms)
    assert Derived().kernel_for("images") is not None           # the CPU image kernel too


def test_registering_twice_or_for_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="CpuBackend already has a kernel for 'histograms'"):
        register_kernel(HISTOGRAMS, CpuBackend, CpuHistograms)
    with pytest.raises(ValueError, match="run kind 'histograms' is already registered"):
        register_kind(RunKind(HISTOGRAMS))
    with pytest.raises(ValueError, match="no run kind 'voxels' is registered"):
        register_kernel("voxels", CpuBackend, CpuHistograms)
