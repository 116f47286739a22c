"""Steps 1 and 6 of the flow, sample and deliver: `PIMDataLoader`, its single- and
multi-process iterators, workers, fetchers, producers, batch slots and their layouts,
pinning and per-epoch statistics.

What a task plugs into (public modules): `tasks` (the registry: Task, register_task),
`produce` (Pipeline, ProducerContext, BatchProducer, Produced), `fetch` (Fetcher,
create_fetcher, TransformingFetcher), `layout` (Layout, SlotField), `slots` (SlotWriter,
SlotBatch), `arena` (output_tensor(s), ArenaBatch), `resources` (ProcessResources).
"""
from ._stats import EpochStats
from .dataloader import PIMDataLoader
from .fetch import Fetcher, TransformingFetcher, create_fetcher
from .produce import BatchProducer, Pipeline, ProducerContext, Produced
from .resources import ProcessResources
from .tasks import Task, register_task, registered_tasks, unregister_task

__all__ = ["PIMDataLoader", "EpochStats", "Task", "register_task", "unregister_task",
           "registered_tasks", "Pipeline", "ProducerContext", "BatchProducer", "Produced",
           "Fetcher", "TransformingFetcher", "create_fetcher", "ProcessResources"]
