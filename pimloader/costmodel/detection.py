"""PROJECTED DPU speed of the detection pipelines: what changes from classification.

The geometry kernel is the same (crop, resize, flips, dtype and normalisation in one pass),
so a launch of detection images is projected exactly as a classification launch is
(`model.project` over an emulated run's counts). Three things differ, and this module
holds what they change:

1. **Output sizes vary.** Faster R-CNN's shortest side 800 / max 1333 gives one output size
   per aspect ratio; the driver runs one output size per launch (a kernel run has one size),
   so a pipeline's images are projected as *size groups*, each launched on its own, and
   combined by their shares: seconds per image = sum of share / rate over the groups
   (`combine`).
2. **Zoom-out canvases.** The DPU kernel does not pad (`DpuBackend.unsupported`): a sample
   whose geometry pads (RandomZoomOut's canvas) runs on the host's CPU kernel, which the
   projection charges to the host beside decoding. `canvas_bytes` says what a DPU would be
   sent for such a sample if the host filled the canvas (the crop box of the padded image)
   against the source pixels inside it (what a kernel that pads on the DPU would need).
3. **Larger outputs.** A 800x1066 float32 image is 10 MB, 17 times a 224x224 one: the
   DPU->host gather dominates (`model.project` counts it from the emulated run's lengths).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class SizeGroup:
    """A pipeline's images of one output size, launched together."""

    size: tuple[int, int]
    share: float             # of the pipeline's images
    images_per_s: float      # PROJECTED DPU-path rate of launches of this group


def combine(groups: Sequence[SizeGroup], host_s_per_image: float, host_cores: int) -> dict:
    """The pipeline's PROJECTED images/s: the DPU path runs the groups one launch after
    another (seconds per image: sum of share / rate), the host decodes every image and runs
    the samples the DPUs cannot (their cost is in `host_s_per_image`, per image of the
    pipeline, on one core; cores scale linearly: assumed); the slower side bounds it."""
    dpu_s = sum(group.share / group.images_per_s for group in groups
                if group.share > 0 and math.isfinite(group.images_per_s))
    dpu_rate = 1.0 / dpu_s if dpu_s > 0 else math.inf
    host_rate = host_cores / host_s_per_image if host_s_per_image > 0 else math.inf
    return {"dpu_images_per_s": dpu_rate, "host_images_per_s": host_rate,
            "images_per_s": min(dpu_rate, host_rate),
            "bound": "host (read, probe, decode, padded samples, copies)" if host_rate < dpu_rate
            else "DPU path"}


def canvas_bytes(geometry, channels: int = 3) -> tuple[int, int]:
    """(canvas, source) bytes of a padded sample's crop box: all of it, as a DPU would be
    sent if the host filled the canvas; the decoded image's pixels inside it, as a kernel
    that pads on the DPU would be sent. For a sample that does not pad both are the box."""
    top, left, height, width = geometry.box
    canvas = height * width * channels
    padding = geometry.padding
    if padding is None or geometry.source is None:
        return canvas, canvas
    source_h, source_w = geometry.source
    rows = _overlap(top, height, padding.top, source_h)
    columns = _overlap(left, width, padding.left, source_w)
    return canvas, rows * columns * channels


def _overlap(start: int, length: int, other_start: int, other_length: int) -> int:
    return max(0, min(start + length, other_start + other_length) - max(start, other_start))


__all__ = ["SizeGroup", "canvas_bytes", "combine"]
