"""Dispatch and the confirm offset: which CommitLog records are in the ConsumeQueues, so visible to consumers.

Owned by ``MessageStore``, which calls it under the store lock from the put path, the replica's
``index_commit_log``, truncation, recovery and its confirm offset methods. RocketMQ's ReputMessageService
stops at the CommitLog's confirm offset unless ``readUnCommitted``; this module is that rule.

The confirm offset is the CommitLog offset below which a record may be served: in controller mode, what
the SyncStateSet has acknowledged (the HA primary sets it to the min ack of its members, a replica to the
confirm offset its primary sends, a promotion to the max offset). A store has one of two modes, chosen
when it is built (``MessageStore(hold_confirm_offset=...)``), switched at runtime by ``set_confirm_offset``,
and back to the built mode at a restart:

- following (``held is None``; the default, static groups): the confirm offset is the max offset. A put
  is indexed as it is written and a replica indexes all it receives, so nothing changes for a store
  without a controller. This is RocketMQ's non-controller behaviour too (its confirm offset is the max
  offset, or the flushed offset under SYNC_FLUSH, which here is the durability step's business, not
  visibility's). A controller-mode primary without ``all_ack_in_sync_state_set`` follows as well.
- held (controller mode): the confirm offset is the value last set, never above the max offset. Records
  past it are written to the CommitLog but not indexed until it moves (``advance``/``set``); a put gets
  its queue offset from the records already written (``_next_queue_offsets``), not from the ConsumeQueue.
  The value is persisted in the checkpoint, and recovery indexes only up to it.

Invariants, with ``dispatched`` the ConsumeQueueTable's indexed offset: ``confirm_offset <= max offset``;
``dispatched <= confirm_offset`` unless ``read_uncommitted`` (the setting indexes to the max offset whatever
the confirm offset); only truncation moves ``dispatched`` back. A held confirm offset does not survive a
crash exactly: recovery resumes from the last checkpoint's value (written each flush interval and on
every ``set``), so the visible end may step back until the primary confirms again, never forward.
"""

from __future__ import annotations

from broker_store.protocol.errors import StoreError
from broker_store.store.checkpoint import Checkpoint
from broker_store.store.commit_log import CommitLog
from broker_store.store.consume_queues import ConsumeQueueTable

TopicQueue = tuple[str, int]
"""``(topic, queue_id)`` of one of this store's consume queues (one broker, so no broker name)."""
Arrival = tuple[str, int, int]
"""``(topic, queue_id, new max queue offset)`` of a queue that got entries (for the store's arrival listeners)."""


