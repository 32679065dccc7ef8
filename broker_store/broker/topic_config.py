"""The broker's topic table: persisted, versioned, and the rules for auto-creating topics.

Owned by ``BrokerServer``; read on every send and pull (``select`` is a dict lookup), changed by
UPDATE_AND_CREATE_TOPIC, by sends to unknown topics (TBW102 inheritance) and by retry/DLQ topic
creation. Every change bumps the DataVersion, persists ``topics.json`` and notifies listeners (the
controller re-registers with the name servers).

``topics.json`` (see ``broker_store.durable_file``)::

    {"version": 1, "dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
     "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, ...}}}
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_store.clock import Clock, wall_ms
from broker_store.durable_file import load_metadata_file, write_metadata_file
from broker_store.protocol.codes import PERM_INHERIT, PERM_READ, PERM_WRITE
from broker_store.protocol.errors import ProtocolError, StoreError
from broker_store.protocol.topic import (
    DEFAULT_TOPIC,
    DataVersion,
    TopicConfig,
    TopicConfigTable,
    is_inherited,
)

log = logging.getLogger(__name__)

FILE_NAME = "topics.json"


class TopicConfigManager:
    """Topic name -> TopicConfig. Single-threaded (the broker's event loop).

    ``clock`` stamps data versions; ``auto_create_topic_enable`` decides whether TBW102 (perm
    READ|WRITE|INHERIT, ``default_topic_queue_nums`` queues) is present.
    """

    def __init__(
        self,
        path: Path,
        *,
        auto_create_topic_enable: bool,
        default_topic_queue_nums: int,
        clock: Clock,
    ) -> None:
        self.path = path
        self.auto_create_topic_enable = auto_create_topic_enable
        self.default_topic_queue_nums = default_topic_queue_nums
        self._clock = clock
        self._table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.change_listeners: list[Callable[[TopicConfig], None]] = []
        """Called after each persisted change with the changed topic's config."""

    def load(self) -> None:
        """Read ``topics.json`` (if any), then apply the TBW102 rule of the current configuration."""
        table = load_metadata_file(self.path, _parse_topics)
        if table is not None:
            self._table = dict(table.topic_configs)
            self.data_version = table.data_version
        changed = False
        if self.auto_create_topic_enable:
            if DEFAULT_TOPIC not in self._table:
                n = self.default_topic_queue_nums
                self._table[DEFAULT_TOPIC] = TopicConfig(
                    DEFAULT_TOPIC,
                    read_queue_nums=n,
                    write_queue_nums=n,
                    perm=PERM_READ | PERM_WRITE | PERM_INHERIT,
                )
                changed = True
        elif DEFAULT_TOPIC in self._table:
            # The template must not outlive the option that asked for it.
            del self._table[DEFAULT_TOPIC]
            changed = True
        if changed or table is None:
            self.data_version = self.data_version.next(wall_ms(self._clock))
            self.persist()

    def persist(self) -> None:
        write_metadata_file(self.path, TopicConfigTable(self._table, self.data_version).to_json())

    def select(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self._table

    def table(self) -> TopicConfigTable:
        """A snapshot for REGISTER_BROKER and GET_ALL_TOPIC_CONFIG."""
        return TopicConfigTable(dict(self._table), self.data_version)

    def update(self, tc: TopicConfig) -> None:
        """Create or replace a topic's config, persist, notify."""
        self._table[tc.topic_name] = tc
        self._changed(tc)

    def replace_all(self, table: TopicConfigTable) -> bool:
        """A replica's metadata sync: take the primary's whole table and data version, persist. Returns
        False (and writes nothing) when the data version is already the primary's. Change listeners are
        not called per topic; the caller re-registers once."""
        if table.data_version == self.data_version and dict(table.topic_configs) == self._table:
            return False
        self._table = dict(table.topic_configs)
        self.data_version = table.data_version
        self.persist()
        return True

    def delete(self, topic: str) -> bool:
        tc = self._table.pop(topic, None)
        if tc is None:
            return False
        self._changed(tc)
        return True

    def _changed(self, tc: TopicConfig) -> None:
        self.data_version = self.data_version.next(wall_ms(self._clock))
        self.persist()
        for listener in self.change_listeners:
            listener(tc)

    def create_in_send(
        self, topic: str, default_topic: str, client_default_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """RocketMQ's createTopicInSendMessageMethod: a topic inherits from ``default_topic`` when that
        topic carries PERM_INHERIT; queues = min(client's defaultTopicQueueNums, template's write
        queues); perm = template's without INHERIT. None when nothing may be created."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        template = self._table.get(default_topic)
        if template is None:
            log.warning("send to unknown topic %s: default topic %s does not exist", topic, default_topic)
            return None
        if not is_inherited(template.perm):
            log.warning(
                "send to unknown topic %s: default topic %s has no INHERIT permission (%d)",
                topic,
                default_topic,
                template.perm,
            )
            return None
        queues = max(min(client_default_queue_nums, template.write_queue_nums), 0)
        tc = TopicConfig(
            topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=template.perm & ~PERM_INHERIT,
            topic_filter_type=template.topic_filter_type,
            topic_sys_flag=topic_sys_flag,
        )
        log.info("auto-created topic %s from %s: %s", topic, default_topic, tc)
        self.update(tc)
        return tc

    def create_in_send_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """RocketMQ's createTopicInSendMessageBackMethod: retry / DLQ topics are created on demand."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(
            topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
        )
        log.info("created topic %s: %s", topic, tc)
        self.update(tc)
        return tc


def _parse_topics(data: dict[str, Any]) -> TopicConfigTable:
    try:
        return TopicConfigTable.from_json(data)
    except ProtocolError as exc:
        raise StoreError(str(exc)) from exc
