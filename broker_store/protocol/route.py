"""Route and cluster metadata exchanged with the name server, and RocketMQ's JSON dialect for it.

RocketMQ serialises maps keyed by broker id with bare numeric keys, which is not standard JSON::

    {"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},
                     "brokerName":"broker-a","cluster":"source"}],
     "filterServerTable":{},
     "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,
                    "topicSysFlag":0,"writeQueueNums":4}]}

``dumps_rocketmq`` writes that dialect (fastjson reads it, and so do real clients);
``loads_rocketmq`` reads it as well as standard JSON, so our client works against real clusters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker_store.protocol.errors import ProtocolError

MASTER_ID = 0

# A bare integer key: after '{' or ',' (outside strings), digits, then ':'.
_BARE_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)')


def loads_rocketmq(raw: bytes | str) -> Any:
    """Parse JSON that may contain RocketMQ's bare numeric object keys."""
    try:
        text = raw.decode() if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"body is not UTF-8: {exc}") from exc
    quoted = _BARE_KEY.sub(lambda m: m.group(1) or f'{m.group(2)}"{m.group(3)}"{m.group(4)}', text)
    try:
        return orjson.loads(quoted)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"body is not valid RocketMQ JSON: {exc}") from exc


def dumps_rocketmq(obj: Any) -> bytes:
    """Serialise like fastjson: sorted keys, maps with int keys written with bare numeric keys."""
    return _dump(obj).encode()


def _dump(obj: Any) -> str:
    if isinstance(obj, Mapping):
        items = []
        for key in sorted(obj, key=lambda k: (isinstance(k, str), k if not isinstance(k, str) else 0, str(k))):
            name = str(key) if isinstance(key, int) and not isinstance(key, bool) else orjson.dumps(key).decode()
            items.append(f"{name}:{_dump(obj[key])}")
        return "{" + ",".join(items) + "}"
    if isinstance(obj, list | tuple | set | frozenset):
        seq = sorted(obj) if isinstance(obj, set | frozenset) else obj
        return "[" + ",".join(_dump(v) for v in seq) + "]"
    return orjson.dumps(obj).decode()


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one broker group."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> QueueData:
        return cls(broker_name=d["brokerName"], read_queue_nums=int(d["readQueueNums"]),
                   write_queue_nums=int(d["writeQueueNums"]), perm=int(d["perm"]),
                   topic_sys_flag=int(d.get("topicSysFlag", 0)))


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker group: its cluster, name and addresses by broker id (0 = primary)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """Primary if present, else any replica (reads only)."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return next(iter(sorted(self.broker_addrs.items())), (None, None))[1]

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name, "cluster": self.cluster}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BrokerData:
        addrs = {int(k): v for k, v in (d.get("brokerAddrs") or {}).items()}
        return cls(cluster=d.get("cluster", ""), broker_name=d["brokerName"], broker_addrs=addrs)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC body."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"brokerDatas": [b.to_json() for b in self.broker_datas], "filterServerTable": {},
                             "queueDatas": [q.to_json() for q in self.queue_datas]}
        if self.order_topic_conf:
            d["orderTopicConf"] = self.order_topic_conf
        return d

    def encode(self) -> bytes:
        return dumps_rocketmq(self.to_json())

    @classmethod
    def decode(cls, raw: bytes) -> TopicRouteData:
        d = loads_rocketmq(raw)
        if not isinstance(d, dict):
            raise ProtocolError("topic route data is not a JSON object")
        try:
            return cls(queue_datas=tuple(QueueData.from_json(q) for q in d.get("queueDatas") or []),
                       broker_datas=tuple(BrokerData.from_json(b) for b in d.get("brokerDatas") or []),
                       order_topic_conf=d.get("orderTopicConf"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed topic route data: {exc!r}") from exc

    def broker(self, broker_name: str) -> BrokerData | None:
        return next((b for b in self.broker_datas if b.broker_name == broker_name), None)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO body."""

    broker_addr_table: Mapping[str, BrokerData]
    cluster_addr_table: Mapping[str, tuple[str, ...]]

    def encode(self) -> bytes:
        return dumps_rocketmq({
            "brokerAddrTable": {name: b.to_json() for name, b in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        })

    @classmethod
    def decode(cls, raw: bytes) -> ClusterInfo:
        d = loads_rocketmq(raw)
        if not isinstance(d, dict):
            raise ProtocolError("cluster info is not a JSON object")
        try:
            brokers = d.get("brokerAddrTable") or {}
            return cls(broker_addr_table={n: BrokerData.from_json(b) for n, b in brokers.items()},
                       cluster_addr_table={c: tuple(v) for c, v in (d.get("clusterAddrTable") or {}).items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed cluster info: {exc!r}") from exc
