"""The DPU backend behind the one backend interface: runs on a DPU set through the driver."""
from __future__ import annotations

from typing import Optional

from pimloader.options import NR_DPUS, NR_TASKLETS

from ..base import FEATURES, IMAGES, Backend, EncodedImage, ImageKernel, KernelRun
from ..registry import register_kernel
from .audio_backend import DpuFeatureRuns
from .driver import DpuBatch, DpuDriver


class DpuBackend(Backend):
    """The fused kernel on `nr_dpus` DPUs (`emulated`: pimloader's libdpu emulator).

    The DPU kernel crops, resizes, flips and converts; it neither pads nor adjusts colours
    (its image kernel's `unsupported` says so, and the router sends those samples to the CPU
    backend). Audio feature runs go to the DPU log-mel kernel (`DpuFeatureRuns`,
    audio_backend.py, with what it does not take). Each kernel's DPU set is allocated when its first run comes, so that
    a loader of images allocates no audio DPUs and one of clips no image DPUs.

    Run size (`run_rows`): at least one row per DPU, since the driver gives each DPU a
    contiguous run of whole samples and a DPU without one idles through the launch (a real
    rank launches all its 64 DPUs at once); at least `MIN_RUN_ROWS`, as each run costs a
    fixed overhead (planning, a launch, on the emulator NR_TASKLETS threads per DPU: runs of
    8 rows on 8 DPUs measured slower than runs of 32); but at most half the batch, so that a
    batch has two runs or more and its decode overlaps DPU work. With 64 DPUs and batches
    of 256: 4 runs of 64 rows.

    With `decode=True` (decode_on_dpu) it also decodes the JPEGs its decoder takes
    (`decode_refusal`): a run holding such encoded images is decoded and transformed on the
    same DPUs (`chain.DecodeStage`, one `dpu_load` per stage and run), on the image
    kernel's DPU set."""

    MIN_RUN_ROWS = 32
    kernel = "the DPU kernel"

    def __init__(self, nr_dpus: int = NR_DPUS, nr_tasklets: int = NR_TASKLETS, profile: str = "",
                 emulated: bool = True, decode: bool = False) -> None:
        self._settings = (nr_dpus, nr_tasklets, profile, emulated)
        self._driver: Optional[DpuDriver] = None
        self._decoder = None
        self.decode = decode
        self.name = "emulator" if emulated else "upmem"

    @property
    def settings(self) -> tuple:
        """(nr_dpus, nr_tasklets, profile, emulated) of the DPU sets its kernels allocate."""
        return self._settings

    @property
    def driver(self) -> DpuDriver:
        """The image kernel's DPU set, allocated on first use."""
        if self._driver is None:
            nr_dpus, nr_tasklets, profile, emulated = self._settings
            self._driver = DpuDriver(nr_dpus, nr_tasklets, profile, emulated=emulated)
        return self._driver

    @property
    def decoder(self):
        """The JPEG decoder as the stage before the kernel (chain.DecodeStage), built on first
        use; None when the backend does not decode."""
        if self._decoder is None and self.decode:
            from .chain import DecodeStage
            self._decoder = DecodeStage(self.driver, self._settings[3])
        return self._decoder

    @property
    def nr_dpus(self) -> int:
        return self.driver.nr_dpus

    @classmethod
    def run_rows_for(cls, nr_dpus: int, batch_rows: int) -> int:
        return max(1, min(max(nr_dpus, cls.MIN_RUN_ROWS), -(-batch_rows // 2)))

    def close(self) -> None:
        try:
            super().close()   # its kernels (the feature runs' DPU set)
        finally:
            driver, self._driver, self._decoder = self._driver, None, None
            if driver is not None:
                driver.close()


@register_kernel(IMAGES, DpuBackend)
class DpuImageKernel(ImageKernel):
    """The crop/resize kernel on the backend's image DPU set (and, with decode_on_dpu, the
    JPEG decoder before it on the same DPUs)."""

    backend: DpuBackend

    @property
    def decodes_images(self) -> bool:
        return self.backend.decode

    def decode_refusal(self, image: EncodedImage) -> str:
        if not self.backend.decode:
            return "decode_on_dpu is off"
        return self.backend.decoder.refusal(image)

    def unsupported(self, geometry) -> str:
        needs = (["pad"] if geometry.padding is not None else []) + \
            (["adjust colours"] if geometry.adjusts_colour else [])
        return " or ".join(needs)

    def submit(self, run: KernelRun) -> DpuBatch:
        if run.encoded:
            if not self.backend.decode:
                raise ValueError("a run of encoded images, and this DPU backend does not decode (decode_on_dpu)")
            return self.backend.decoder.submit(run)
        return self.backend.driver.submit(run.sources, run.boxes, run.size, run.out,
                                          **run.kernel_arguments())

    def run_rows(self, batch_rows: int) -> int:
        return self.backend.run_rows_for(self.backend.nr_dpus, batch_rows)


register_kernel(FEATURES, DpuBackend,
                lambda backend: DpuFeatureRuns(backend, *backend.settings))
