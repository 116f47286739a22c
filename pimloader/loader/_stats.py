"""Per-epoch accounting of where a loader's time goes."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EpochStats:
    """What one epoch of a PIMDataLoader cost.

    wait_s:  time the main process spent inside `next()` waiting for (or, with
             num_workers=0, making) batches.
    fetch_s: time producers spent getting samples from the dataset, summed over workers.
    decode_s: time producers spent decoding images on the native path, summed over workers.
    write_s: time producers spent transforming and writing samples into slots, or running
             collate_fn, summed over workers (decoding excluded).
    deliver_s: of wait_s, time the main process spent handing produced batches over (lending
             views of their slots, or pinning collated batches by copy); the rest of wait_s
             is waiting for workers (or, with num_workers=0, producing).
    shared_batches:   batches delivered as views over shared slots.
    collated_batches: batches delivered through the ordinary collate_fn path.
    skipped_samples:  samples dropped because they could not be decoded (on_error="skip").
    kernel_samples:   in-memory images (datasets of tensors, `transform=`) and detection
                      images (COCO datasets) that the fused kernel transformed; the others
                      of such datasets ran as Python.
    direct_samples:   of those, the ones the kernel rendered straight into their rows of
                      a batch slot (no per-sample output, no stacking copy).
    cache_hits, cache_misses: samples read from the encoded-sample cache, and from their
                      files (cache_bytes > 0; docs/loader.md "Encoded-sample cache").
    cache_hit_bytes, cache_miss_bytes: the encoded bytes of those.
    cache_seekable_copies: of the misses, the JPEGs the cache took as seekable copies
                      (cache_seekable=True: each cost a transcode).
    seek_indexes_made, seek_index_decodes: JPEGs given a seek index (each cost one walk of
                      its Huffman data), and crops decoded with one (seek_index_bytes;
                      docs/loader.md "Seek indexes").
    task:             the registered task whose pipeline made the batches ("classification",
                      "detection", "audio", "in_memory", "python_transform", a user's;
                      "" for torch's own path: the dataset's __getitem__ as under torch).
    path:             why, in words: what the task takes, or why the dataset runs as Python
                      and what would move it to the native path (PathNotice says it once).
    cluster_received, cluster_received_bytes: with cache_scope="cluster", samples of other
                      nodes' parts this rank fetched from them (cache_hits/misses count only
                      its own node's part).
    cluster_served, cluster_served_bytes: samples this rank sent to other nodes' ranks;
    cluster_storage_reads, cluster_storage_bytes: of those, the ones it read from storage
                      (its node's cache did not hold them yet). Storage reads of an epoch:
                      cache_misses + cluster_storage_reads (docs/cluster_cache.md).
    backend:          the backend the loader's kernels run on, as `backend=` resolved
                      ("auto": "upmem" where the SDK build is present, else "cpu"):
                      "cpu", "emulator" or "upmem"; "" when no kernel runs (torch's own
                      path, or the transform as Python).
    dpu_decode:       whether that backend decodes the images it can itself
                      (decode_on_dpu resolved: "auto" is on for DPU backends where the
                      task can, off elsewhere).
    dpu_decoded_samples: images the DPU backend decoded itself (decode_on_dpu).
    decode_fallbacks: with decode_on_dpu on, the images decoded on the host instead, by
                      reason ({reason: count}; docs/loader.md "JPEG decoding on DPUs").
    """

    epoch: int
    task: str = ""
    path: str = ""
    backend: str = ""
    dpu_decode: bool = False
    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    fetch_s: float = 0.0
    decode_s: float = 0.0
    write_s: float = 0.0
    deliver_s: float = 0.0
    shared_batches: int = 0
    collated_batches: int = 0
    skipped_samples: int = 0
    kernel_samples: int = 0
    direct_samples: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_hit_bytes: int = 0
    cache_miss_bytes: int = 0
    cache_seekable_copies: int = 0
    seek_indexes_made: int = 0
    seek_index_decodes: int = 0
    cluster_received: int = 0
    cluster_received_bytes: int = 0
    cluster_served: int = 0
    cluster_served_bytes: int = 0
    cluster_storage_reads: int = 0
    cluster_storage_bytes: int = 0
    dpu_decoded_samples: int = 0
    decode_fallbacks: dict = field(default_factory=dict)

    def add_batch(self, produced, shared: bool) -> None:
        """Account for one delivered batch (a produce.Produced)."""
        self.batches += 1
        self.samples += produced.count
        self.skipped_samples += produced.skipped
        self.kernel_samples += produced.kernel_samples
        self.direct_samples += produced.direct_samples
        self.cache_hits += produced.cache_hits
        self.cache_misses += produced.cache_misses
        self.cache_hit_bytes += produced.cache_hit_bytes
        self.cache_miss_bytes += produced.cache_miss_bytes
        self.cache_seekable_copies += produced.cache_seekable_copies
        self.seek_indexes_made += produced.seek_indexes_made
        self.seek_index_decodes += produced.seek_index_decodes
        for reason, count in produced.decode_counts.items():
            if reason:
                self.decode_fallbacks[reason] = self.decode_fallbacks.get(reason, 0) + count
            else:
                self.dpu_decoded_samples += count
        self.fetch_s += produced.fetch_s
        self.decode_s += produced.decode_s
        self.write_s += produced.write_s
        if shared:
            self.shared_batches += 1
        else:
            self.collated_batches += 1
