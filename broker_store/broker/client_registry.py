"""Producers and consumers known to the broker, from HEART_BEAT / UNREGISTER_CLIENT.

State machine only (no sockets): the controller feeds it decoded heartbeats, connection-closed
events and periodic expiry scans on the broker's injected ``Clock`` (``monotonic``). The pull processor reads group
subscriptions from it; GET_CONSUMER_LIST_BY_GROUP reads client ids.

HeartbeatData body (JSON, as RocketMQ clients send it)::

    {"clientID": "10.0.0.1@4711",
     "consumerDataSet": [{"groupName": "g1", "consumeType": "CONSUME_PASSIVELY",
                          "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "subscriptionDataSet": [{"topic": "T", "subString": "TagA || TagB",
                                                   "tagsSet": ["TagA", "TagB"], "codeSet": [..],
                                                   "subVersion": 1700000000000, "expressionType": "TAG"}],
                          "unitMode": false}],
     "producerDataSet": [{"groupName": "p1"}]}
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from broker_store.broker.subscription import SubscriptionData, subscription_from_json
from broker_store.clock import Clock
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.route import loads_rocketmq


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group entry of a heartbeat."""

    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: tuple[SubscriptionData, ...]


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    client_id: str
    consumers: tuple[ConsumerData, ...]
    producer_groups: tuple[str, ...]


def decode_heartbeat(raw: bytes) -> HeartbeatData:
    """Parse a HEART_BEAT body; ProtocolError naming what is missing."""
    d = loads_rocketmq(raw)
    if not isinstance(d, dict):
        raise ProtocolError("HeartbeatData is not a JSON object")
    client_id = d.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise ProtocolError("HeartbeatData.clientID is missing")
    consumers = []
    try:
        for c in d.get("consumerDataSet") or []:
            consumers.append(
                ConsumerData(
                    group_name=str(c["groupName"]),
                    consume_type=str(c.get("consumeType") or "CONSUME_PASSIVELY"),
                    message_model=str(c.get("messageModel") or "CLUSTERING"),
                    consume_from_where=str(c.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
                    subscriptions=tuple(
                        subscription_from_json(s) for s in c.get("subscriptionDataSet") or []
                    ),
                )
            )
        producers = tuple(str(p["groupName"]) for p in d.get("producerDataSet") or [])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"malformed HeartbeatData: missing or invalid {exc}") from exc
    return HeartbeatData(client_id=client_id, consumers=tuple(consumers), producer_groups=producers)


@dataclass(slots=True)
class ClientChannel:
    """One client process as seen through one connection."""

    client_id: str
    connection: Hashable | None
    """The transport connection it heartbeats on (closing it removes the client)."""
    last_update: float


@dataclass(slots=True)
class ConsumerGroupInfo:
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[str, ClientChannel] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(self.channels)


class ClientRegistry:
    """Consumer groups and producer groups with their live clients. Single-threaded."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._consumers: dict[str, ConsumerGroupInfo] = {}
        self._producers: dict[str, dict[str, ClientChannel]] = {}

    def heartbeat(self, hb: HeartbeatData, connection: Hashable | None) -> list[str]:
        """Register every group of a heartbeat; returns consumer groups seen for the first time."""
        now = self._clock.monotonic()
        new_groups = []
        for c in hb.consumers:
            info = self._consumers.get(c.group_name)
            if info is None:
                info = self._consumers[c.group_name] = ConsumerGroupInfo(
                    c.group_name, c.consume_type, c.message_model, c.consume_from_where
                )
                new_groups.append(c.group_name)
            info.consume_type, info.message_model = c.consume_type, c.message_model
            info.consume_from_where = c.consume_from_where
            # The newest heartbeat of a group defines its subscriptions, as in RocketMQ.
            info.subscriptions = {s.topic: s for s in c.subscriptions}
            info.channels[hb.client_id] = ClientChannel(hb.client_id, connection, now)
        for group in hb.producer_groups:
            self._producers.setdefault(group, {})[hb.client_id] = ClientChannel(hb.client_id, connection, now)
        return new_groups

    def unregister(
        self, client_id: str, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        if producer_group:
            self._drop_producer(producer_group, client_id)
        if consumer_group:
            self._drop_consumer(consumer_group, client_id)

    def _drop_producer(self, group: str, client_id: str) -> None:
        channels = self._producers.get(group)
        if channels is not None:
            channels.pop(client_id, None)
            if not channels:
                del self._producers[group]

    def _drop_consumer(self, group: str, client_id: str) -> None:
        info = self._consumers.get(group)
        if info is not None:
            info.channels.pop(client_id, None)
            if not info.channels:
                del self._consumers[group]

    def connection_closed(self, connection: Hashable) -> None:
        """Drop every client that heartbeated on a now-closed connection."""
        for group, info in list(self._consumers.items()):
            for cid, ch in list(info.channels.items()):
                if ch.connection is connection:
                    self._drop_consumer(group, cid)
        for group, channels in list(self._producers.items()):
            for cid, ch in list(channels.items()):
                if ch.connection is connection:
                    self._drop_producer(group, cid)

    def scan_expired(self, timeout: float) -> list[tuple[str, str]]:
        """Drop clients silent for longer than ``timeout`` seconds; returns (group, client id)."""
        now = self._clock.monotonic()
        removed = []
        for group, info in list(self._consumers.items()):
            for cid, ch in list(info.channels.items()):
                if now - ch.last_update > timeout:
                    self._drop_consumer(group, cid)
                    removed.append((group, cid))
        for group, channels in list(self._producers.items()):
            for cid, ch in list(channels.items()):
                if now - ch.last_update > timeout:
                    self._drop_producer(group, cid)
                    removed.append((group, cid))
        return removed

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self._consumers.get(group)

    def producer_clients(self, group: str) -> list[str]:
        return sorted(self._producers.get(group, {}))

    def snapshot(self) -> dict[str, Any]:
        """For diagnostics: group -> client ids."""
        return {
            "consumers": {g: i.client_ids() for g, i in self._consumers.items()},
            "producers": {g: sorted(c) for g, c in self._producers.items()},
        }
