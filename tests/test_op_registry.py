"""The op registry (pimloader/transforms/registry.py): one registration per class, looked up
through the MRO, duplicates refused; toy ops registered from here through the public API
only lower, and their batches equal the Python ops' (torchvision as the oracle); every
registered op has its namesake in `pimloader.transforms`.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torch.utils.data import DataLoader, Dataset
from torchvision.datasets.vision import StandardTransform
from torchvision.transforms.v2 import functional as F

from _helpers import assert_same_batches
from pimloader import PIMDataLoader
from pimloader import transforms as T
from pimloader.transforms.registry import (flatten, given_once, op_of, register_container,
                                           register_op, registered_ops)


# -- toy ops, registered through the public API ---------------------------------------------

class Invert(v2.Transform):
    """255 - x: a pointwise op, so it lowers as an elementwise lookup table."""

    def transform(self, inpt, params):
        return 255 - inpt


class TopLeftCrop(v2.Transform):
    """The size x size corner at (0, 0): a geometric op expressed as the Geometry's crop."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def transform(self, inpt, params):
        return F.crop(inpt, 0, 0, self.size, self.size)


def draw_top_left_crop(step, size, channels):
    """(params for replay, size after, channels after, fuse): no random numbers."""
    out = (step.size, step.size)
    return {}, out, channels, lambda geometry: geometry.crop(0, 0, *out)


T.register_op(Invert, "elementwise")
T.register_op(TopLeftCrop, "geometry", draw=draw_top_left_crop,
              output_size=lambda step, size: (step.size, step.size))


class Images(Dataset):
    def __init__(self, images, transform=None) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index):
        image = self.images[index]
        return (self.transform(image) if self.transform else image), index % 3


def random_images(count: int, seed: int = 0) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, int(h), int(w)), dtype=torch.uint8, generator=generator)
            for h, w in torch.randint(48, 96, (count, 2), generator=generator)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_toy_ops_lower_and_equal_the_python_ops(num_workers):
    transform = v2.Compose([v2.Resize(40), TopLeftCrop(32), v2.RandomHorizontalFlip(),
                            Invert(), v2.ToDtype(torch.float32, scale=True)])
    plan = T.lower(transform)
    assert [type(s) for s in plan.geometric] == [v2.Resize, TopLeftCrop, v2.RandomHorizontalFlip]
    assert [type(s) for s in plan.elementwise] == [Invert, v2.ToDtype] and not plan.tail
    assert plan.output_size == (32, 32)
    images = random_images(10)
    torch.manual_seed(7)
    expected = list(DataLoader(Images(images, transform), batch_size=4, num_workers=num_workers))
    torch.manual_seed(7)
    loader = PIMDataLoader(Images(images), batch_size=4, num_workers=num_workers,
                           transform=transform)
    assert_same_batches(list(loader), expected)
    assert loader.stats()[-1].kernel_samples == len(images)


def test_the_toy_draw_replays_as_torchvision():
    plan = T.lower(v2.Compose([TopLeftCrop(16), Invert()]))
    image = random_images(1, seed=3)[0]
    params = plan.draw(*image.shape[1:])
    assert params.geometry.box == (0, 0, 16, 16)
    assert torch.equal(params.replay(image), F.crop(image, 0, 0, 16, 16))


# -- registry semantics -----------------------------------------------------------------------

def test_a_subclass_resolves_through_the_mro_unless_registered_itself():
    class MyResize(v2.Resize):
        pass

    class MyCrop(TopLeftCrop):
        pass

    class OwnCrop(TopLeftCrop):
        pass
    own = register_op(OwnCrop, "geometry", draw=draw_top_left_crop)
    assert op_of(MyResize(8)) is op_of(v2.Resize(8)) and op_of(MyResize(8)).cls is v2.Resize
    assert op_of(MyCrop(4)).cls is TopLeftCrop
    assert op_of(OwnCrop(4)) is own
    assert T.lower(MyResize(8)).geometric and not T.lower(MyResize(8), warn=False).tail


def test_an_exact_registration_leaves_subclasses_to_python():
    class MyGain(T.RandomGain):
        pass
    assert op_of(T.RandomGain()).role == "waveform"
    assert op_of(MyGain()) is None


def test_a_second_registration_is_refused():
    with pytest.raises(ValueError, match="Resize is already registered"):
        register_op(v2.Resize, "geometry", draw=draw_top_left_crop)
    with pytest.raises(ValueError, match="Invert is already registered"):
        T.register_op(Invert, "elementwise")
    with pytest.raises(ValueError, match="already registered as a container"):
        register_container(v2.Compose, list, samples=True, inputs=True)
    with pytest.raises(ValueError, match="role 'pixels' is not one of"):
        register_op(type("Other", (v2.Transform,), {}), "pixels")
    with pytest.raises(ValueError, match="lowers through its draw"):
        register_op(type("Drawless", (v2.Transform,), {}), "geometry")


def test_an_unknown_op_is_not_lowered():
    class Unknown(v2.Transform):
        def transform(self, inpt, params):
            return inpt
    assert op_of(Unknown()) is None
    with pytest.warns(UserWarning, match="Unknown cannot be lowered"):
        plan = T.lower(v2.Compose([v2.CenterCrop(8), Unknown()]))
    assert [type(s) for s in plan.tail] == [Unknown]


