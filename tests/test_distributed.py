"""DistributedSampler under torch.distributed (gloo over loopback, two spawned ranks)."""
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from _helpers import assert_same_batches, distributed_rank_main

N = 22
EPOCHS = 2


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(180)
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_distributed_sampler_two_ranks(tmp_path):
    tmp.spawn(distributed_rank_main, args=(2, _free_port(), str(tmp_path), N, EPOCHS),
              nprocs=2, join=True)
    res = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for e in range(EPOCHS):
        shards = []
        for r in range(2):
            # each rank gets exactly what torch's DataLoader gives on that rank
            assert_same_batches(res[r]["pim"][e], res[r]["torch"][e], f"rank{r}.epoch{e}")
            shards.append([int(i) for b in res[r]["pim"][e] for i in b[1]])
        # disjoint shards whose union is the dataset
        assert len(shards[0]) == len(shards[1]) == N // 2
        assert not set(shards[0]) & set(shards[1]), shards
        assert sorted(shards[0] + shards[1]) == list(range(N))
    # a different epoch reshuffles (set_epoch took effect)
    assert [int(i) for b in res[0]["pim"][0] for i in b[1]] != [int(i) for b in res[0]["pim"][1] for i in b[1]]
    assert res[0]["gathered"] == res[1]["gathered"]
    assert res[0]["gathered"][1] == [int(i) for b in res[1]["pim"][0] for i in b[1]]
