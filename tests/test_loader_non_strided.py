"""Tensors that are not dense strided ones (nested, sparse COO/CSR/CSC, jagged) under the
default collate: they must take torch's ordinary path, so that the loader gives torch's own
result or torch's own error, never a crash in the slot layout.

Found by PyTorch's test_dataloader.py (nested tensors: "NestedTensorImpl doesn't support
sizes" from the layout code). The oracle is torch's DataLoader on the same dataset.
"""
import warnings

import pytest
import torch
from torch.utils.data import Dataset

from _helpers import PIMDataLoader, TorchDataLoader, assert_same

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")]


def _dense(i):
    return torch.arange(4, dtype=torch.float32).reshape(2, 2) + i


def _make(kind, i):
    if kind == "nested":
        return torch.nested.nested_tensor([_dense(i)[: 1 + i % 2], _dense(i)])
    if kind == "jagged":
        return torch.nested.nested_tensor([_dense(i)[: 1 + i % 2], _dense(i)],
                                          layout=torch.jagged)
    if kind == "coo":
        return _dense(i).to_sparse()
    if kind == "csr":
        return _dense(i).to_sparse_csr()
    if kind == "csc":
        return _dense(i).to_sparse_csc()
    return _dense(i)


class Samples(Dataset):
    """Sample i is `kinds[i]` (a tensor kind above), alone, in a tuple with a label, or in a
    dict; the first samples can be dense so that the slot layout is fixed before the odd
    tensor arrives."""

    def __init__(self, kinds, wrap="bare"):
        self.kinds, self.wrap = kinds, wrap

    def __len__(self):
        return len(self.kinds)

    def __getitem__(self, i):
        tensor = _make(self.kinds[i], i)
        if self.wrap == "tuple":
            return tensor, i
        if self.wrap == "dict":
            return {"x": tensor, "label": i}
        return tensor


def _outcome(cls, dataset, **kw):
    """Every batch, or the first error as (type, its original message's last line)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iterator = iter(cls(dataset, **kw))
        try:
            outcome = "ok", [_densified(batch) for batch in iterator]
        except Exception as error:  # noqa: BLE001 - compared with torch's
            lines = [line for line in str(error).splitlines() if line.strip()]
            outcome = "error", (type(error), lines[-1] if lines else "")
            # drop the frames that hold the iterator, so that it shuts its workers down
            # now, in order (left to the cycle collector, torch's iterator may find its
            # index queues closed first, and its workers wait out a 5 s poll)
            error.__traceback__ = error.__context__ = error.__cause__ = None
        del iterator
        return outcome


def _densified(batch):
    """Sparse and nested tensors compared by their values (torch.equal takes neither)."""
    if isinstance(batch, torch.Tensor):
        if batch.is_nested:
            return ("nested", str(batch.layout),
                    [t.clone() for t in batch.unbind()])
        if batch.layout is not torch.strided:
            return ("sparse", str(batch.layout), batch.to_dense())
        return batch
    if isinstance(batch, dict):
        return {key: _densified(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_densified(item) for item in batch)
    return batch


def _assert_like_torch(dataset, **kw):
    want = _outcome(TorchDataLoader, dataset, **kw)
    got = _outcome(PIMDataLoader, dataset, **kw)
    assert got[0] == want[0], f"torch: {want}\npimloader: {got}"
    if want[0] == "error":
        assert got[1] == want[1], f"torch raised {want[1]}, pimloader {got[1]}"
    else:
        assert_same(got[1], want[1])
    return want


KINDS = ["nested", "jagged", "coo", "csr", "csc"]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("wrap", ["bare", "tuple", "dict"])
@pytest.mark.parametrize("kind", KINDS)
def test_batches_of_non_strided_tensors_fail_as_torch_fails(kind, wrap, num_workers):
    want = _assert_like_torch(Samples([kind] * 4, wrap), batch_size=2,
                              num_workers=num_workers)
    assert want[0] == "error"  # default_collate refuses them: this is torch's own error


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_a_non_strided_tensor_after_dense_ones_fails_as_torch_fails(kind, num_workers):
    # A dense first sample fixes a slot layout for (2, 2) tensors; the odd one arrives
    # after it, where the layout's column checks and per-sample splitter meet it: in the
    # same batch, or first or second in a later one.
    for position in (1, 4, 5):
        kinds = ["dense"] * 8
        kinds[position] = kind
        _assert_like_torch(Samples(kinds, "tuple"), batch_size=2, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["nested", "coo", "csr"])
def test_non_strided_tensors_without_batching_come_back_as_under_torch(kind, num_workers):
    want = _assert_like_torch(Samples([kind] * 3, "tuple"), batch_size=None,
                              num_workers=num_workers)
    assert want[0] == "ok"


def test_a_custom_collate_gets_non_strided_tensors_as_under_torch():
    want = _assert_like_torch(Samples(["coo", "nested", "csr", "dense"], "tuple"),
                              batch_size=2, num_workers=2, collate_fn=list)
    assert want[0] == "ok"


@pytest.mark.parametrize("steps", ["flip", "crop"])
@pytest.mark.parametrize("kind", ["nested", "coo"])
def test_an_in_memory_image_transform_leaves_non_strided_tensors_to_torchvision(kind, steps):
    """With transform= lowered to the fused kernel, a nested or sparse uint8 "image" of
    three dims is not pixels the kernel can read: it gets torchvision's transform, and so
    torchvision's result (a flip that draws no flip and a dtype conversion work on both) or
    torchvision's error (CenterCrop takes neither)."""
    from torchvision.transforms import v2 as T

    if kind == "nested":
        image = torch.nested.nested_tensor([torch.arange(24, dtype=torch.uint8).view(4, 6)] * 3)
    else:
        image = torch.arange(72, dtype=torch.uint8).view(3, 4, 6).to_sparse()
    first = T.RandomHorizontalFlip(0.0) if steps == "flip" else T.CenterCrop(2)
    transform = T.Compose([first, T.ToDtype(torch.float32, scale=True)])
    try:
        want = ("ok", transform(image))
    except Exception as error:  # noqa: BLE001 - compared below
        want = ("error", (type(error), str(error).splitlines()[0]))
    loader = PIMDataLoader([(image, 0)], batch_size=None, transform=transform)
    try:
        got = ("ok", next(iter(loader))[0])
    except Exception as error:  # noqa: BLE001
        got = ("error", (type(error), str(error).splitlines()[0]))
    assert got[0] == want[0], (got, want)
    assert want[0] == ("ok" if steps == "flip" else "error")
    if want[0] == "ok":
        assert_same(_densified(got[1]), _densified(want[1]))
    else:
        assert got[1] == want[1]
