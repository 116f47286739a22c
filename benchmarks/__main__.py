"""The benchmark job run by `make bench`: every benchmark with its default settings.

    python -m benchmarks            # full run, about 20-25 minutes on two cores (`make
                                    # bench` from a fresh clone, installs included: 22 min,
                                    # 2026-12-02; the DPU figures are PROJECTED, no
                                    # hardware needed)
    python -m benchmarks --quick    # smoke run, about 2 minutes (measured at load 4-5; the
                                    # quick coordinated_prep adds about 20 s)
    python -m benchmarks --refresh  # the full run, written over the committed results

Results, plots and docs/viability.md's page go to benchmarks/results/latest/ (git ignores
it); with --refresh (or PIMLOADER_BENCH_REFRESH=1, which a benchmark run alone honours too)
to the committed benchmarks/results/*.json and docs/. A benchmark that reads another's JSON
reads this run's, or the committed one where this run has none.
"""
from __future__ import annotations

import argparse
import os

from benchmarks import (audio, audio_dpu_projection, audio_fixed_point, audio_instruction_counts,
                        cluster_cache, cluster_cache_projection, coordinated_prep,
                        decode_projection, detection, detection_projection, dpu_decode_chain,
                        dpu_projection, harness, imagenet_pipeline, instruction_counts,
                        kernel_speed, loader_overhead, naive_sweep, op_costs, peers, plot,
                        sample_cache, shards, stall, viability)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny settings for a smoke run; results go to *.quick.json")
    parser.add_argument("--refresh", action="store_true",
                        help="write over the committed results (benchmarks/results/*.json, "
                             f"docs/): sets {harness.REFRESH_ENV}=1; by default they go to "
                             "benchmarks/results/latest/")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.refresh:
        os.environ[harness.REFRESH_ENV] = "1"
    print(f"results go to {harness.run_dir()}, plots to {harness.plots_dir()}", flush=True)
    flags = ["--quick"] if args.quick else []
    # naive_sweep reads dpu_projection's JSON, viability that of imagenet_pipeline,
    # kernel_speed, dpu_projection, op_costs, decode_projection, detection_projection, audio
    # and audio_dpu_projection: they run after them
    for benchmark in (loader_overhead, imagenet_pipeline, kernel_speed, instruction_counts,
                      dpu_projection, decode_projection, dpu_decode_chain, detection_projection,
                      sample_cache,
                      coordinated_prep,
                      naive_sweep, stall, op_costs, peers, shards, cluster_cache,
                      cluster_cache_projection, detection, audio,
                      audio_fixed_point, audio_instruction_counts, audio_dpu_projection,
                      viability):
        print(f"\n== {benchmark.__name__} ==", flush=True)
        benchmark.main(list(flags))
    if not args.quick:  # plot.py's PNGs, from the JSON just written (peers, detection, audio
        # and the other benchmarks with a --plot draw their own)
        print("\n== plots ==", flush=True)
        plot.main([])


if __name__ == "__main__":
    main()
