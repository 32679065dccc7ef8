"""What HA needs of a message store: raw CommitLog bytes at physical offsets, nothing else.

``primary_service`` reads through ``PrimaryLog``; ``replica_client`` writes through ``ReplicaLog``.
``broker_store.store.MessageStore`` provides every method (``ReplicaLog``'s through its part
``store.replica_log.ReplicaCommitLog``): HA never imports the store's modules, so tests and the broker pass the
store itself and the store's internals stay free to change (``tests/unit/test_broker_store_layout.py``).
Controller mode reads and writes through ``EpochPrimaryLog`` / ``EpochReplicaLog``
(``store.epoch_store.EpochStore``); the epoch values (``store.epoch_cache``) are pure data, shared.
"""

from __future__ import annotations

from typing import Protocol

from broker_store.store.epoch_cache import EpochCache, EpochEntry


class PrimaryLog(Protocol):
    """The primary's CommitLog, read by the shipping streams (on the event-loop thread)."""

    @property
    def min_physical_offset(self) -> int:
        """First byte still held (retention moves it forward)."""
        ...

    @property
    def max_physical_offset(self) -> int:
        """Next byte to be written."""
        ...

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """Raw bytes from ``offset``, never crossing a segment end; b"" outside [min, max)."""
        ...


class ReplicaLog(PrimaryLog, Protocol):
    """The replica's CommitLog, written only by its ``replica_client`` (appends run on a worker thread)."""

    def append_commit_log(self, offset: int, data: bytes) -> None:
        """Write ``data`` at exactly the max offset (not crossing a segment end) and index whole records."""
        ...

    def write_commit_log(self, offset: int, data: bytes) -> None:
        """``append_commit_log`` without the indexing: the max offset moves, records wait for ``index_commit_log``."""
        ...

    def index_commit_log(self) -> None:
        """Index every complete record written so far."""
        ...

    def truncate_commit_log(self, offset: int) -> None:
        """Drop every byte at or past ``offset`` (a record boundary)."""
        ...

    def restart_commit_log(self, offset: int) -> None:
        """Drop the whole log and continue, empty, at ``offset`` (min = max = offset).

        Needed when the replica's log lies entirely below the primary's min offset (``replica_start``
        RESTART); ``truncate_commit_log`` can only move the max offset down.
        """
        ...


class EpochPrimaryLog(PrimaryLog, Protocol):
    """A controller-mode primary's log: its epochs and the confirm offset its SyncStateSet moves
    (``broker_store.store.epoch_store.EpochStore`` provides every method)."""

    @property
    def epoch_cache(self) -> EpochCache:
        """The epochs of this log, oldest first (the handshake sends them; batches stop at their ends)."""
        ...

    @property
    def confirm_offset(self) -> int:
        ...

    def advance_confirm_offset(self, offset: int) -> None:
        """Raise the confirm offset (never lowers it; clamped to the max offset); indexes what it confirms."""
        ...


class EpochReplicaLog(ReplicaLog, EpochPrimaryLog, Protocol):
    """A controller-mode replica's log: the classic writes plus its epochs, changed in crash-safe orders."""

    def append_epoch_entry(self, entry: EpochEntry) -> None:
        """Record a new epoch (before writing its first bytes)."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Cut the log, its queues and its epochs at ``offset`` (the consistent point)."""
        ...

    def restart_at(self, offset: int) -> None:
        """Drop the whole log and its epochs; continue, empty, at ``offset``."""
        ...
