"""The one registry of the ops pimloader understands, and of the containers it looks into.

Every op (a transform class: torchvision's v2 and v1, torchaudio's, pimloader's) that some
task lowers is registered once, with its *role*, what it lowers to, and its *draw*: the
torch RNG calls of its `make_params`, in order. Every task asks this registry (`op_of`);
nothing else tests op classes. As torchvision v2's kernel registry
(`functional/_utils.py`: `_register_kernel_internal`, `_get_kernel`), there is one
registration per class, a second one is refused, and a class is looked up through its MRO,
so that a subclass resolves to its nearest registered base, unless it is registered itself
or that base was registered with `subclasses=False` (a subclass may compute something
else: the audio steps are matched exactly).

Roles, and what the fields mean for each (`Op`):

    decode       encoded bytes -> an image or waveform (Decode): the loader reads the
                 bytes natively instead, where the dataset's items are encoded
    to_image     a conversion to a uint8 image tensor: a no-op on decoded images
    geometry     pad, crop, resize, flip: `draw` fused into the kernel's Geometry;
                 `output_size(step, size)` the fixed output size (None: not fixed)
    colour       colour ops on uint8 values: `draw` fused into the Geometry's colour ops;
                 `channels(step, channels)` the channels it makes
    elementwise  per-pixel ops folded into a lookup table per channel (the table is the
                 transform run on a ramp of the 256 values: any pointwise op lowers exactly)
    boxes        ops on a detection sample's boxes only (the image passes unchanged)
    identity     returns its input
    spectrogram, to_db, mask
                 the steps of audio features, in that order: `features(step)` gives the
                 FeatureSpec arguments it stands for
    waveform     a waveform step run natively: `draw(step, shape)` gives its operations

An image `draw(step, size, channels)` returns (params for torchvision's replay, None when
not applied; the size after it; the channels after it; `fuse`: Geometry -> Geometry, or
None when it changes nothing). `equivalent(step)` gives what lowers in its place (a v1 op:
the v2 op that draws and computes the same; None: nothing, the step stays as it is).
`probe`: the detection pipeline can run the op on its pixel-less image probe (its pixel
kernels record the Geometry, transforms/probe.py); `probe_form` is the class its probe copy
takes (the same draws, computed faster); `plain_tensor`: it makes a plain tensor, not a
tv_tensors.Image (ToPureTensor, PILToTensor).

Containers (Compose, nn.Sequential, a dataset's StandardTransform) are registered apart
(`register_container`) and looked into by the one flattener, `flatten`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["Op", "ROLES", "register_op", "op_of", "registered_ops", "register_container",
           "flatten", "given_once"]

DECODE = "decode"
TO_IMAGE, GEOMETRY, COLOUR, ELEMENTWISE = "to_image", "geometry", "colour", "elementwise"
BOXES, IDENTITY, WAVEFORM = "boxes", "identity", "waveform"
SPECTROGRAM, TO_DB, MASK = "spectrogram", "to_db", "mask"
ROLES = (DECODE, TO_IMAGE, GEOMETRY, COLOUR, ELEMENTWISE, BOXES, IDENTITY, SPECTROGRAM, TO_DB, MASK,
         WAVEFORM)


@dataclass(frozen=True)
class Op:
    """One registered op (see the module's docstring for the fields per role)."""

    cls: type
    role: str
    name: str                               # its namesake in pimloader.transforms
    draw: Optional[Callable] = None
    accepts: Optional[Callable] = None      # (step) -> whether this instance lowers
    equivalent: Optional[Callable] = None
    output_size: Optional[Callable] = None
    channels: Optional[Callable] = None
    features: Optional[Callable] = None
    probe: bool = False
    probe_form: Optional[type] = None
    plain_tensor: bool = False              # makes a plain tensor, not a tv_tensors.Image
    subclasses: bool = True
    draft: bool = False                     # reduced_dct="auto" decodes under it at a
    #                                         reduced DCT scale (its crops shrink a lot)
    from_pil: Optional[str] = None          # what it makes of a PIL image: "image" (a
    #                                         tv_tensors.Image), "tensor", None (keeps PIL)

    @property
    def family(self) -> str:
        """Whose op it is: "v2", "v1" (torchvision's transforms, which return plain
        tensors), "torchaudio", or the defining package's name."""
        module = self.cls.__module__
        if module.startswith("torchvision.transforms.v2"):
            return "v2"
        if module.startswith("torchvision.transforms"):
            return "v1"
        return module.split(".")[0]

    def takes(self, step) -> bool:
        """Whether this instance lowers (its arguments are ones the kernels compute)."""
        return self.accepts is None or bool(self.accepts(step))


@dataclass(frozen=True)
class Container:
    """A class whose instances run a list of steps in order (`steps(container)`; None: this
    one is not looked into). `samples`: it passes a whole sample (image, target) to each
    step; `inputs`: it passes one input to each step."""

    cls: type
    steps: Callable
    samples: bool
    inputs: bool


_OPS: dict[type, Op] = {}
_CONTAINERS: dict[type, Container] = {}
_RESOLVED: dict[type, Optional[Op]] = {}    # type -> its Op through the MRO (a cache)
# ops registered when the first object of such a module is looked up (importing torchaudio
# takes seconds: only a program that made a torchaudio transform pays for it)
_DEFERRED = {"torchaudio": "pimloader.transforms._audio_ops:register_torchaudio"}


def register_op(cls: type, role: str, *, name: Optional[str] = None, draw=None, accepts=None,
                equivalent=None, output_size=None, channels=None, features=None,
                probe: bool = False, probe_form: Optional[type] = None,
                plain_tensor: bool = False, subclasses: bool = True, draft: bool = False,
                from_pil: Optional[str] = None) -> Op:
    """Register the transform class `cls` as an op of `role` (one of ROLES); returns the Op.

    A class is registered once: a second registration raises ValueError. Subclasses of `cls`
    resolve to it (unless registered themselves, or `subclasses=False`)."""
    if not isinstance(cls, type):
        raise TypeError(f"register_op takes a class, not {cls!r}")
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if cls in _OPS:
        raise ValueError(f"{_qualified(cls)} is already registered (as a {_OPS[cls].role} "
                         f"op); an op is registered once")
    if role in (GEOMETRY, COLOUR, WAVEFORM) and draw is None and equivalent is None \
            and not probe:
        raise ValueError(f"a {role} op lowers through its draw: register {cls.__name__} "
                         f"with draw=")
    op = Op(cls, role, name or cls.__name__, draw, accepts, equivalent, output_size,
            channels, features, probe, probe_form, plain_tensor, subclasses, draft,
            from_pil)
    _OPS[cls] = op
    _RESOLVED.clear()
    return op


def register_container(cls: type, steps: Callable, *, samples: bool, inputs: bool) -> None:
    """Register `cls` as a container of steps for `flatten` (once per class)."""
    if cls in _CONTAINERS:
        raise ValueError(f"{_qualified(cls)} is already registered as a container")
    _CONTAINERS[cls] = Container(cls, steps, samples, inputs)


def op_of(step) -> Optional[Op]:
    """The Op of `step` (a transform object): its class's, or its nearest registered
    base's through the MRO; None when pimloader does not lower it."""
    kind = type(step)
    if kind not in _RESOLVED:
        _load_deferred(kind)
        _RESOLVED[kind] = _resolve(kind)
    return _RESOLVED[kind]


def registered_ops() -> list[Op]:
    """Every registered op, in registration order (deferred ones once loaded)."""
    return list(_OPS.values())


def _resolve(kind: type) -> Optional[Op]:
    for cls in kind.__mro__:
        op = _OPS.get(cls)
        if op is not None:
            return op if cls is kind or op.subclasses else None
    return None


def _load_deferred(kind: type) -> None:
    top = kind.__module__.split(".")[0]
    target = _DEFERRED.pop(top, None)
    if target is not None:
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)()


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _container_of(transform) -> Optional[Container]:
    for cls in type(transform).__mro__:
        if cls in _CONTAINERS:
            return _CONTAINERS[cls]
    return None


def flatten(transform, *, samples: bool = False) -> list:
    """The steps `transform` runs, in order, nested containers looked into; None: []. With
    `samples`, the steps of a transform called on whole samples (image, target): only the
    containers that pass each step the whole sample are looked into (a v1 Compose calls
    each step with one argument: it stays one step)."""
    if transform is None:
        return []
    container = _container_of(transform)
    if container is None or not (container.samples if samples else container.inputs):
        return [transform]
    steps = container.steps(transform)
    if steps is None:
        return [transform]
    return [step for inner in steps for step in flatten(inner, samples=samples)]


def given_once(own, given, what: str = "transform"):
    """The one transform of a dataset's own (`own`) and the loader's (`given`); both given
    is a ValueError."""
    if own is not None and given is not None:
        raise ValueError(f"the {what} is given twice, to the dataset and to PIMDataLoader; "
                         f"give it to one of them")
    return given if given is not None else own