class Dispatcher:
    """Indexes CommitLog records into ``queues`` up to the confirm offset. Not thread-safe: every method runs
    under the store lock."""

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueTable, *, hold_confirm_offset: bool,
                 read_uncommitted: bool) -> None:
        self._commit_log = commit_log
        self._queues = queues
        self.read_uncommitted = read_uncommitted
        self.held: int | None = None
        """The held confirm offset, None while it follows the max offset (change it with ``_hold``)."""
        self.inline = True
        """Whether a put indexes its records as it writes them (everything written is to be visible): following,
        or ``read_uncommitted``. An attribute, not a property: the put path reads it on every put."""
        self._hold(0 if hold_confirm_offset else None)
        self._next_queue_offsets: dict[TopicQueue, int] | None = {}
        """Held mode: the next queue offset of each queue with records past ``dispatched``; None = recount
        (after a replica write, a truncation or recovery)."""

    @property
    def confirm_offset(self) -> int:
        return self._commit_log.max_offset if self.held is None else self.held

    @property
    def limit(self) -> int:
        """The CommitLog offset indexing may reach."""
        return self._commit_log.max_offset if self.inline else self.confirm_offset

    # -- recovery ------------------------------------------------------------------------------------

    def recovery_limit(self, checkpoint: Checkpoint | None) -> int | None:
        """How far recovery may index: None = every valid record, else up to the held confirm offset the
        store resumes with (``_resumed_confirm_offset``)."""
        if self.inline:
            return None
        return self._resumed_confirm_offset(checkpoint)

    def recovered(self, checkpoint: Checkpoint | None) -> None:
        """After recovery: a held confirm offset resumes from ``checkpoint``, not below what was indexed (unless
        ``read_uncommitted``) nor above the recovered max offset."""
        if self.held is not None:
            resumed = self._resumed_confirm_offset(checkpoint)
            cl_max = self._commit_log.max_offset
            floor = 0 if self.read_uncommitted else self._queues.dispatched
            self._hold(cl_max if resumed is None else min(max(resumed, floor), cl_max))
        self._next_queue_offsets = None

    @staticmethod
    def _resumed_confirm_offset(checkpoint: Checkpoint | None) -> int | None:
        """The checkpoint's confirm offset. None (everything) when the checkpoint predates confirm offsets: a
        version-1 store ran without one and served all it held. 0 (nothing past the scan start) without a
        checkpoint: no evidence of what was confirmed, so nothing more is shown until the primary says."""
        if checkpoint is None:
            return 0
        return checkpoint.confirm_offset

    # -- changes -------------------------------------------------------------------------------------

    def set(self, offset: int | None) -> None:
        """Hold the confirm offset at ``offset`` (clamped to the max offset), or follow the max offset (None).

        StoreError when ``offset`` is below what consumers may already have seen (the indexed offset): only
        truncation takes entries back. Index what the new offset allows with ``dispatch``.
        """
        if offset is None:
            self._hold(None)
            return
        if offset < 0:
            raise StoreError(f"confirm offset {offset} is negative")
        offset = min(offset, self._commit_log.max_offset)
        if offset < self._queues.dispatched and not self.read_uncommitted:
            raise StoreError(f"confirm offset {offset} is below the indexed offset {self._queues.dispatched}: "
                             f"truncate the commit log to take entries back")
        self._hold(offset)

    def advance(self, offset: int) -> bool:
        """Raise a held confirm offset to ``offset`` (clamped to the max offset); never lowers it, and does
        nothing while it follows the max offset. Returns whether it moved."""
        held = self.held
        if held is None:
            return False
        offset = min(offset, self._commit_log.max_offset)
        if offset <= held:
            return False
        self.held = offset
        return True

    def truncated(self, offset: int) -> None:
        """The CommitLog was cut at ``offset``: a held confirm offset comes down to it."""
        if self.held is not None:
            self._hold(min(self.held, offset))
        self._next_queue_offsets = None

    def restarted(self, offset: int) -> None:
        """The CommitLog was emptied and continues at ``offset``: a held confirm offset is ``offset`` (nothing
        exists below it, nothing above it yet)."""
        if self.held is not None:
            self._hold(offset)
        self._next_queue_offsets = None

    def _hold(self, offset: int | None) -> None:
        self.held = offset
        self.inline = offset is None or self.read_uncommitted

    def written(self) -> None:
        """Records were written to the CommitLog without the put path (a replica's raw append)."""
        self._next_queue_offsets = None

    # -- the put path (held, not inline) ----------------------------------------------------------------

    def next_queue_offset(self, key: TopicQueue) -> int:
        """The queue offset a put to ``key`` gets: past the records written but not yet indexed."""
        pending = self._next_queue_offsets
        if pending is None:
            pending = self._count_pending()
        queue_offset = pending.get(key)
        if queue_offset is not None:
            return queue_offset
        cq = self._queues.get(*key)
        return 0 if cq is None else cq.max_index

    def put_written(self, key: TopicQueue, next_queue_offset: int) -> None:
        """A put wrote records to ``key`` up to (excluding) ``next_queue_offset`` without indexing them."""
        pending = self._next_queue_offsets
        if pending is None:
            pending = self._count_pending()
        pending[key] = next_queue_offset

    def _count_pending(self) -> dict[TopicQueue, int]:
        pending: dict[TopicQueue, int] = {}
        cl = self._commit_log
        pos, stopped = self._queues.dispatched, False
        while not stopped and pos < cl.max_offset:
            records, pos, stopped = cl.scan(pos, cl.max_offset)
            for r in records:
                pending[(r.topic, r.queue_id)] = r.queue_offset + 1
        self._next_queue_offsets = pending
        return pending

    # -- indexing ------------------------------------------------------------------------------------

    def dispatch(self) -> list[Arrival]:
        """Index every complete record up to ``limit``; returns the arrivals for the listeners. Raises OSError."""
        queues = self._queues
        arrived = queues.index(self._commit_log, self.limit)
        if queues.dispatched >= self._commit_log.max_offset and self._next_queue_offsets != {}:
            self._next_queue_offsets = {}  # nothing written past the indexed offset
        return arrived
