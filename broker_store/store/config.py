"""Store configuration: the static settings one ``MessageStore`` runs with.

Built by the broker from its validated YAML config and handed to ``MessageStore``. The records a put
or get returns live in ``store.results``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from broker_store.protocol.errors import ConfigError


class FlushMode(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    """A background thread fsyncs the CommitLog every ``flush_interval_ms``; puts never wait."""
    SYNC_FLUSH = "SYNC_FLUSH"
    """A put is durable (``PutResult.durable``) only once fsynced (group commit: one fsync per batch)."""


@dataclass(frozen=True)
class StoreConfig:
    """Static configuration of one ``MessageStore``; checked when built (raises ``ConfigError``)."""

    store_dir: Path
    """Root directory: ``commitlog/``, ``consumequeue/<topic>/<queueId>/`` and ``checkpoint`` live here."""
    commit_log_segment_size: int = 128 * 1024 * 1024
    """Bytes per CommitLog segment file; no record (or batch) may be larger."""
    consume_queue_segment_entries: int = 300_000
    """20-byte ConsumeQueue entries per segment file."""
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    flush_interval_ms: int = 500
    """ASYNC_FLUSH period; also the period of ConsumeQueue fsync + checkpoint in both modes."""
    flush_timeout_ms: int = 5000
    """A ``wait_for_flush`` future resolves False after this long."""
    max_message_size: int = 4 * 1024 * 1024
    """Largest body accepted by put (bytes)."""
    file_reserved_hours: float = 72
    """CommitLog segments whose newest message is older than this are deleted by retention."""
    max_commit_log_bytes: int | None = None
    """If set, retention also deletes the oldest segments while the CommitLog is larger than this."""
    max_open_files: int = 256
    """Upper bound on file descriptors the store keeps open (LRU), the active segment included."""
    retention_interval_ms: int = 10_000
    """Period of the background retention timer; 0 disables it (call ``delete_expired`` yourself)."""
    commit_log_warm_ahead: int = 64 * 1024 * 1024
    """Bytes past the CommitLog's write position whose page cache a background thread populates before
    the writer gets there (RocketMQ's warmed mapped files): the cost of the kernel allocating page cache,
    and of a VM's host faulting in fresh memory, is then paid off the put path. 0 disables it."""

    def __post_init__(self) -> None:
        if not isinstance(self.store_dir, Path):
            if isinstance(self.store_dir, str):
                object.__setattr__(self, "store_dir", Path(self.store_dir))
            else:
                raise ConfigError(f"StoreConfig.store_dir: expected a path, "
                                  f"got {type(self.store_dir).__name__}")
        if not isinstance(self.flush_mode, FlushMode):
            raise ConfigError(f"StoreConfig.flush_mode: {self.flush_mode!r} is not one of "
                              f"{[m.name for m in FlushMode]}")
        positive = {
            "commit_log_segment_size": self.commit_log_segment_size,
            "consume_queue_segment_entries": self.consume_queue_segment_entries,
            "flush_interval_ms": self.flush_interval_ms,
            "flush_timeout_ms": self.flush_timeout_ms,
            "max_message_size": self.max_message_size,
        }
        for name, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"StoreConfig.{name}: must be a positive integer, got {value!r}")
        if self.commit_log_segment_size < 4096:
            raise ConfigError(f"StoreConfig.commit_log_segment_size: must be >= 4096, "
                              f"got {self.commit_log_segment_size}")
        if self.max_open_files < 4:
            raise ConfigError(f"StoreConfig.max_open_files: must be >= 4, got {self.max_open_files}")
        if self.file_reserved_hours <= 0:
            raise ConfigError(f"StoreConfig.file_reserved_hours: must be > 0, got {self.file_reserved_hours}")
        if self.max_commit_log_bytes is not None and self.max_commit_log_bytes <= 0:
            raise ConfigError(f"StoreConfig.max_commit_log_bytes: must be > 0 or None, "
                              f"got {self.max_commit_log_bytes}")
        if not isinstance(self.commit_log_warm_ahead, int) or self.commit_log_warm_ahead < 0:
            raise ConfigError(f"StoreConfig.commit_log_warm_ahead: must be an integer >= 0, "
                              f"got {self.commit_log_warm_ahead!r}")
        if self.retention_interval_ms < 0:
            raise ConfigError(f"StoreConfig.retention_interval_ms: must be >= 0, "
                              f"got {self.retention_interval_ms}")
