"""Seekable copies of Hugging Face Arrow datasets saved with `save_to_disk`: every JPEG in the
image column rewritten losslessly with restart markers (`decode.add_restart_markers`),
every other column and cell kept.

    report = make_seekable_arrow("/data/train-arrow", "/data/train-arrow-seekable")
    train = ArrowColumns(datasets.load_from_disk("/data/train-arrow-seekable"), "image")

The copy is made with `datasets` itself (`Dataset.map` over the image column, then
`save_to_disk`): the same rows in the same order, the same features, the same splits for a
`DatasetDict`. Cells that hold only a `path` (files not embedded) are kept as they are.
`datasets` is optional (`pip install "pimloader[hf]"`), imported when a copy is made.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from pimloader.decode.seekable import SeekableCopy, check_copy_arguments, seekable_version

from .arrow import _import_datasets

CALLER = "make_seekable_arrow"


def make_seekable_arrow(source, destination, *, column: str | None = None,
                        max_interval: int = 4, overwrite: bool = False,
                        threads: int | None = None,
                        progress: Callable[[int, int], None] | None = None) -> SeekableCopy:
    """Copy the dataset `source` (a folder written by `Dataset.save_to_disk` or
    `DatasetDict.save_to_disk`) to `destination` with every JPEG of its Image column
    (`column`; None: the only Image column) rewritten by `decode.add_restart_markers`, as
    `decode.make_seekable` copies an image folder. A JPEG libjpeg cannot read whole is kept
    and listed in `unreadable` as "<source>#<split>/<row>" ("<source>#<row>" for a Dataset);
    other images (and cells holding only a path) are counted in `copied`. `destination`
    must not exist, unless `overwrite=True`. `threads` (default: one per CPU) rewrite each
    batch of rows; `progress(rows_done, rows_in_all)`, if given, is called after each
    batch."""
    hf = _import_datasets()
    source, destination = os.fspath(source), os.fspath(destination)
    if not os.path.isdir(source):
        raise NotADirectoryError(f"{CALLER}: {source!r} is not a directory")
    check_copy_arguments(CALLER, destination, overwrite, progress)
    if os.path.exists(destination) and os.path.samefile(source, destination):
        raise ValueError(f"{CALLER}: {source!r} would be overwritten by its own copy")
    loaded = hf.load_from_disk(source)
    splits = dict(loaded) if isinstance(loaded, hf.DatasetDict) else {None: loaded}
    columns = {name: image_column(hf, split, column) for name, split in splits.items()}
    total = sum(len(split) for split in splits.values())
    with tempfile.TemporaryDirectory(prefix=".seekable-", dir=_parent(destination)) as scratch, \
            ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        copier = _Copier(source, pool, max_interval, progress, total)
        copies = {name: copier.copy(hf, split, columns[name], name,
                                    os.path.join(scratch, f"{name or 'rows'}.arrow"))
                  for name, split in splits.items()}
        copied = copies[None] if None in copies else hf.DatasetDict(copies)
        copied.save_to_disk(destination)
    return copier.report


def image_column(hf, dataset, column: str | None) -> str:
    """The Image column to rewrite: `column` checked, or the dataset's only one."""
    features = dataset.features
    if column is None:
        images = [name for name, feature in features.items() if isinstance(feature, hf.Image)]
        if len(images) != 1:
            raise ValueError(f"{CALLER}: name the image column (column=...): the dataset has "
                             f"{len(images)} Image columns {images} among {list(features)}")
        return images[0]
    if column not in features:
        raise KeyError(f"{CALLER}: no column {column!r}; the columns: {list(features)}")
    if not isinstance(features[column], hf.Image):
        raise TypeError(f"{CALLER}: column {column!r} is {features[column]!r}, not an Image "
                        f"feature")
    return column


class _Copier:
    """Rewrites the image cells of each batch `Dataset.map` hands it, keeping the report."""

    def __init__(self, source: str, pool, max_interval: int, progress, total: int) -> None:
        self.source, self.pool, self.max_interval = source, pool, max_interval
        self.progress, self.total = progress, total
        self.report, self.done = SeekableCopy(0, 0, [], 0, 0), 0

    def copy(self, hf, split, column: str, name, cache_file: str):
        feature = split.features[column]
        raw = split.cast_column(column, hf.Image(decode=False))
        copied = raw.map(self._batch, batched=True, batch_size=64, with_indices=True,
                         input_columns=[column], fn_kwargs={"column": column, "split": name},
                         features=raw.features, cache_file_name=cache_file,
                         load_from_cache_file=False, new_fingerprint=self._fingerprint(split),
                         desc=f"{CALLER} {name or ''}".strip())
        return copied.cast_column(column, feature)

    def _fingerprint(self, split) -> str:
        """The copy's fingerprint (`datasets` would otherwise hash this object, pool and all)."""
        key = f"{split._fingerprint} seekable {self.max_interval}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def _batch(self, cells: list, indices: list, column: str, split) -> dict:
        names = [f"{self.source}#{split}/{index}" if split is not None
                 else f"{self.source}#{index}" for index in indices]
        outcomes = list(self.pool.map(self._cell, cells, names))
        for (kind, _, before, after), name in zip(outcomes, names):
            self.report.count(kind, name, before, after)
        self.done += len(cells)
        if self.progress is not None:
            self.progress(self.done, self.total)
        return {column: [cell for _, cell, _, _ in outcomes]}

    def _cell(self, cell, name: str) -> tuple:
        """(kind, the new cell, bytes before, bytes after) of one image cell."""
        data = None if cell is None else cell.get("bytes")
        if data is None:
            return "copied", cell, 0, 0
        kind, written = seekable_version(data, self.max_interval, name)
        if kind != "transcoded":
            return kind, cell, 0, 0
        return kind, {**cell, "bytes": written}, len(data), len(written)


def _parent(path: str) -> str:
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    return parent
