"""Step 2 of the flow, fetch: sources, which let a worker read a sample as encoded bytes and
a target instead of calling the dataset's `__getitem__`, whatever the task.

`source`: the `Source` interface, `EncodedSample`, and the adapters' registry
(`register_source`, `source_of`). `index`: a source's paths and targets in compact arrays.
`folders`: torchvision's ImageFolder / DatasetFolder and lists of (path, target) pairs.
`audio`: AudioFolder, class folders of WAV/FLAC clips (the Speech Commands layout).
`coco`: COCO detection sets (pimloader's CocoDetection, torchvision's, v2-wrapped or not).
`items`: any map-style dataset of (encoded bytes, target) items, under a Decode step.
`arrow`: Hugging Face `datasets` tables (Arrow, Parquet): ArrowColumns, items (bytes, target)
(it imports `datasets` only when one is made).
`shards`: tar shards (webdataset's format), local or over HTTP (`TarShards`, its source;
`tar_scan`, `shard_members`, `shard_index`, `shard_reader`, `http` under it), and
`shard_sampler`'s ShardOrderSampler, which keeps the reads of a shuffled epoch forward.
`seekable_shards`, `seekable_arrow`: make_seekable_shards and make_seekable_arrow, seekable
copies of local shards and of saved Arrow datasets (their JPEGs with restart markers,
decode/seekable.py).
`cache`: the encoded-sample cache, a source read through shared memory.
Importing this package registers the adapters of all of them.
"""
from .arrow import ArrowColumns, ArrowSource
from .audio import AudioFolder, AudioSource
from .coco import CocoDetection, CocoSource
from .folders import FileSource, ImageFolder
from .http import HttpShardError, RetryPolicy
from .index import PathIndex
from .items import ItemsSource
from .shard_members import write_sidecar
from .seekable_arrow import make_seekable_arrow
from .seekable_shards import make_seekable_shards
from .shard_sampler import ShardOrderSampler
from .shards import ShardMemberError, TarShards, TarShardSource
from .source import EncodedSample, Source, register_source, registered_sources, source_of

__all__ = ["ArrowColumns", "ArrowSource", "AudioFolder", "AudioSource", "CocoDetection",
           "CocoSource", "EncodedSample", "FileSource", "HttpShardError", "ImageFolder",
           "ItemsSource", "PathIndex", "RetryPolicy", "ShardMemberError", "ShardOrderSampler",
           "Source", "TarShardSource", "TarShards", "register_source", "registered_sources",
           "make_seekable_arrow", "make_seekable_shards", "source_of", "write_sidecar"]
