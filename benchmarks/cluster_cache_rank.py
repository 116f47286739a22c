"""One rank of benchmarks/cluster_cache.py under torchrun: `python -m torch.distributed.run
... -m benchmarks.cluster_cache_rank JOB_FILE OUT_DIR` runs the job's plans on the rank
torchrun's environment names (RANK, WORLD_SIZE; gloo through env://)."""
from __future__ import annotations

import json
import os
import sys

from benchmarks.cluster_cache import rank_main


def main(argv: list[str]) -> None:
    job_file, out_dir = argv
    with open(job_file) as file:
        job = json.load(file)
    rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", job, out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
