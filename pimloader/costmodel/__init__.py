"""Projections of DPU speed from counted work and published figures (docs/cost_model.md).
Nothing here is a measurement: every figure is labelled as a projection with its assumptions."""
from .model import *  # noqa: F401,F403
from .model import __all__  # noqa: F401  (re-exported)
