"""One rank of the distributed shard test (spawned; importable by the children)."""
import datetime
import hashlib
import json
import os

from torch.utils.data import DataLoader, Dataset, get_worker_info


class Seen(Dataset):
    """What a read of TarShards' sample i gave, with the worker that read it."""

    def __init__(self, shards):
        self.shards = shards

    def __len__(self):
        return len(self.shards)

    def __getitem__(self, index):
        data, label = self.shards[index]
        worker = get_worker_info()
        return [self.shards.name(index), hashlib.sha1(data).hexdigest(), label,
                worker.id if worker else -1]


def pimloader_equals_torch(shards, sampler, epochs):
    """Whether PIMDataLoader (T.Decode() first, 2 workers) gives this rank torch's
    batches over the same sampler, every epoch."""
    import torch
    import torchvision.transforms.v2 as v2

    from _helpers import DecodedItems
    from pimloader import PIMDataLoader
    from pimloader import transforms as T
    steps = [v2.Resize((12, 12)), v2.RandomHorizontalFlip()]
    common = dict(batch_size=3, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        torch.manual_seed(epoch)
        want = list(DataLoader(DecodedItems(shards, steps), **common))
        torch.manual_seed(epoch)
        got = list(PIMDataLoader(shards, transform=T.Compose([T.Decode(), *steps]), **common))
        if len(want) != len(got) or not all(
                torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(want, got)):
            return False
    return True


def rank_main(rank, world_size, port, urls, out_dir, epochs):
    import torch.distributed as dist
    from torch.utils.data.distributed import DistributedSampler

    from pimloader import ShardOrderSampler, TarShards

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        dataset = Seen(TarShards(urls))
        samplers = {"distributed": DistributedSampler(dataset, shuffle=True, seed=5),
                    "shard_order": ShardOrderSampler(dataset.shards, window=1, seed=5,
                                                     num_replicas=world_size, rank=rank)}
        result = {}
        for name, sampler in samplers.items():
            loader = DataLoader(dataset, batch_size=3, sampler=sampler, num_workers=2,
                                multiprocessing_context="fork", collate_fn=list,
                                persistent_workers=True)
            result[name] = []
            for epoch in range(epochs):
                sampler.set_epoch(epoch)
                result[name].append([item for batch in loader for item in batch])
            result[f"pimloader_{name}"] = pimloader_equals_torch(dataset.shards, sampler, epochs)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as file:
            json.dump(result, file)
        dist.barrier()
    finally:
        dist.destroy_process_group()
