"""Topic configuration bodies exchanged between brokers, name servers and admin clients.

Wire types only (no I/O). Used by ``broker_store.broker`` (GET_ALL_TOPIC_CONFIG, REGISTER_BROKER
bodies it sends) and ``broker_store.namesrv`` (REGISTER_BROKER bodies it reads). JSON as fastjson
writes it, keys sorted::

    TopicConfig        {"attributes":{},"order":false,"perm":6,"readQueueNums":8,
                        "topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,
                        "writeQueueNums":8}
    DataVersion        {"counter":3,"stateVersion":0,"timestamp":1700000000000}
    TopicConfigSerializeWrapper
                       {"dataVersion":DataVersion,"topicConfigTable":{"T":TopicConfig,...}}
    RegisterBrokerBody {"filterServerList":[],"topicConfigSerializeWrapper":TopicConfigSerializeWrapper}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_store.protocol.codes import PERM_INHERIT, PERM_READ, PERM_WRITE
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.route import dumps_rocketmq, loads_rocketmq

DEFAULT_TOPIC = "TBW102"
"""RocketMQ's AUTO_CREATE_TOPIC_KEY_TOPIC: the template topic for auto-created topics."""
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOPIC_FILTER_SINGLE_TAG = "SINGLE_TAG"
"""TopicFilterType.SINGLE_TAG, the only filter type RocketMQ uses."""


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_inherited(perm: int) -> bool:
    return bool(perm & PERM_INHERIT)


def perm_to_string(perm: int) -> str:
    """RocketMQ's PermName.perm2String, e.g. 6 -> "RW-"."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's configuration on one broker: the broker's table entry, the REGISTER_BROKER and
    GET_ALL_TOPIC_CONFIG JSON, and what ``broker_store.client.Admin.all_topic_config`` returns.

    ``from_json`` fills a missing field with the default of RocketMQ's TopicConfig (fastjson leaves
    a Java field at its default when the key is absent), so only the table key is needed."""

    topic_name: str
    read_queue_nums: int = 16
    """Queues consumers read (RocketMQ's default for a new TopicConfig is 16/16)."""
    write_queue_nums: int = 16
    """Queues producers write; usually equal to read_queue_nums."""
    perm: int = PERM_READ | PERM_WRITE
    """PERM_* bits: READ 4, WRITE 2, INHERIT 1 (template for auto-created topics)."""
    topic_filter_type: str = TOPIC_FILTER_SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any], name: str | None = None) -> TopicConfig:
        """Parse one entry; ``name`` is the table key, used when the entry omits topicName."""
        try:
            attrs = d.get("attributes") or {}
            return cls(
                topic_name=str(d.get("topicName") or name or ""),
                read_queue_nums=int(d.get("readQueueNums", 16)),
                write_queue_nums=int(d.get("writeQueueNums", 16)),
                perm=int(d.get("perm", PERM_READ | PERM_WRITE)),
                topic_filter_type=str(d.get("topicFilterType") or TOPIC_FILTER_SINGLE_TAG),
                topic_sys_flag=int(d.get("topicSysFlag") or 0),
                order=bool(d.get("order", False)),
                attributes={str(k): str(v) for k, v in attrs.items()},
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed topic config {name or ''}: {exc}") from exc

    def __str__(self) -> str:
        # The shape RocketMQ's TopicConfig.toString has; it appears in error remarks.
        return (
            f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
            f"writeQueueNums={self.write_queue_nums}, perm={perm_to_string(self.perm)}, "
            f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
            f"order={str(self.order).lower()}]"
        )


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Version stamp of a broker's metadata table; changes whenever the table changes."""

    timestamp: int = 0
    """Wall-clock ms of the last change."""
    counter: int = 0
    """Number of changes since the table was created."""
    state_version: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(timestamp=now_ms, counter=self.counter + 1, state_version=self.state_version)

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> DataVersion:
        if not d:
            return cls()
        try:
            return cls(
                timestamp=int(d.get("timestamp", 0)),
                counter=int(d.get("counter", 0)),
                state_version=int(d.get("stateVersion", 0)),
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed dataVersion: {exc}") from exc

    def encode(self) -> bytes:
        return dumps_rocketmq(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> DataVersion:
        d = loads_rocketmq(raw)
        if not isinstance(d, dict):
            raise ProtocolError("dataVersion body is not a JSON object")
        return cls.from_json(d)


@dataclass(frozen=True, slots=True)
class TopicConfigTable:
    """TopicConfigSerializeWrapper: every topic of a broker plus the table's version."""

    topic_configs: Mapping[str, TopicConfig]
    data_version: DataVersion

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.topic_configs.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TopicConfigTable:
        if not isinstance(d, Mapping):
            raise ProtocolError("topicConfigSerializeWrapper is not a JSON object")
        table = d.get("topicConfigTable") or {}
        if not isinstance(table, Mapping):
            raise ProtocolError("topicConfigTable is not a JSON object")
        configs = {}
        for name, entry in table.items():
            if not isinstance(entry, Mapping):
                raise ProtocolError(f"topicConfigTable[{name!r}] is not a JSON object")
            configs[str(name)] = TopicConfig.from_json(entry, str(name))
        return cls(topic_configs=configs, data_version=DataVersion.from_json(d.get("dataVersion")))

    def encode(self) -> bytes:
        return dumps_rocketmq(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> TopicConfigTable:
        return cls.from_json(loads_rocketmq(raw))


def encode_register_broker_body(table: TopicConfigTable) -> bytes:
    """RegisterBrokerBody, uncompressed JSON (RocketMQ's compressedRegister=false form)."""
    return dumps_rocketmq({"filterServerList": [], "topicConfigSerializeWrapper": table.to_json()})


def decode_register_broker_body(raw: bytes) -> TopicConfigTable:
    """Topic table of an uncompressed RegisterBrokerBody; an empty body means no topics."""
    if not raw:
        return TopicConfigTable(topic_configs={}, data_version=DataVersion())
    d = loads_rocketmq(raw)
    if not isinstance(d, dict):
        raise ProtocolError("RegisterBrokerBody is not a JSON object")
    wrapper = d.get("topicConfigSerializeWrapper")
    if wrapper is None:
        return TopicConfigTable(topic_configs={}, data_version=DataVersion())
    return TopicConfigTable.from_json(wrapper)
