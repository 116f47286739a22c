"""Which parts of a sample can be written straight into a batch slot, and where.

A *field* is a leaf of a sample (a CPU tensor or numpy array) that `default_collate` would
stack along a new batch dimension. Fields of a fixed shape and dtype get a fixed place in a
batch slot; a worker writes them there. Everything else in the sample (labels, strings, the
containers around the fields) travels as a *skeleton*: the sample with each field replaced by
a `SlotField` marker. The main process collates the skeletons with torch's own `collate`,
mapping each marker to its view of the slot, so that container types, label dtypes and
errors are exactly those of `default_collate`.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data._utils.collate import collate, default_collate_fn_map

ALIGNMENT = 64

_STACKABLE_TENSOR_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
    torch.complex128,
})
_STACKABLE_NUMPY_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32,
    np.float64, np.complex64, np.complex128))
_PLAIN_LEAF_TYPES = (int, float, complex, bool, str, bytes, type(None), np.generic)


class NotSlottable(Exception):
    """The sample has a part that only the ordinary collate path handles exactly."""


@dataclass(frozen=True)
class SlotField:
    """Marks where field `index` of the layout sits inside a sample's structure."""

    index: int


@dataclass(frozen=True)
class FieldSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int          # byte offset of this field's batch array inside the slot
    sample_nbytes: int   # bytes of one sample's leaf
    order: tuple[int, ...] | None = None  # dims of the lent batch, if not storage order


@dataclass(frozen=True)
class Layout:
    """Where each field of a batch lives in a slot that holds `capacity` samples."""

    fields: tuple[FieldSpec, ...]
    capacity: int
    nbytes: int

    @classmethod
    def for_leaves(cls, leaves: list, capacity: int) -> "Layout":
        specs, offset = [], 0
        for leaf in leaves:
            shape, dtype = leaf_signature(leaf)
            sample_nbytes = _itemsize(dtype) * int(np.prod(shape, dtype=np.int64))
            specs.append(FieldSpec(shape, dtype, offset, sample_nbytes))
            offset += _align(sample_nbytes * capacity)
        return cls(tuple(specs), capacity, max(offset, ALIGNMENT))

    @classmethod
    def single(cls, shape: tuple[int, ...], dtype: torch.dtype, capacity: int,
               order: tuple[int, ...] | None = None) -> "Layout":
        """A layout of one field, stored as `shape` and lent permuted by `order`."""
        layout = cls.for_leaves([torch.empty((), dtype=dtype).expand(*shape)], capacity)
        field = FieldSpec(*dataclasses.astuple(layout.fields[0])[:4], order=order)
        return cls((field,), layout.capacity, layout.nbytes)

    def field_views(self, slot: torch.Tensor, count: int) -> list[torch.Tensor]:
        """Typed views of the first `count` samples of each field in a uint8 slot,
        in storage order (what producers write into)."""
        return [
            slot[spec.offset: spec.offset + spec.sample_nbytes * count]
            .view(spec.dtype).view(count, *spec.shape)
            for spec in self.fields
        ]

    def lent_views(self, slot: torch.Tensor, count: int) -> list[torch.Tensor]:
        """The views a user gets: storage-order views permuted to each field's order."""
        return [view.permute(spec.order) if spec.order else view
                for view, spec in zip(self.field_views(slot, count), self.fields)]


