"""PIMDataLoader's pipeline and backend arguments, checked once, as they are made.

A leaf: every folder may import it (it imports nothing of pimloader). The defaults of the
DPU set (`NR_DPUS`, `NR_TASKLETS`) are stated here and only here; code that needs them
takes a `PipelineOptions` or these constants. Turning the options into the backend a
pipeline runs on is `pimloader.backends.select.resolve`, in one place.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

NR_DPUS = 64        # the DPU set a process allocates (a rank's 64 DPUs)
NR_TASKLETS = 16    # tasklets per DPU (the hardware runs up to 24)

BACKENDS = ("auto", "cpu", "emulator", "upmem")
DECODE_ON_DPU = ("auto", True, False)


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

    def __post_init__(self) -> None:
        if (isinstance(self.cache_bytes, bool) or not isinstance(self.cache_bytes, int)
                or self.cache_bytes < 0):
            raise ValueError(f"cache_bytes must be an int >= 0 (0: no cache), "
                             f"got {self.cache_bytes!r}")
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
