"""Command line for `pimloader.decode.make_seekable`: copy an image folder with its JPEGs
rewritten losslessly with restart markers, from which pimloader decodes a crop without
the rest of the image (the same pixels for every decoder).

    python -m pimloader.make_seekable /data/imagenet/train /data/imagenet/train-seekable

On a terminal, a line on stderr counts the files done (TQDM_DISABLE=1 hides it).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .decode import make_seekable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pimloader.make_seekable",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="the image folder to copy")
    parser.add_argument("destination", help="where the copy goes (must not exist)")
    parser.add_argument("--max-interval", type=int, default=4,
                        help="MCUs per restart interval at most (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads rewriting files (default: one per CPU)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an existing destination")
    return parser.parse_args(argv)


def progress_line():
    """A (done, total) callback that keeps one line of stderr up to date ("make_seekable:
    120/500 files"), and the function that ends the line; None and a no-op where stderr is
    not a terminal or TQDM_DISABLE is set (as for the benchmarks' bars)."""
    quiet = os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false")
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    shown = {"at": 0.0, "any": False}

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - shown["at"] >= 0.2:
            print(f"\rmake_seekable: {done}/{total} files", end="", file=sys.stderr, flush=True)
            shown.update(at=now, any=True)

    def end_line() -> None:
        if shown["any"]:
            print(file=sys.stderr, flush=True)

    return report, end_line


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    progress, end_line = progress_line()
    try:
        report = make_seekable(args.source, args.destination, max_interval=args.max_interval,
                               overwrite=args.overwrite, threads=args.threads, progress=progress)
    except FileExistsError:
        print(f"make_seekable: {args.destination!r} exists (pass --overwrite)", file=sys.stderr)
        return 1
    except (OSError, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        end_line()
    growth = report.bytes_after / report.bytes_before - 1 if report.bytes_before else 0.0
    print(f"{report.transcoded} JPEGs rewritten ({growth:+.1%} bytes), {report.copied} other "
          f"files copied, in {time.perf_counter() - started:.1f} s")
    for path in report.unreadable:
        print(f"copied unchanged, libjpeg cannot read it whole: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
