"""Behaviours found by running PyTorch's own test_dataloader.py against PIMDataLoader.

Each test states what torch does and checks that PIMDataLoader does the same.
"""
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from _helpers import PIMDataLoader, TorchDataLoader

pytestmark = pytest.mark.timeout(120)


class UnevenShards(IterableDataset):
    """Worker i yields `sizes[i]` samples: workers run out at different times."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __iter__(self):
        return iter(range(self.sizes[get_worker_info().id]))


# Three workers on purpose (one per shard): where the machine has fewer cores, torch's
# worker-count advice (which PIMDataLoader repeats, as a DataLoader) is not this test's subject.
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes:UserWarning")
@pytest.mark.parametrize("batch_size,drop_last,expected", [(None, False, 24), (7, False, 4),
                                                            (7, True, 2)])
def test_workers_that_finish_at_different_times_do_not_block_the_others(
        batch_size, drop_last, expected):
    # An exhausted worker exits while the others still send: it must flush and release the
    # result queue's shared write lock on the way out, as torch's workers do.
    for prefetch_factor in (2, 3, 4, 2, 3, 4):
        loader = PIMDataLoader(UnevenShards([0, 4, 20]), num_workers=3, batch_size=batch_size,
                               drop_last=drop_last, prefetch_factor=prefetch_factor)
        assert len(list(loader)) == expected


def test_subscripting_the_class_works_like_torch():
    assert TorchDataLoader[list[torch.Tensor]] is not None
    assert PIMDataLoader[list[torch.Tensor]].__origin__ is PIMDataLoader


def _init_that_cannot_be_pickled():
    return lambda worker_id: None


def test_unpicklable_worker_arguments_warn_like_torch():
    loader = PIMDataLoader(list(range(4)), num_workers=1, multiprocessing_context="spawn",
                           worker_init_fn=_init_that_cannot_be_pickled())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises((AttributeError, TypeError)):
            list(loader)
    assert any("Got pickle error" in str(w.message) for w in caught)


RUN_OUT_OF_FDS = textwrap.dedent('''
    import resource, sys
    import torch
    from torch.utils.data import IterableDataset
    from pimloader import PIMDataLoader

    class Tensors(IterableDataset):
        def __iter__(self):
            return (torch.randn(2, 2) for _ in range(200))

    kept = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100))
    try:
        # batch_size=None: every sample takes the ordinary path, one shared tensor (one fd)
        # per batch, all kept alive
        for batch in PIMDataLoader(Tensors(), batch_size=None, num_workers=1,
                                   multiprocessing_context="fork"):
            kept.append(batch)
        print("no error")
    except RuntimeError as error:
        print("RuntimeError", "ulimit -n" in str(error), "set_sharing_strategy" in str(error))
''')


def test_running_out_of_file_descriptors_says_so_like_torch():
    result = subprocess.run([sys.executable, "-c", RUN_OUT_OF_FDS], capture_output=True,
                            text=True, timeout=100)
    assert result.stdout.strip().splitlines()[-1] == "RuntimeError True True", (
        result.stdout, result.stderr[-2000:])


RUN_OUT_OF_FDS_IN_A_WORKER = textwrap.dedent('''
    import resource
    import torch
    from pimloader.loader._worker import _allocate_shared

    kept = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    try:
        for _ in range(200):
            kept.append(_allocate_shared(64))
        print("no error")
    except RuntimeError as error:
        print("RuntimeError", "ulimit -n" in str(error), "set_sharing_strategy" in str(error))
''')


def test_a_worker_running_out_of_file_descriptors_says_so_like_torch():
    """Each slot holds a descriptor in its worker too (torch's suite, test_fd_limit_exceeded
    with persistent workers, sometimes hits the limit there first): the worker's error
    gives torch's advice as well."""
    result = subprocess.run([sys.executable, "-c", RUN_OUT_OF_FDS_IN_A_WORKER],
                            capture_output=True, text=True, timeout=100)
    assert result.stdout.strip().splitlines()[-1] == "RuntimeError True True", (
        result.stdout, result.stderr[-2000:])
