"""Store settings: the one definition (default, bounds, meaning) of every setting ``MessageStore`` reads.

``StoreSettings`` is the broker YAML's ``store:`` section (``broker_store.config.BrokerSettings.store``);
``StoreConfig`` adds the directory and is what ``MessageStore`` is built with. Both are validated when
built: a problem raises ``ConfigError`` naming the field, the value and what is allowed (in a YAML file,
``broker_store.config.load_yaml`` adds the file and the field path). The records a put or get returns
live in ``store.results``.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from broker_store.protocol.errors import ConfigError

MiB = 1024 * 1024
BATCH_ALLOWANCE = 64 * 1024
"""What an encoded SEND_BATCH_MESSAGE body may hold beyond ``max_message_size``: entry headers and
properties. RocketMQ reserves the same 64 KiB past the body limit for a whole encoded message."""


class FlushMode(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    """A background thread fsyncs the CommitLog every ``flush_interval_ms``; puts never wait."""
    SYNC_FLUSH = "SYNC_FLUSH"
    """A put is durable (``PutResult.durable``) only once fsynced (group commit: one fsync per batch)."""


class StoreSettings(BaseModel):
    """The store's tunables; every key has its default here and nowhere else."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    commit_log_segment_size: int = Field(default=128 * MiB, ge=4096)
    """Bytes per CommitLog segment file (>= 4096; ``max_message_size`` + 4 KiB must fit); no record (or batch) may
    be larger (small in tests)."""
    consume_queue_segment_entries: int = Field(default=300_000, gt=0)
    """20-byte ConsumeQueue entries per segment file."""
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    """SYNC_FLUSH acknowledges a send after fsync (group commit); ASYNC_FLUSH fsyncs in the background."""
    flush_interval_ms: int = Field(default=500, gt=0)
    """ASYNC_FLUSH: longest time between background fsyncs; in both modes the period of the ConsumeQueue
    fsync and the checkpoint."""
    flush_timeout_ms: int = Field(default=5000, gt=0)
    """SYNC_FLUSH: a send not flushed within this is answered FLUSH_DISK_TIMEOUT."""
    max_message_size: int = Field(default=4 * MiB, gt=0)
    """Largest accepted message body, bytes (MESSAGE_ILLEGAL beyond it), for a single send and for each
    message of a batch alike. The whole encoded batch is bounded separately (``max_batch_size``): an encoded
    SEND_BATCH_MESSAGE body may be 64 KiB larger (entry headers and properties, the allowance RocketMQ reserves past
    the body limit), so a message accepted alone is accepted in a batch of one."""
    file_reserved_hours: float = Field(default=72.0, gt=0)
    """Retention by age: CommitLog segments whose newest message is older than this are deleted (min
    offsets move forward, older pulls get PULL_OFFSET_MOVED)."""
    max_commit_log_bytes: int | None = Field(default=None, gt=0)
    """Optional cap on CommitLog disk use; retention deletes the oldest segments beyond it."""
    max_open_files: int = Field(default=256, ge=4)
    """Upper bound on file descriptors the store keeps open (LRU), the active segment included (>= 4)."""
    retention_interval_ms: int = Field(default=10_000, ge=0)
    """Period of the background retention timer; 0 disables it (``delete_expired`` is then the caller's)."""
    commit_log_warm_ahead: int = Field(default=64 * MiB, ge=0)
    """Bytes past the CommitLog's write position whose page cache a background thread populates before
    the writer gets there (segment files are created full size, the unwritten tail a hole), as RocketMQ
    warms its mapped files: the cost of the kernel allocating page cache, and of a VM's host faulting in
    fresh memory, is then paid off the put path. 0 disables it."""
    read_uncommitted: bool = False
    """Controller mode: index and serve records past the confirm offset too (RocketMQ readUnCommitted), so
    consumers may read entries a failover later truncates. No effect while the confirm offset follows the max
    offset (static groups)."""

    @property
    def max_batch_size(self) -> int:
        """Largest encoded SEND_BATCH_MESSAGE body: ``max_message_size`` + 64 KiB (``BATCH_ALLOWANCE``), so a
        message that is accepted alone is accepted as a batch of one, whatever its properties."""
        return self.max_message_size + BATCH_ALLOWANCE


class StoreConfig(StoreSettings):
    """Configuration of one ``MessageStore``: its settings and its directory. Built directly (not nested in
    another model), so it raises ``ConfigError`` itself."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{type(self).__name__}.{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
                for e in exc.errors())
            raise ConfigError(problems) from exc

    store_dir: Path
    """Root directory: ``commitlog/``, ``consumequeue/<topic>/<queueId>/`` and ``checkpoint`` live here."""
