"""Hugging Face `datasets` tables (Arrow, Parquet) as datasets of encoded bytes.

`ArrowColumns(dataset, column="image", label="label")` wraps a map-style `datasets.Dataset`
whose `column` is an `Image(decode=False)` or `Audio(decode=False)` feature: item i is
`(encoded bytes, target)`, as the contract of datasets of encoded bytes has it (the image or
clip undecoded, the target as `dataset[i][label]` gives it: a ClassLabel's int, an int, a
string). The loader's transform starts with `T.Decode()`; torch's DataLoader with
torchvision's `decode_image` (or libsndfile for audio) over the same items is the oracle.
`ArrowColumns.from_parquet(paths, ...)` is the same over Parquet files (through
`datasets.Dataset.from_parquet`, which converts them once into memory-mapped Arrow files in
its cache). The dataset's order is kept: `dataset.shuffle(seed)` and `dataset.select(...)`
(its indices mapping) give the wrapper's order.

Why a wrapper rather than the `datasets.Dataset` itself: a Dataset's items are dicts
(`{"image": {"bytes": ..., "path": ...}, "label": 3}`), which torch's DataLoader batches
into dicts; the wrapper says which column is the sample and which the target, and has the
contract's tuples, so that PIMDataLoader and torch's DataLoader batch the same items.

The bytes are read from the Arrow column with pyarrow, one cell at a time (no per-row dict,
no decode); a cell that holds only a `path` (a Dataset made with `from_dict` from file
paths and not saved) is read from that file. The wrapper keeps `dataset.data`, the
`datasets` table, which pickles by file reference when it is memory-mapped (a dataset from
`load_from_disk`, `from_parquet`, or anything with `cache_files`): workers map the same
files, and a fork shares their pages. A table held in memory (`from_dict` not saved)
pickles whole, as `datasets` pickles it. The order is one int64 array.

`datasets` is an optional dependency (`pip install "pimloader[hf]"`): this module imports it
only when a wrapper is made, so `import pimloader` does not import it.
"""
from __future__ import annotations

import bisect
import itertools
import os
from typing import Any

import numpy as np
import torch

from .audio import AUDIO_LABEL
from .source import IMAGE_LABEL, EncodedSample, Source, read_file, register_source

FIELDS = {"Image": IMAGE_LABEL, "Audio": AUDIO_LABEL}


class ArrowColumns(torch.utils.data.Dataset):
    """A `datasets.Dataset`'s encoded image or audio column and its label column, items
    `(bytes, target)`.

    dataset: a map-style `datasets.Dataset` (shuffled, selected, loaded from disk, or in
    memory). column: the `Image(decode=False)` or `Audio(decode=False)` column; None: the
    dataset's only such column. label: the target's column (ClassLabel, int, any value).
    `fields` is {"image", "label"} or {"audio", "label"} by the column's feature type;
    `classes` are the ClassLabel's names (None for another label type).
    """

    def __init__(self, dataset, column: str | None = None, label: str = "label") -> None:
        hf = _import_datasets()
        _check_dataset(hf, dataset)
        column, kind = _encoded_column(hf, dataset, column)
        _check_label(dataset, column, label)
        self.column, self.label = column, label
        feature = dataset.features[label]
        self.classes = list(feature.names) if isinstance(feature, hf.ClassLabel) else None
        self.source = ArrowSource(dataset, column, label, FIELDS[kind])

    @classmethod
    def from_parquet(cls, paths, column: str | None = None, label: str = "label",
                     **kwargs) -> "ArrowColumns":
        """The wrapper over Parquet files (a path or a list of them), read with
        `datasets.Dataset.from_parquet(paths, **kwargs)` (e.g. `cache_dir=`, `features=`
        where the files carry no Hugging Face features)."""
        hf = _import_datasets()
        return cls(hf.Dataset.from_parquet(paths, **kwargs), column, label)

    @property
    def fields(self) -> frozenset:
        return self.source.fields

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple:
        sample = self.source.read(index)
        return bytes(sample.data), sample.target

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self)} rows, column={self.column!r}, "
                f"label={self.label!r}, fields={sorted(self.fields)})")


