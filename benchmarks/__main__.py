"""The benchmark job run by `make bench`: every benchmark with its default settings.

    python -m benchmarks            # full run, about 10 minutes on two cores (+ under a minute
                                    # for dpu_projection: PROJECTED DPU figures, no hardware;
                                    # + about a minute for instruction_counts, where
                                    # riscv64-unknown-elf-gcc is installed; + about 40 s for
                                    # naive_sweep, stall, op_costs and viability, 4 minutes
                                    # at load 8-14; + about 90 s for decode_projection:
                                    # PROJECTED decode on DPUs, with its instruction count;
                                    # + 1-1.5 minutes for peers, 6 at load 14; + 1-5 minutes
                                    # for audio_fixed_point, the DPU log-mel kernel's dB
                                    # errors, about 20 s for audio_instruction_counts (with
                                    # riscv64-unknown-elf-gcc) and 20 s for
                                    # audio_dpu_projection: PROJECTED; + 15-45 s for
                                    # detection_projection: PROJECTED;
                                    # + about a minute for coordinated_prep; + about 15 s for
                                    # dpu_decode_chain: the whole loader with decode_on_dpu
                                    # on the emulator, equal to the CPU's, and its bytes;
                                    # + 2-3 minutes for shards: tar shards local and over
                                    # nginx, an Arrow table, against their own loaders)
    python -m benchmarks --quick    # smoke run, about 2 minutes (measured at load 4-5; the
                                    # quick coordinated_prep adds about 20 s)
"""
from __future__ import annotations

import argparse

from benchmarks import (audio, audio_dpu_projection, audio_fixed_point, audio_instruction_counts,
                        coordinated_prep, decode_projection, detection, detection_projection,
                        dpu_decode_chain,
                        dpu_projection, imagenet_pipeline,
                        instruction_counts, kernel_speed, loader_overhead, naive_sweep, op_costs,
                        peers, plot, sample_cache, shards, stall, viability)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny settings for a smoke run; results go to *.quick.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    flags = ["--quick"] if args.quick else []
    # naive_sweep reads dpu_projection's JSON, viability that of imagenet_pipeline,
    # kernel_speed, dpu_projection, op_costs, decode_projection, detection_projection, audio
    # and audio_dpu_projection: they run after them
    for benchmark in (loader_overhead, imagenet_pipeline, kernel_speed, instruction_counts,
                      dpu_projection, decode_projection, dpu_decode_chain, detection_projection,
                      sample_cache,
                      coordinated_prep,
                      naive_sweep, stall, op_costs, peers, shards, detection, audio,
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
