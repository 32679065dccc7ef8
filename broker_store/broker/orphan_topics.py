"""Orphan topics at a promotion: topics with messages in this broker's ConsumeQueues but no topic config.

A replica copies its primary's topic table once per metadata-sync round (``broker.metadata_sync``), but the
messages of a topic arrive with the log. A topic created on the primary after the replica's last round has its
acknowledged messages here and no config: once this broker is promoted, pulls would answer TOPIC_NOT_EXIST and
routes would not list the topic. So a promotion, while fenced, adopts each such topic: it gets a config
(read/write queue count = its highest queue id + 1, perm read-write, every other setting RocketMQ's default),
persisted and registered like any change, with one WARNING per topic asking the operator to check the settings.

Not adopted, with an INFO line:

- a broker-internal topic (``unknown_topics.BROKER_INTERNAL_TOPICS``: SCHEDULE_TOPIC_XXXX never has a config; the
  schedule service reads its queues directly);
- a topic whose newest message lies below ``table_log_offset`` (the log end when the topic table in force was
  asked for): a topic created after that answer has every message at or past it, so this one was listed before
  and is absent from the copy because the primary deleted it (its messages age out with retention). Without that
  offset (no round since start, or the log was cut since) every orphan is adopted: keeping a deleted topic is
  the operator's to undo, losing a live one is not undoable.

%RETRY% and %DLQ% topics are adopted like user topics: consumers and operators read them and their configs are
ordinary ones (read-write, created on demand by the primary). Called by ``broker.role_transition.RoleTransition``
through the hook ``BrokerServer`` gives it; ``orphan_topic_configs`` is the rule, without I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from broker_store.broker.topic_config import TopicConfigManager
from broker_store.broker.unknown_topics import BROKER_INTERNAL_TOPICS
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from broker_store.protocol.topic import TopicConfig

if TYPE_CHECKING:
    from broker_store.store import MessageStore

log = logging.getLogger(__name__)


class Orphans(NamedTuple):
    """What a promotion does with the topics that have messages but no config."""

    adopt: list[TopicConfig]
    """The configs to add, one per adopted topic."""
    left: list[tuple[str, str]]
    """(topic, why it is not adopted)."""


def orphan_topic_configs(queues: Mapping[str, Sequence[int]], listed: Container[str],
                         newest_offset: Callable[[str], int | None], table_log_offset: int | None,
                         log_end: int) -> Orphans:
    """The rule of the module docstring. ``queues``: topic -> ids of its ConsumeQueues here; ``listed``: the topic
    table; ``newest_offset(topic)``: the CommitLog offset of the topic's newest message still stored (None: none
    left); ``log_end``: this broker's max offset (a ``table_log_offset`` past it means the log was cut since)."""
    out = Orphans([], [])
    mark = table_log_offset if table_log_offset is not None and table_log_offset <= log_end else None
    for topic, queue_ids in sorted(queues.items()):
        if topic in listed or not queue_ids:
            continue
        if topic in BROKER_INTERNAL_TOPICS:
            out.left.append((topic, "a broker-internal topic, which has no topic config"))
            continue
        newest = newest_offset(topic)
        if newest is None:
            out.left.append((topic, "no message of it is left (retention)"))
            continue
        if mark is not None and newest < mark:
            out.left.append((topic, f"its newest message (CommitLog offset {newest}) predates this broker's last "
                                    f"copy of the primary's topic table (asked at offset {mark}), which did not "
                                    "list it: the primary deleted it"))
            continue
        queue_nums = max(queue_ids) + 1
        out.adopt.append(TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                                     perm=PERM_READ | PERM_WRITE))
    return out


def newest_message_offset(store: MessageStore, topic: str) -> int | None:
    """The CommitLog offset of ``topic``'s newest message still stored here (None: none)."""
    newest: int | None = None
    for queue_id in store.queues().get(topic, []):
        max_offset = store.get_max_offset(topic, queue_id)
        if max_offset <= store.get_min_offset(topic, queue_id):
            continue
        entries = store.get_queue_entries(topic, queue_id, max_offset - 1, 1)
        if entries:
            newest = max(newest or 0, entries[0].physical_offset)
    return newest


def adopt_orphan_topics(store: MessageStore, topics: TopicConfigManager, table_log_offset: int | None,
                        broker_name: str) -> list[TopicConfig]:
    """Give each orphan topic of ``store`` its config in ``topics`` (persisted, listeners told: the broker
    re-registers); log each decision. Runs on the event loop while a promotion is fenced."""
    queues = store.queues()
    orphans = orphan_topic_configs(queues, topics.table().topic_configs,
                                   lambda topic: newest_message_offset(store, topic), table_log_offset,
                                   store.max_physical_offset)
    for topic, why in orphans.left:
        log.info("promotion of %s: topic %s has messages here but no topic config; not adopted: %s",
                 broker_name, topic, why)
    for tc in orphans.adopt:
        topics.update(tc)
        log.warning("promotion of %s: topic %s had messages in queues %s here but no topic config (created on the "
                    "old primary after this broker's last metadata sync): adopted with %d read/write queues, perm "
                    "read-write, other settings default; check its settings (queue counts, perm, order, "
                    "attributes) and set them with updateTopic", broker_name, tc.topic_name,
                    queues.get(tc.topic_name, []), tc.read_queue_nums)
    return orphans.adopt
