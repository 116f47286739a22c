"""Projections of DPU speed from counted work and published figures (docs/cost_model.md).
Nothing here is a measurement: every figure is labelled as a projection with its assumptions.

`assumptions`: the published figures and instruction costs, each with its source;
`work`: the kernel's work counted from a batch's tables over the driver's own plan;
`model`: the projection of a measured run onto real systems;
`detection`: what the detection pipelines change (size groups, zoom-out canvases).
"""
from .assumptions import *  # noqa: F401,F403
from .detection import *  # noqa: F401,F403
from .model import *  # noqa: F401,F403
from .work import *  # noqa: F401,F403
from . import (assumptions as _assumptions, detection as _detection, model as _model,
               work as _work)

__all__ = [*_assumptions.__all__, *_work.__all__, *_model.__all__, *_detection.__all__]
