"""Which dispatched messages make a replica ask its primary for the metadata at once: a message of a topic its
topic table does not list (created on the primary after the replica's last metadata-sync round).

Owned by ``broker.metadata_sync.MetadataSync``, which asks for an early round when ``dispatched`` says so. The
store's arrival listener runs on the dispatching thread: it reads ``quiet`` (an immutable set, replaced whole, no
lock) and hops onto the event loop only for a topic outside it; ``dispatched`` and ``refresh`` run on the loop,
where the topic table lives.

Rate limit, so a topic the primary does not list either (deleted meanwhile) cannot make the replica spin: one
early request per unknown topic until the topic table changes (its data version or contents); the rounds
themselves are spaced by ``MetadataSync`` (at most one early round per ``EARLY_ROUND_GAP``).
"""

from __future__ import annotations

from broker_store.broker.send_processor import NOT_ALLOWED_SEND_TOPICS
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.protocol.topic import DataVersion

BROKER_INTERNAL_TOPICS = NOT_ALLOWED_SEND_TOPICS
"""Topics only the broker itself writes (SCHEDULE_TOPIC_XXXX, the transaction topics): they never have a topic
config here (the schedule service reads its queues directly), so a message of theirs asks for nothing."""


class UnknownTopicTrigger:
    """Decides which dispatched topics ask for an early metadata-sync round (see the module docstring)."""

    def __init__(self, topics: TopicConfigManager) -> None:
        self._topics = topics
        self._asked: set[str] = set()
        self._asked_at: tuple[DataVersion, frozenset[str]] | None = None
        self.quiet: frozenset[str] = BROKER_INTERNAL_TOPICS
        """Topics whose messages ask for nothing now: listed, internal, or asked for under this table. Read by the
        dispatching thread without a lock (replaced whole, never changed in place); a stale copy only costs a
        hop to the loop."""
        self.refresh()

    def dispatched(self, topic: str) -> bool:
        """On the loop, for a message of ``topic`` dispatched here: True when it asks for an early round (the
        first message of an unlisted topic since the table last changed)."""
        self._forget_if_changed()
        ask = topic not in BROKER_INTERNAL_TOPICS and topic not in self._topics and topic not in self._asked
        if ask:
            self._asked.add(topic)
        self._publish()
        return ask

    def refresh(self) -> None:
        """On the loop, after the topic table may have changed (a metadata-sync round): a topic asked for under
        an older table may ask again."""
        self._forget_if_changed()
        self._publish()

    def _state(self) -> tuple[DataVersion, frozenset[str]]:
        table = self._topics.table()
        return table.data_version, frozenset(table.topic_configs)

    def _forget_if_changed(self) -> None:
        state = self._state()
        if state != self._asked_at:
            self._asked.clear()
            self._asked_at = state

    def _publish(self) -> None:
        names = self._asked_at[1] if self._asked_at is not None else frozenset()
        self.quiet = names | self._asked | BROKER_INTERNAL_TOPICS
