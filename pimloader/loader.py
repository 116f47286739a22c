"""PIMDataLoader: torch's DataLoader, with batches written in place into reusable slots."""
from __future__ import annotations

from torch.utils.data import DataLoader

from ._multi import MultiProcessIter
from ._single import SingleProcessIter
from ._state import LoaderState
from ._stats import EpochStats


class PIMDataLoader(DataLoader):
    """A drop-in replacement for `torch.utils.data.DataLoader`.

    It takes the same arguments with the same meaning, defaults and errors, and yields the
    same batches in the same order for the same `generator` seed. When samples hold
    tensors or numpy arrays of a fixed shape and dtype and `collate_fn` is the default,
    each sample is written straight into its place in a preallocated batch slot (shared
    memory when there are workers) and the batch is lent out as views over that slot, which
    is reused once the user drops every reference to the batch.

    Extra methods: `stats()` (per-epoch timings), `close()` (ends persistent workers) and
    use as a context manager.
    """

    def _get_iterator(self):
        if self.num_workers == 0:
            return SingleProcessIter(self, self._state)
        self.check_worker_number_rationality()
        return MultiProcessIter(self, self._state)

    @property
    def _state(self) -> LoaderState:
        state = self.__dict__.get("_pimloader_state")
        if state is None:
            state = self.__dict__["_pimloader_state"] = LoaderState()
        return state

    def stats(self) -> list[EpochStats]:
        """One EpochStats per epoch started so far, the current one last."""
        return list(self._state.history)

    def close(self) -> None:
        """Stop persistent workers now rather than when the loader is garbage-collected."""
        iterator = self._iterator
        self._iterator = None
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()

    def __enter__(self) -> "PIMDataLoader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
