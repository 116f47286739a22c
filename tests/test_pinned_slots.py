"""pin_memory=True with workers: each slot is page-locked once, when the main process first
maps it, and unregistered when the loader lets it go; batches are never pinned by copying.

No GPU is reachable here, so the CUDA runtime is a recording fake: this checks the loader's
side of the contract (what it registers, when, how often), not CUDA's."""
import gc
import pytest
import torch
from _helpers import PIMDataLoader, TensorDS


class FakeCudart:
    """Records what the loader asks of the CUDA runtime (no GPU on this machine)."""

    def __init__(self):
        self.registered, self.unregistered = [], []

    def cudaHostRegister(self, pointer, nbytes, flags):
        self.registered.append((pointer, nbytes))
        return 0

    def cudaHostUnregister(self, pointer):
        self.unregistered.append(pointer)
        return 0

    def cudaGetErrorString(self, status):
        return "fake error"


@pytest.fixture
def fake_cuda(monkeypatch):
    cudart = FakeCudart()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda *args, **kwargs: torch.device("cuda"))
    return cudart


def test_each_slot_is_registered_once_not_each_batch(fake_cuda):
    loader = PIMDataLoader(TensorDS(48), batch_size=4, num_workers=2, pin_memory=True,
                           persistent_workers=True, multiprocessing_context="fork")
    pointers = set()
    for _ in range(2):
        for batch in loader:
            pointers.add(batch[0].untyped_storage().data_ptr())
    del batch
    registered = dict(fake_cuda.registered)
    assert len(fake_cuda.registered) == len(registered), "a slot was registered twice"
    assert pointers <= set(registered), "a batch was lent from an unregistered slot"
    assert len(registered) < 2 * 12, "registered per batch, not per slot"
    loader.close()
    gc.collect()
    assert sorted(fake_cuda.unregistered) == sorted(registered)