class ArrowSource(Source):
    """The samples of an ArrowColumns: sample i is the table's row `rows[i]` (all rows in
    order when `rows` is None). Names: "<arrow file>[row r]" (r within that file), or the
    cell's path when the cell holds no bytes; keys b"<arrow file>#r", or the path."""

    encoded_items = True

    def __init__(self, dataset, column: str, label: str, fields: frozenset) -> None:
        self.column, self.label, self.fields = column, label, fields
        self.origins = Origins.of(dataset, column)
        self.table = dataset.data.select([column, label])   # memory-mapped: by reference
        self.rows = _row_order(dataset)
        self._cells = self._cells_pid = None

    def __len__(self) -> int:
        return len(self.table) if self.rows is None else len(self.rows)

    def metadata(self, index: int) -> tuple:
        row = self._row(index)
        cells = self._open()
        return cells.target(row), self._name(row, cells.path_only(row))

    def read(self, index: int) -> EncodedSample:
        row = self._row(index)
        cells = self._open()
        data = cells.encoded(row)
        path = None if data is not None else cells.path_only(row)
        name = self._name(row, path)
        if data is None:
            if path is None:
                raise ValueError(f"{name}: the {self.column!r} cell has neither bytes nor "
                                 f"a path")
            data = read_file(path)
        return EncodedSample(data, cells.target(row), name)

    def key(self, index: int) -> bytes:
        row = self._row(index)
        path = self._open().path_only(row)
        return os.fsencode(path) if path is not None else self.origins.key(row)

    def _name(self, row: int, path: str | None) -> str:
        return path if path is not None else self.origins.name(row)

    def _row(self, index: int) -> int:
        index = range(len(self))[index]   # an IndexError out of range; negative from the end
        return index if self.rows is None else int(self.rows[index])

    def _open(self) -> "Cells":
        """This process's readers over the table's chunks (made after fork or spawn)."""
        if self._cells is None or self._cells_pid != os.getpid():
            self._cells = Cells(self.table.table, self.column, self.label)
            self._cells_pid = os.getpid()
        return self._cells

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cells"] = state["_cells_pid"] = None
        return state

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self)} rows of {self.origins.describe()}, "
                f"column={self.column!r}, fields={sorted(self.fields)})")


class Origins:
    """Which Arrow file holds each row of a table: the first row of each file's block
    (`starts`) and its path (None for a block held in memory, named by `fallback`)."""

    def __init__(self, starts: np.ndarray, paths: tuple, fallback: str) -> None:
        self.starts, self.paths, self.fallback = starts, paths, fallback

    @classmethod
    def of(cls, dataset, column: str) -> "Origins":
        from datasets.table import ConcatenationTable, MemoryMappedTable
        table = dataset.data
        if isinstance(table, ConcatenationTable):
            blocks = [next(block for block in row if column in block.column_names)
                      for row in table.blocks]
        else:
            blocks = [table]
        starts = np.cumsum([0] + [len(block) for block in blocks[:-1]], dtype=np.int64)
        paths = tuple(block.path if isinstance(block, MemoryMappedTable) else None
                      for block in blocks)
        return cls(starts, paths, f"in-memory datasets.Dataset {dataset._fingerprint}")

    def locate(self, row: int) -> tuple:
        """(path or None, the row within that file, or within the table when None)."""
        block = 0 if len(self.starts) == 1 else int(
            np.searchsorted(self.starts, row, side="right")) - 1
        path = self.paths[block]
        return (path, row - int(self.starts[block])) if path is not None else (None, row)

    def name(self, row: int) -> str:
        path, at = self.locate(row)
        return f"{path if path is not None else self.fallback}[row {at}]"

    def key(self, row: int) -> bytes:
        path, at = self.locate(row)
        where = os.fsencode(path) if path is not None else self.fallback.encode()
        return where + b"#%d" % at

    def describe(self) -> str:
        files = [path for path in self.paths if path is not None]
        return f"{len(files)} Arrow files" if files else self.fallback


class Cells:
    """One process's view of the table's two columns, made once per chunk: the encoded
    column's bytes as views of the table's own buffers (a cell is a memoryview slice: no
    copy, no Arrow scalar per read), its paths, and numeric labels as numpy arrays."""

    def __init__(self, table, column: str, label: str) -> None:
        encoded = table.column(column)
        struct = encoded.type   # struct<bytes: binary, path: string>
        bytes_at = struct.get_field_index("bytes")
        path_at = struct.get_field_index("path")
        flattened = [chunk.flatten() for chunk in encoded.chunks]
        self.encoded_chunks = [BinaryCells(fields[bytes_at]) for fields in flattened]
        self.path_chunks = [fields[path_at] for fields in flattened]
        self.encoded_starts = _starts(encoded.chunks)
        labels = table.column(label)
        self.label_chunks = [_label_values(chunk) for chunk in labels.chunks]
        self.label_starts = _starts(labels.chunks)

    def encoded(self, row: int) -> memoryview | None:
        """The bytes of the row's cell (None when it holds a path instead)."""
        chunk, at = _chunk_of(self.encoded_starts, row)
        return self.encoded_chunks[chunk].cell(at)

    def path_only(self, row: int) -> str | None:
        """The cell's path when it holds no bytes (None when it holds bytes)."""
        chunk, at = _chunk_of(self.encoded_starts, row)
        if self.encoded_chunks[chunk].has_bytes(at):
            return None
        return self.path_chunks[chunk][at].as_py()

    def target(self, row: int) -> Any:
        chunk, at = _chunk_of(self.label_starts, row)
        values = self.label_chunks[chunk]
        return values[at].item() if isinstance(values, np.ndarray) else values[at].as_py()


