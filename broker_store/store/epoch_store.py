"""EpochStore: a controller-mode store: the MessageStore and its epoch file, changed together in crash-safe orders.

Built by the broker (``broker.replication``) in controller mode over a started ``MessageStore`` (built with
``hold_confirm_offset=True``) and the epoch file in its directory; the controller-mode HA link reads and
writes through it (``ha.store_view.EpochReplicaLog`` / ``EpochPrimaryLog``: HA never imports the store) and
the promotion's steps call ``begin_epoch``. Every operation that touches both the CommitLog and the epoch
file does it in an order that a kill -9 between any two steps leaves recoverable, because ``open`` repairs
the one state such a crash can leave (epoch entries starting past the recovered max offset):

    truncate_to(point), a rejoining replica cutting its log at the consistent point:
        1. CommitLog, then its ConsumeQueue entries, then the store checkpoint (``truncate_commit_log``, in that
           order; recovery cuts ConsumeQueue entries past the CommitLog's end and resumes from the checkpoint)
        2. epoch file: entries starting at or past the point go (``EpochFile.truncate_suffix``)
        3. the ``on_truncated`` hooks (the broker clamps consumer and delay offsets past the queues' ends)
      A crash after 1 leaves entries starting past the max offset: ``open`` drops them, and the next handshake
      finds the same consistent point (an entry is only dropped when the bytes it described are gone, and the
      walk finds the same matching epoch, whose end is then the max offset, which is the point). Cutting the
      epoch file first would not be safe: the last kept epoch would then claim the fork's bytes, and a rejoin
      after the crash could keep them.
    restart_at(offset), a replica whose log lies below the primary's min offset (or a new one):
        1. CommitLog emptied at ``offset``  2. epoch file emptied  (a crash between: the old entries describe
        nothing, the next handshake's consistent point is at most ``offset`` and cuts nothing that exists)
    append_epoch_entry(entry), a replica told of a new epoch by a transfer header, before writing its bytes:
        epoch file first (a crash before the bytes leaves an entry at the max offset, which is valid)
    begin_epoch(epoch, start), a promotion: cut entries at or past ``start``, append (epoch, start)

Not thread-safe: the HA client (one session at a time) and the role transition (serialised) are its writers,
and a role change stops the HA client before it writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from broker_store.protocol.errors import StoreError
from broker_store.store.epoch_cache import EpochCache, EpochEntry
from broker_store.store.epoch_file import EpochFile
from broker_store.store.message_store import MessageStore

log = logging.getLogger(__name__)

TruncationHook = Callable[[int], None]
"""``hook(offset)``: the CommitLog and ConsumeQueues were cut at ``offset`` (runs on the truncating thread)."""


class EpochStore:
    """The store and its epoch cache as one controller-mode log (see the module docstring). Every
    ``MessageStore`` attribute the HA link reads is delegated."""

    def __init__(self, store: MessageStore, epoch_file: EpochFile) -> None:
        self.store = store
        self._epochs = epoch_file
        self.on_truncated: list[TruncationHook] = []
        """Called after a ``truncate_to`` (the broker's consumer and delay offsets, #4771)."""

    @classmethod
    def open(cls, store: MessageStore, directory: Path | None = None) -> EpochStore:
        """Load the epoch file of ``directory`` (default: the store's) for a started ``store``, dropping the
        entries that start past its max offset (what a crash inside ``truncate_to`` leaves)."""
        epoch_file = EpochFile.open(directory or store.config.store_dir)
        max_offset = store.max_physical_offset
        stale = [e for e in epoch_file.cache.entries if e.start_offset > max_offset]
        if stale:
            log.warning("epoch file: dropping entries %s that start past the commit log's max offset %d (an "
                        "interrupted truncation)", list(map(str, stale)), max_offset)
            epoch_file.truncate_suffix(max_offset + 1)
        return cls(store, epoch_file)

    # -- epochs -------------------------------------------------------------------------------------------------

    @property
    def epoch_cache(self) -> EpochCache:
        return self._epochs.cache

    def append_epoch_entry(self, entry: EpochEntry) -> None:
        """Record a new epoch starting at ``entry.start_offset`` (at most the max offset), durably."""
        if entry.start_offset > self.store.max_physical_offset:
            raise StoreError(f"epoch entry {entry} starts past the commit log's max offset "
                             f"{self.store.max_physical_offset}")
        self._epochs.append(entry)

    def begin_epoch(self, epoch: int, start_offset: int) -> None:
        """A promotion: ``EpochFile.begin_epoch`` (entries at or past ``start_offset`` go, then the epoch's entry,
        kept when it is the newest already)."""
        self._epochs.begin_epoch(epoch, start_offset)

    # -- truncation ---------------------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Cut the log at ``offset`` (a record boundary: a consistent point) in the crash-safe order above."""
        self.store.truncate_commit_log(offset)
        self._epochs.truncate_suffix(offset)
        for hook in self.on_truncated:
            hook(offset)

    def restart_at(self, offset: int) -> None:
        """Drop the whole log and its epochs; continue, empty, at ``offset``."""
        self.store.restart_commit_log(offset)
        self._epochs.truncate_suffix(0)

    # -- the MessageStore's side, delegated (``ha.store_view`` Protocols) ---------------------------------------

    @property
    def min_physical_offset(self) -> int:
        return self.store.min_physical_offset

    @property
    def max_physical_offset(self) -> int:
        return self.store.max_physical_offset

    @property
    def confirm_offset(self) -> int:
        return self.store.confirm_offset

    def advance_confirm_offset(self, offset: int) -> None:
        self.store.advance_confirm_offset(offset)

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        return self.store.read_commit_log(offset, max_bytes)

    def append_commit_log(self, offset: int, data: bytes) -> None:
        self.store.append_commit_log(offset, data)

    def write_commit_log(self, offset: int, data: bytes) -> None:
        self.store.write_commit_log(offset, data)

    def index_commit_log(self) -> None:
        self.store.index_commit_log()

    def truncate_commit_log(self, offset: int) -> None:
        self.truncate_to(offset)

    def restart_commit_log(self, offset: int) -> None:
        self.restart_at(offset)
