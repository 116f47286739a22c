"""Seek indexes of a loader's JPEGs, kept in shared memory (pimloader.decode.seek_index).

A JPEG without restart markers can only be cropped by Huffman-decoding it from its start;
with its seek index the decoder reads the MCUs of the rows around the crop in place and
decodes those alone (docs/transforms.md, "Seek indexes"). Making an index costs about
as much as decoding a crop, so a JPEG gets one the second time a crop of it is decoded
(the first time only marks it seen): a single pass over a dataset costs nothing more, and
from the third epoch on every crop is decoded from the index.

Indexes go into a SampleCache (the encoded-sample cache's shared segment) by dataset
index: made by whichever process decodes the JPEG's second crop, used by every worker.
A JPEG that cannot have one (progressive, restart markers already, CMYK...) is kept as an
empty entry, so that it is walked once. As in the sample cache nothing is evicted: once
the budget is spent, the JPEGs without an index are decoded as before.
"""
from __future__ import annotations

import torch

from pimloader.decode.seekable import seek_index

from .cache import SampleCache, _shm_free_bytes

# an index is 24 bytes + 16 a point, a point every 64 pixels of each MCU row: about 3 KB
# for a 500x375 photo, 49 KB for a 2048x1536 one
ROOM_FOR_ONE = 16 << 10
# the segment is allocated whole when the loader starts (torch's shared allocator commits
# it), so a budget is held to this much per sample of the dataset
ROOM_PER_SAMPLE = 16 << 10


class SeekIndexes:
    """The seek indexes of `size` samples in `budget` bytes of shared memory. Picklable to
    the workers being started (fork or spawn), which then map the same memory."""

    def __init__(self, budget: int, size: int) -> None:
        self.store = SampleCache(min(budget, size * ROOM_PER_SAMPLE), size)
        self.size = size
        self._seen = None           # a shared byte per sample: a crop of it was decoded
        self._counts = [0, 0]       # in this process: indexes made, crops decoded with one

    def open(self, shared: bool = True) -> None:
        """Allocate the shared memory (main process, before workers start), or with
        `shared=False` (a loader without workers) this process's own. The shared budget is
        held to a quarter of what /dev/shm has free (a container's /dev/shm may be small)."""
        if self._seen is not None:
            return
        free = _shm_free_bytes() if shared else None
        if free is not None:
            self.store.budget = min(self.store.budget, free // 4)
        self.store.open(shared)
        seen = torch.zeros(self.size, dtype=torch.uint8)
        self._seen = seen.share_memory_() if shared else seen

    def close(self) -> None:
        self.store.close()
        self._seen = None
        self.__dict__.pop("_seen_view", None)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_seen_view", None)
        return state

    def for_crop(self, index: int, data) -> bytes | None:
        """The seek index to decode a crop of sample `index` (whose encoded bytes are
        `data`) with: the one kept, else one made now when a crop of it was decoded
        before and the budget has room; None when there is none (yet)."""
        kept = self.store.get(index)
        if kept is not None:
            self._counts[1] += bool(kept)
            return kept or None
        seen = self._seen_flags()
        if not seen[index]:
            seen[index] = 1
            return None
        if not self.store.has_room(ROOM_FOR_ONE):
            return None
        made = seek_index(data)   # (None for what is not a JPEG)
        self.store.put(index, made or b"")
        if made is not None:
            self._counts[0] += 1
            self._counts[1] += 1
        return made

    def _seen_flags(self):
        view = self.__dict__.get("_seen_view")
        if view is None:
            if self._seen is None:
                raise RuntimeError("the seek indexes are closed (the loader was closed while "
                                   "a worker still decoded)")
            view = self.__dict__["_seen_view"] = self._seen.numpy()
        return view

    def take_counts(self) -> tuple[int, int]:
        """(indexes made, crops decoded with one) in this process since the last call."""
        counts, self._counts = tuple(self._counts), [0, 0]
        return counts
