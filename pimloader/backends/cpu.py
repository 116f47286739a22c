"""The CPU backend: the fused kernel of csrc/cpu_kernels.c, and the audio feature kernel of
csrc/audio_features.c, run in the calling thread."""
from __future__ import annotations

from .base import FEATURES, IMAGES, Backend, Done, FeatureRun, ImageKernel, Kernel, KernelRun
from .kernels import resized_crop_batch
from .registry import register_kernel


class CpuBackend(Backend):
    """Runs every geometry (padding and colour included) and every feature spec; a run
    completes inside submit."""

    name = "cpu"
    kernel = "the CPU kernel"


@register_kernel(IMAGES, CpuBackend)
class CpuImageKernel(ImageKernel):
    writes_strided_out = True   # the kernel writes rows with the output's row and plane pitch
    RUN_ROWS = 32  # per call: amortises the call's overhead, keeps the decoded crops in cache

    def submit(self, run: KernelRun) -> Done:
        resized_crop_batch(run.sources, run.boxes, run.size, run.out, **run.kernel_arguments())
        return Done(run.out)

    def run_rows(self, batch_rows: int) -> int:
        return self.RUN_ROWS


@register_kernel(FEATURES, CpuBackend)
class CpuFeatureKernel(Kernel):
    def submit(self, run: FeatureRun) -> Done:
        from .audio_features import cpu_features   # pimloader._audio: built with _kernels
        return Done(cpu_features(run.waveforms, run.spec, run.freq_masks, run.time_masks))