def test_roles_match_what_each_task_lowers():
    roles = {op.cls: op.role for op in registered_ops()}
    assert roles[v2.RandomZoomOut] == roles[v2.Pad] == "geometry"
    assert roles[v2.RandomPhotometricDistort] == "colour"
    assert roles[v2.SanitizeBoundingBoxes] == "boxes"
    assert roles[T.MelSpectrogram] == "spectrogram" and roles[T.TimeMasking] == "mask"
    assert roles[T.AddBackgroundNoise] == "waveform"
    probe = {op.cls for op in registered_ops() if op.probe}
    # the detection probe runs no Grayscale and no CenterCrop / RandomResizedCrop (their
    # functionals have no probe kernel): one table says so, where two lists disagreed
    assert v2.RandomZoomOut in probe and v2.RandomResizedCrop not in probe
    assert v1.Resize not in probe and v2.Grayscale not in probe


# -- one flattener, one "given twice" check -----------------------------------------------

def test_one_flattener():
    a, b, c = v2.RandomHorizontalFlip(), v2.Resize(8), T.RandomGain()
    nested = v2.Compose([a, v1.Compose([b, torch.nn.Sequential(c)])])
    assert flatten(nested) == [a, b, c]
    assert flatten(None) == []
    # called on whole samples, a v1 Compose (one argument per step) is one step
    assert flatten(nested, samples=True) == [a, nested.transforms[1]]
    assert flatten(StandardTransform(v2.Compose([a, b])), samples=True) == [a, b]
    with_target = StandardTransform(a, target_transform=b)
    assert flatten(with_target, samples=True) == [with_target]
    # RandomApply runs its steps with a probability: one step, not looked into
    maybe = v2.RandomApply([c], p=0.5)
    assert flatten(v2.Compose([maybe])) == [maybe]


def test_given_once():
    assert given_once(None, 1) == 1 and given_once(2, None) == 2 and given_once(None, None) is None
    with pytest.raises(ValueError, match="the transform is given twice"):
        given_once(1, 2)


# -- the namesakes ------------------------------------------------------------------------------

def _load_torchaudio_ops():
    ta = pytest.importorskip("torchaudio.transforms")
    op_of(ta.Spectrogram())    # the registry registers torchaudio's ops when it first meets one
    return ta


def test_every_registered_op_is_exported():
    try:
        _load_torchaudio_ops()
    except pytest.skip.Exception:
        pass
    ours = [op for op in registered_ops()
            if op.cls.__module__.split(".")[0] in ("torchvision", "torchaudio", "pimloader")]
    assert len(ours) >= 40
    for op in ours:
        assert op.name in T.__all__, op
        exported = getattr(T, op.name)
        if op.cls.__module__.startswith(("torchvision.transforms.v2", "pimloader")):
            assert exported is op.cls, op      # the very class: the same objects
        else:
            assert exported.__name__ == op.name, op   # v1's and torchaudio's: a namesake


def test_detection_recipes_from_pimloader_transforms_lower_on_the_probe():
    from pimloader.transforms.probe import for_probe
    ssd = T.Compose([T.RandomPhotometricDistort(p=1), T.RandomZoomOut(),
                     T.RandomIoUCrop(), T.RandomHorizontalFlip(), T.Resize((300, 300)),
                     T.SanitizeBoundingBoxes(), T.ClampBoundingBoxes(),
                     T.ToDtype(torch.float32, scale=True)])
    assert for_probe(ssd) is not None
    assert for_probe(T.Compose([T.RandomResizedCrop(64)])) is None
    assert for_probe(v2.Compose([v2.RandomIoUCrop(), v2.Resize(64)])) is not None


def test_torchaudio_objects_lower_as_pimloaders():
    ta = _load_torchaudio_ops()
    from pimloader.transforms.audio_spec import FeatureSpec
    theirs = [ta.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=40),
              ta.AmplitudeToDB(top_db=80.0), ta.FrequencyMasking(8), ta.TimeMasking(10)]
    ours = [T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=40),
            T.AmplitudeToDB(top_db=80.0), T.FrequencyMasking(8), T.TimeMasking(10)]
    assert FeatureSpec.from_transforms(theirs) == FeatureSpec.from_transforms(ours)
    assert op_of(theirs[0]).cls is ta.MelSpectrogram and op_of(theirs[0]).name == "MelSpectrogram"

    class MyMel(ta.MelSpectrogram):
        pass
    with pytest.raises(ValueError, match="start with Spectrogram"):
        FeatureSpec.from_transforms([MyMel(16000, n_mels=40)])


def test_v1_ops_lower_as_their_v2_equivalents():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = T.lower(v1.Compose([v1.Resize(40), v1.CenterCrop(32), v1.ColorJitter(0.2),
                                   v1.ToTensor(), v1.Normalize([0.5] * 3, [0.2] * 3)]))
    assert [type(s) for s in plan.geometric] == [v2.Resize, v2.CenterCrop]
    assert plan.colour[0].v1_arithmetic and len(plan.elementwise) == 2
    with pytest.warns(UserWarning, match="Pad cannot be lowered"):
        assert T.lower(v1.Pad(2, fill=(1, 2, 3))).tail    # v1 tensors: a number as fill only


def test_a_random_apply_of_waveform_steps_keeps_its_coin():
    """The audio pipeline used to open any object with a `transforms` list, RandomApply's
    included, and ran its steps every time; the one flattener opens containers only."""
    from pimloader.backends.cpu import CpuBackend
    from pimloader.backends.select import Router
    from pimloader.pipelines.audio_features import FusedFeatures
    transform = T.Compose([v2.RandomApply([T.RandomGain(6, 6, p=1.0)], p=0.0),
                           T.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=40)])
    fused = FusedFeatures.lower(transform)
    if fused is None:
        pytest.skip("the fused feature kernel is not built")
    clip = torch.randn(1, 4000, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    got = fused.finish([fused.prepare(clip)], Router([CpuBackend()]))[0]
    torch.manual_seed(0)
    assert torch.allclose(got, transform(clip), rtol=1e-4, atol=1e-2)