class BinaryCells:
    """The cells of one binary (or large_binary) Arrow array, read as views of its data
    buffer through its offsets."""

    def __init__(self, array) -> None:
        import pyarrow
        validity, offsets, data = array.buffers()
        kind = np.int64 if pyarrow.types.is_large_binary(array.type) else np.int32
        self.offsets = np.frombuffer(offsets, kind)[array.offset:array.offset + len(array) + 1]
        self.data = memoryview(data) if data is not None else memoryview(b"")
        self.valid = None if validity is None else array.is_valid().to_numpy(
            zero_copy_only=False)

    def has_bytes(self, at: int) -> bool:
        return self.valid is None or bool(self.valid[at])

    def cell(self, at: int) -> memoryview | None:
        if not self.has_bytes(at):
            return None
        return self.data[self.offsets[at]:self.offsets[at + 1]]


def _label_values(chunk):
    """A label chunk as numpy when its values are plain numbers without nulls (read with
    .item(): the same Python int, float or bool as Arrow's as_py), else the Arrow array."""
    import pyarrow
    kind = chunk.type
    plain = (pyarrow.types.is_integer(kind) or pyarrow.types.is_boolean(kind)
             or kind in (pyarrow.float32(), pyarrow.float64()))
    if plain and chunk.null_count == 0:
        return chunk.to_numpy(zero_copy_only=False)
    return chunk


def _starts(chunks) -> list:
    """The chunks' first rows, and the row past the last (Python ints: bisected per row)."""
    return list(itertools.accumulate((len(chunk) for chunk in chunks), initial=0))


def _chunk_of(starts: list, row: int) -> tuple:
    """(chunk, row within it) of a table row, given the chunks' first rows."""
    if len(starts) == 2:   # one chunk
        return 0, row
    chunk = bisect.bisect_right(starts, row) - 1
    return chunk, row - starts[chunk]


def _row_order(dataset) -> np.ndarray | None:
    """The table rows of the dataset's items in order (its indices mapping, after shuffle
    or select), or None when item i is row i."""
    indices = dataset._indices
    if indices is None:
        return None
    return np.asarray(indices.column(0).to_numpy(), dtype=np.int64)


def _import_datasets():
    try:
        import datasets
    except ImportError as error:
        raise ImportError("ArrowColumns needs Hugging Face datasets: pip install "
                          "'pimloader[hf]' (or pip install datasets)") from error
    return datasets


def _check_dataset(hf, dataset) -> None:
    if isinstance(dataset, hf.DatasetDict):
        raise TypeError(f"ArrowColumns takes one split of a DatasetDict (e.g. "
                        f"dataset['train']), got one with splits {list(dataset)}")
    if not isinstance(dataset, hf.Dataset):
        raise TypeError(f"ArrowColumns takes a map-style datasets.Dataset, got "
                        f"{type(dataset).__name__}")
    if dataset.format.get("type") == "custom":
        raise ValueError("the dataset has a transform (set_transform / with_transform), "
                         "which ArrowColumns does not run: it reads the encoded bytes; "
                         "hand the transform to the loader, after T.Decode()")


def _encoded_column(hf, dataset, column: str | None) -> tuple:
    """(column, "Image" or "Audio"): the column checked, or the only encoded one."""
    features = dataset.features
    if column is None:
        encoded = [name for name, feature in features.items()
                   if isinstance(feature, (hf.Image, hf.Audio))]
        if len(encoded) != 1:
            raise ValueError(f"ArrowColumns: name the column of encoded images or audio "
                             f"(column=...): the dataset has {len(encoded)} Image/Audio "
                             f"columns {encoded} among {_describe(features)}")
        column = encoded[0]
    if column not in features:
        raise KeyError(f"ArrowColumns: no column {column!r} in the dataset; its columns: "
                       f"{_describe(features)}")
    feature = features[column]
    if not isinstance(feature, (hf.Image, hf.Audio)):
        raise TypeError(f"ArrowColumns: column {column!r} is {feature!r}, not an Image or "
                        f"Audio feature; cast it with dataset.cast_column({column!r}, "
                        f"datasets.Image(decode=False)) (or Audio) if it holds encoded files")
    if feature.decode:
        kind = type(feature).__name__
        raise ValueError(f"ArrowColumns: column {column!r} is {kind}(decode=True): the "
                         f"loader decodes the bytes itself; cast it first with "
                         f"dataset.cast_column({column!r}, datasets.{kind}(decode=False))")
    return column, type(feature).__name__


def _check_label(dataset, column: str, label: str) -> None:
    if label == column:
        raise ValueError(f"ArrowColumns: the label column {label!r} is the encoded column")
    if label not in dataset.features:
        raise KeyError(f"ArrowColumns: no label column {label!r} in the dataset; its "
                       f"columns: {_describe(dataset.features)}")


def _describe(features) -> str:
    return ", ".join(f"{name} ({type(feature).__name__})" for name, feature in features.items())


register_source(ArrowColumns, lambda dataset: dataset.source)