def _align(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def leaf_signature(leaf) -> tuple[tuple[int, ...], torch.dtype]:
    if isinstance(leaf, torch.Tensor):
        return tuple(leaf.shape), leaf.dtype
    return tuple(leaf.shape), _torch_dtype(leaf.dtype)


@functools.lru_cache(maxsize=None)
def _torch_dtype(np_dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype


def _is_field(leaf) -> bool:
    if type(leaf) is torch.Tensor:
        if not _is_stackable_tensor(leaf) or leaf.dtype not in _STACKABLE_TENSOR_DTYPES:
            raise NotSlottable
        return True
    if type(leaf) is np.ndarray:
        if leaf.dtype not in _STACKABLE_NUMPY_DTYPES or not leaf.dtype.isnative:
            raise NotSlottable
        return True
    return False


def _is_stackable_tensor(leaf: torch.Tensor) -> bool:
    """A dense CPU tensor that `torch.stack(..., out=view)` takes as default_collate would.

    Nested tensors report `torch.strided` too, but have no sizes (`.shape` raises): they,
    like sparse and other layouts, must reach default_collate, which raises torch's own
    error for them. So the layout and nestedness are checked before anything else."""
    return (leaf.layout is torch.strided and not leaf.is_nested and leaf.is_cpu
            and not leaf.requires_grad)


def split_sample(sample, leaves: list) -> Any:
    """Return the skeleton of `sample`, appending its fields to `leaves` in walk order.

    Raises NotSlottable for any part that is not a plain container, a field or a small
    plain value, so that such samples keep torch's own collate path.
    """
    if _is_field(sample):
        leaves.append(sample)
        return SlotField(len(leaves) - 1)
    kind = type(sample)
    if kind is tuple:
        return tuple(split_sample(item, leaves) for item in sample)
    if kind is list:
        return [split_sample(item, leaves) for item in sample]
    if kind is dict:
        return {key: split_sample(value, leaves) for key, value in sample.items()}
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return kind(*(split_sample(item, leaves) for item in sample))
    if isinstance(sample, _PLAIN_LEAF_TYPES):
        return sample
    raise NotSlottable


def compile_splitter(skeleton, layout: Layout, columns: list[list]):
    """A function that splits samples shaped like `skeleton`, raising NotSlottable otherwise.

    It returns a sample's skeleton and appends each field to its column in `columns`,
    checking the field's type, shape and dtype against the layout on the way. Compiled once
    per layout, it spares the per-sample generic walk on the hot path.
    """
    kind = type(skeleton)
    if kind is SlotField:
        return _field_splitter(skeleton, layout.fields[skeleton.index],
                               columns[skeleton.index].append)
    if kind is dict:
        keys = tuple(skeleton)
        parts = [compile_splitter(skeleton[key], layout, columns) for key in keys]

        def split_dict(sample):
            if type(sample) is not dict or tuple(sample) != keys:
                raise NotSlottable
            return {key: part(sample[key]) for key, part in zip(keys, parts)}
        return split_dict
    if isinstance(skeleton, (tuple, list)):
        parts = [compile_splitter(item, layout, columns) for item in skeleton]
        build = kind if kind in (tuple, list) else (lambda items: kind(*items))

        def split_sequence(sample):
            if type(sample) is not kind or len(sample) != len(parts):
                raise NotSlottable
            return build([part(item) for part, item in zip(parts, sample)])
        return split_sequence

    def split_plain(sample):
        if not isinstance(sample, _PLAIN_LEAF_TYPES):
            raise NotSlottable
        return sample
    return split_plain


def compile_batch_splitter(skeleton, layout: Layout, columns: list[list]):
    """A function from a batch's samples to their skeletons, filling `columns` (as
    compile_splitter's function does sample by sample).

    Samples that are flat tuples or lists of tensor fields and plain values, the usual
    `(image, label)`, are split column by column, which costs a fraction of the
    per-sample walk, and their skeletons stay columns (`FlatSkeletons`); anything else, or
    a batch that fails the column checks, takes the per-sample splitter, which raises
    NotSlottable where it must.
    """
    per_sample = compile_splitter(skeleton, layout, columns)

    def split_each(samples: list) -> list:
        return [per_sample(sample) for sample in samples]

    kind = type(skeleton)
    if kind not in (tuple, list) or any(isinstance(item, (tuple, list, dict))
                                        for item in skeleton):
        return split_each
    checks = [_tensor_column_check(layout.fields[item.index]) if type(item) is SlotField
              else _plain_column_check for item in skeleton]
    size = len(skeleton)

    def split_columns(samples: list) -> "FlatSkeletons | list":
        if {*map(type, samples)} != {kind} or {*map(len, samples)} != {size}:
            return split_each(samples)
        transposed = list(zip(*samples))
        if not all(check(column) for check, column in zip(checks, transposed)):
            return split_each(samples)
        parts = []
        for item, column in zip(skeleton, transposed):
            if type(item) is SlotField:
                columns[item.index].extend(column)
                parts.append(item)
            else:
                parts.append(column)
        return FlatSkeletons(kind, len(samples), tuple(parts))
    return split_columns


@dataclass(frozen=True)
class FlatSkeletons:
    """The skeletons of a batch of flat tuples (or lists) of `count` samples, by column:
    each part is the SlotField of a field, or the column of a plain value."""

    kind: type
    count: int
    parts: tuple

    def rows(self) -> list:
        """The skeletons sample by sample, as the per-sample splitter makes them."""
        columns = [itertools.repeat(part, self.count) if type(part) is SlotField else part
                   for part in self.parts]
        return [self.kind(row) for row in zip(*columns)]

    def collate(self, field_batches: list[torch.Tensor]) -> list:
        """`default_collate(self.rows())` with each SlotField's column its field's batch
        view: a batch of tuples or lists collates to a list of its collated columns."""
        return [field_batches[part.index] if type(part) is SlotField
                else collate(part, collate_fn_map=default_collate_fn_map)
                for part in self.parts]


def _tensor_column_check(spec: FieldSpec):
    shape, dtype, strided, tensor = spec.shape, spec.dtype, torch.strided, torch.Tensor

    def check(column) -> bool:
        for leaf in column:
            if (type(leaf) is not tensor or leaf.layout is not strided or leaf.is_nested
                    or leaf.dtype is not dtype or leaf.shape != shape
                    or not leaf.is_cpu or leaf.requires_grad):
                return False
        return True
    return check


def _plain_column_check(column) -> bool:
    return all(issubclass(kind, _PLAIN_LEAF_TYPES) for kind in {*map(type, column)})


def _field_splitter(marker: SlotField, spec: FieldSpec, append):
    shape, dtype = spec.shape, spec.dtype

    def split_field(leaf):
        if type(leaf) is torch.Tensor:
            if not _is_stackable_tensor(leaf) or leaf.dtype != dtype or leaf.shape != shape:
                raise NotSlottable
        elif type(leaf) is np.ndarray:
            if leaf.shape != shape or _torch_dtype(leaf.dtype) != dtype or not leaf.dtype.isnative:
                raise NotSlottable
        else:
            raise NotSlottable
        append(leaf)
        return marker
    return split_field


def collate_skeletons(skeletons: "list | FlatSkeletons", field_batches: list[torch.Tensor]):
    """`default_collate` over skeletons, each SlotField becoming its field's batch view."""
    if type(skeletons) is FlatSkeletons:
        return skeletons.collate(field_batches)

    def collate_field(batch, *, collate_fn_map=None):
        return field_batches[batch[0].index]

    collate_fn_map = {SlotField: collate_field, **default_collate_fn_map}
    return collate(skeletons, collate_fn_map=collate_fn_map)
