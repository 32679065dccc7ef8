"""The message store: CommitLog segments, ConsumeQueues, flush, recovery and retention.

Used by the broker's request processors and by replication; everything they need is exported here.
"""

from broker_store.protocol.properties import tags_code_of_properties, tags_codes_of_properties
from broker_store.store.commit_log import describe_cut
from broker_store.store.config import FlushMode, StoreConfig
from broker_store.store.durability import DurabilityPolicy, DurabilityStep
from broker_store.store.message_store import MessageStore, PutEntry
from broker_store.store.results import (
    DurableFuture,
    GetResult,
    GetStatus,
    PutResult,
    PutStatus,
    QueueEntry,
    resolved,
)

__all__ = [
    "DurabilityPolicy",
    "DurabilityStep",
    "DurableFuture",
    "FlushMode",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutEntry",
    "PutResult",
    "PutStatus",
    "QueueEntry",
    "StoreConfig",
    "describe_cut",
    "resolved",
    "tags_code_of_properties",
    "tags_codes_of_properties",
]
