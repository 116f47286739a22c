"""Command line for pimloader's seekable copies: an image folder, webdataset tar shards or a
saved Hugging Face Arrow dataset copied with its JPEGs rewritten losslessly with restart
markers, from which pimloader decodes a crop without the rest of the image (the same
pixels for every decoder).

    python -m pimloader.make_seekable /data/imagenet/train /data/imagenet/train-seekable
    python -m pimloader.make_seekable /data/shards/train-{0000..0099}.tar /data/seekable
    python -m pimloader.make_seekable --shards /data/shards /data/shards-seekable
    python -m pimloader.make_seekable /data/train-arrow /data/train-arrow-seekable

What the sources are is told by their names: paths (or brace patterns) ending in .tar are
shards (`datasets.make_seekable_shards`, written into the destination folder under their
own names); a folder `save_to_disk` wrote (state.json or dataset_dict.json in it) is an
Arrow dataset (`datasets.make_seekable_arrow`); any other folder an image folder
(`decode.make_seekable`), unless --shards says its .tar files are shards. On a terminal, a
line on stderr counts the files done (TQDM_DISABLE=1 hides it).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .datasets import make_seekable_arrow, make_seekable_shards
from .decode import make_seekable

ARROW_MARKERS = ("state.json", "dataset_dict.json")
WORDS = {"folder": "files", "shards": "members", "arrow": "rows"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pimloader.make_seekable",
        usage="%(prog)s [options] SOURCE [SOURCE ...] DESTINATION",
        description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:3]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", metavar="SOURCE... DESTINATION",
                        help="what to copy (an image folder; tar shards, paths or brace "
                             "patterns; a saved Arrow dataset), then where the copy goes "
                             "(must not exist)")
    parser.add_argument("--shards", action="store_true",
                        help="the source folder holds tar shards: copy its *.tar files")
    parser.add_argument("--column", default=None,
                        help="Arrow datasets: the Image column (default: the only one)")
    parser.add_argument("--max-interval", type=int, default=4,
                        help="MCUs per restart interval at most (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads rewriting files (default: one per CPU)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into an existing destination")
    args = parser.parse_args(argv)
    if len(args.paths) < 2:
        parser.error("give a source and a destination")
    *args.sources, args.destination = args.paths
    args.kind = kind_of(args.sources, args.shards)
    if args.kind != "shards" and len(args.sources) > 1:
        parser.error(f"several sources are shards only, and {args.sources[0]!r} is not a "
                     f".tar file (an image folder or an Arrow dataset is copied alone)")
    if args.column is not None and args.kind != "arrow":
        parser.error("--column is for Arrow datasets")
    return args


def kind_of(sources: list, shards: bool) -> str:
    """"shards", "arrow" or "folder": what the sources are (see the module doc)."""
    if shards or all(source.endswith(".tar") for source in sources):
        return "shards"
    source = sources[0]
    if any(os.path.isfile(os.path.join(source, name)) for name in ARROW_MARKERS):
        return "arrow"
    return "folder"


def progress_line(what: str = "files"):
    """A (done, total) callback that keeps one line of stderr up to date ("make_seekable:
    120/500 files", `what` the unit), and the function that ends the line; None and a no-op where stderr is
    not a terminal or TQDM_DISABLE is set (as for the benchmarks' bars)."""
    quiet = os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false")
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    shown = {"at": 0.0, "any": False}

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - shown["at"] >= 0.2:
            print(f"\rmake_seekable: {done}/{total} {what}", end="", file=sys.stderr, flush=True)
            shown.update(at=now, any=True)

    def end_line() -> None:
        if shown["any"]:
            print(file=sys.stderr, flush=True)

    return report, end_line


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    progress, end_line = progress_line(WORDS[args.kind])
    try:
        report = copy(args, progress)
    except FileExistsError:
        print(f"make_seekable: {args.destination!r} exists (pass --overwrite)", file=sys.stderr)
        return 1
    except (OSError, ValueError, TypeError, KeyError, ImportError) as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        end_line()
    growth = report.bytes_after / report.bytes_before - 1 if report.bytes_before else 0.0
    print(f"{report.transcoded} JPEGs rewritten ({growth:+.1%} bytes), {report.copied} other "
          f"{WORDS[args.kind]} copied, in {time.perf_counter() - started:.1f} s")
    for path in report.unreadable:
        print(f"copied unchanged, libjpeg cannot read it whole: {path}")
    if args.kind == "folder" and not report.transcoded and _has_tar_files(args.sources[0]):
        print("no JPEG rewritten: to rewrite the JPEGs inside tar shards, pass --shards")
    return 0


def copy(args: argparse.Namespace, progress):
    """The copy the arguments ask for; its SeekableCopy."""
    common = dict(max_interval=args.max_interval, overwrite=args.overwrite,
                  threads=args.threads, progress=progress)
    if args.kind == "shards":
        sources = args.sources[0] if len(args.sources) == 1 else args.sources
        return make_seekable_shards(sources, args.destination, **common)
    if args.kind == "arrow":
        return make_seekable_arrow(args.sources[0], args.destination, column=args.column,
                                   **common)
    return make_seekable(args.sources[0], args.destination, **common)


def _has_tar_files(folder: str) -> bool:
    return os.path.isdir(folder) and any(name.endswith(".tar") for name in os.listdir(folder))


if __name__ == "__main__":
    sys.exit(main())
