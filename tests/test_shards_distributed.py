"""Tar shards split over 2 gloo ranks x 2 DataLoader workers (torch.multiprocessing.spawn):
with DistributedSampler and with ShardOrderSampler's rank split, every sample is read
exactly once per epoch, with the bytes and label of the local shards; and on each rank
PIMDataLoader (T.Decode() first) gives torch's batches over the same sampler."""
import hashlib
import json

import pytest
import torch.distributed as dist
import torch.multiprocessing as tmp

from _http_servers import free_port
from _shard_data import make_folder, write_wds_shards
from _shard_ranks import rank_main
from pimloader import TarShards

EPOCHS = 2


@pytest.mark.timeout(180)
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_two_ranks_two_workers_see_every_sample_once(tmp_path, leak_check):
    folder = make_folder(tmp_path, n=24)
    urls = write_wds_shards(folder, tmp_path / "shards", per_shard=6)
    shards = TarShards(urls)
    want = sorted([shards.name(i), hashlib.sha1(shards[i][0]).hexdigest(), shards[i][1]]
                  for i in range(len(shards)))
    tmp.spawn(rank_main, args=(2, free_port(), urls, str(tmp_path), EPOCHS), nprocs=2,
              join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for sampler in ("distributed", "shard_order"):
        for epoch in range(EPOCHS):
            seen = [ranks[r][sampler][epoch] for r in range(2)]
            assert sorted(item[:3] for items in seen for item in items) == want, sampler
            for items in seen:
                assert {item[3] for item in items} == {0, 1}   # both workers read
        assert all(ranks[r][f"pimloader_{sampler}"] for r in range(2)), \
            f"{sampler}: PIMDataLoader's batches differ from torch's on a rank"
        orders = [[item[0] for item in ranks[0][sampler][epoch]] for epoch in range(EPOCHS)]
        assert orders[0] != orders[1], f"{sampler}: set_epoch did not reshuffle"
    leak_check.assert_clean(what="the distributed run", procs_only=True)
