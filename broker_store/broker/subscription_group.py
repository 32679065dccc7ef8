"""Subscription groups: per consumer group settings (RocketMQ's SubscriptionGroupManager).

Owned by ``BrokerController``; written by UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and removed by
DELETE_SUBSCRIPTIONGROUP (``admin_processor``), listed by GET_ALL_SUBSCRIPTIONGROUP_CONFIG (the config
connector reads them on a source and writes them on a target). The pull path (``pull_processor``) looks a
group up with ``find_or_create``: an unknown group is created with the defaults when
``auto_create_subscription_group`` is on or the group is a system group (RocketMQ's
findSubscriptionGroupConfig), and a group with consumeEnable false is refused. The other settings (retry
queues, ...) are kept and served, not enforced. Every change is persisted at once (changes are rare:
admin-driven, or a group's first pull).

``subscription_groups.json`` (see ``broker_store.durable_file``)::

    {"version": 1, "dataVersion": {...},
     "subscriptionGroupTable": {"<group>": {"groupName": "<group>", "consumeEnable": true, ...}}}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_store.clock import Clock, wall_ms
from broker_store.durable_file import load_metadata_file, write_metadata_file
from broker_store.protocol.errors import ProtocolError, StoreError
from broker_store.protocol.message import validate_topic
from broker_store.protocol.route import dumps_rocketmq
from broker_store.protocol.topic import DataVersion

log = logging.getLogger(__name__)

FILE_NAME = "subscription_groups.json"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
"""Consumer groups of RocketMQ's own tools and of this replicator (``CID_RMQ_SYS_REPLICATOR_<link>``): created on
first use whatever ``auto_create_subscription_group`` says (RocketMQ's MixAll.isSysConsumerGroup)."""


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """One group's settings, RocketMQ's SubscriptionGroupConfig JSON (fields we know by name; any other
    field is kept in ``extra`` and served back unchanged)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    attributes: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    _WIRE = {"group_name": "groupName", "consume_enable": "consumeEnable",
             "consume_from_min_enable": "consumeFromMinEnable", "consume_broadcast_enable": "consumeBroadcastEnable",
             "retry_queue_nums": "retryQueueNums", "retry_max_times": "retryMaxTimes", "broker_id": "brokerId",
             "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
             "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable"}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SubscriptionGroupConfig:
        """ProtocolError when ``groupName`` is missing or a known field has the wrong type."""
        if not isinstance(d, Mapping) or not d.get("groupName"):
            raise ProtocolError("subscription group config needs a groupName")
        values: dict[str, Any] = {}
        try:
            for attr, wire in cls._WIRE.items():
                if wire in d and d[wire] is not None:
                    default = getattr(cls, attr, None)
                    values[attr] = (str(d[wire]) if attr == "group_name" else
                                    bool(d[wire]) if isinstance(default, bool) else int(d[wire]))
            attributes = {str(k): str(v) for k, v in (d.get("attributes") or {}).items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed subscription group config: {exc}") from exc
        extra = {k: v for k, v in d.items() if k not in cls._WIRE.values() and k != "attributes"}
        return cls(**values, attributes=attributes, extra=extra)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        out.update({wire: getattr(self, attr) for attr, wire in self._WIRE.items()})
        out["attributes"] = dict(self.attributes)
        return out


class SubscriptionGroupManager:
    """The broker's subscription group table with persistence. Single-threaded (the broker's loop)."""

    def __init__(self, path: Path, *, clock: Clock, auto_create: bool = True) -> None:
        self.path = path
        self.auto_create = auto_create
        """``BrokerSettings.auto_create_subscription_group``."""
        self._clock = clock
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self._pending = False
        """An auto-created group is not on disk yet (``find_or_create`` could not write it)."""

    def load(self) -> None:
        loaded = load_metadata_file(self.path, _parse_groups)
        if loaded is not None:
            self._table, self.data_version = loaded

    def update(self, config: SubscriptionGroupConfig) -> None:
        self._table[config.group_name] = config
        self._persist()

    def delete(self, group: str) -> bool:
        if self._table.pop(group, None) is None:
            return False
        self._persist()
        return True

    def replace_all(self, table: Mapping[str, SubscriptionGroupConfig], data_version: DataVersion) -> bool:
        """A replica's metadata sync: take the primary's whole table and its data version (so the copy
        carries the version it was taken at, as topics do), persist. False, writing nothing, when both are
        already the primary's."""
        if data_version == self.data_version and table == self._table:
            return False
        self._table = dict(table)
        self.data_version = data_version
        write_metadata_file(self.path, self._payload())
        return True

    def select(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def find_or_create(self, group: str, *, store: bool = True) -> SubscriptionGroupConfig | None:
        """The group's settings; an unknown group gets the defaults when ``auto_create`` is on or the group is a
        system group (``SYSTEM_GROUP_PREFIX``), else None (the caller refuses it). ProtocolError instead of
        creating a group whose name breaks the naming rules (those of topics, as the admin path checks).

        ``store``: keep the created group (persisted, data version bumped). A replica passes False: its table
        is the primary's copy, which the next metadata sync would replace anyway; the group is created on the
        primary by the consumer's pulls there and arrives with the copy."""
        config = self._table.get(group)
        if config is not None or not (self.auto_create or group.startswith(SYSTEM_GROUP_PREFIX)):
            return config
        validate_topic(group)  # a persisted blank or malformed name would fail the next load
        config = SubscriptionGroupConfig(group_name=group)
        if store:
            self._table[group] = config
            try:
                self._persist()
            except StoreError as exc:
                # A pull must not fail because the disk is full: the group lives in memory, and the next
                # ``persist_pending`` (the broker's offset loop) or change writes it.
                self._pending = True
                log.warning("auto-created subscription group %s kept in memory only for now: %s", group, exc)
        return config

    def persist_pending(self) -> bool:
        """Write the table if an auto-created group could not be written when it was made; True if written.
        StoreError if it still cannot be."""
        if not self._pending:
            return False
        self._persist()
        return True

    def _persist(self) -> None:
        self.data_version = self.data_version.next(wall_ms(self._clock))
        write_metadata_file(self.path, self._payload())
        self._pending = False

    def _payload(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_json(),
                "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in sorted(self._table.items())}}

    def encode_wrapper(self) -> bytes:
        """SubscriptionGroupWrapper JSON for GET_ALL_SUBSCRIPTIONGROUP_CONFIG."""
        return dumps_rocketmq(self._payload())


def _parse_groups(data: dict[str, Any]) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
    try:
        table = {str(name): SubscriptionGroupConfig.from_json(cfg)
                 for name, cfg in (data.get("subscriptionGroupTable") or {}).items()}
        return table, DataVersion.from_json(data.get("dataVersion"))
    except (AttributeError, TypeError, ValueError, ProtocolError) as exc:
        raise StoreError(f"malformed subscription group table: {exc}") from exc
