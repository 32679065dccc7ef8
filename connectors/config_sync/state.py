"""What a cluster's configuration looks like to the config connector: its topics (queue counts, permission,
attributes) and subscription groups, read from every broker group's primary.

Read on the Spark driver: the source by ``connectors.config_sync.data_source.ConfigStreamReader.read`` once
per trigger (``ConfigPoller.next_item``, the polling shape of bytewax's ``SimplePollingSource``), the target
by ``connectors.config_sync.applier.ConfigApplier`` before it plans. A broker group that does not answer, or
is registered by its replicas alone (no primary: a failover under way), is reported (``unreachable``), never
taken for one without topics (a target topic is then not "missing" there); one that is no longer registered on the name
server is absent from a snapshot, so what it held is judged by ``connectors.config_sync.evidence``, never by
this listing alone.

A topic on several broker groups is one ``TopicState``: the largest read / write queue counts of any group,
each group's own counts (``queue_nums``: their sums are the topic's total, which ``connectors.config_sync.
sizing`` spreads over the target's broker groups), the permission and attributes of the first group by name,
and the groups holding it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_store.client import Admin, TopicConfig
from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from broker_store.protocol.errors import RocketMQError


@dataclass(frozen=True)
class TopicState:
    """One topic of a cluster (see the module docstring)."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)
    brokers: tuple[str, ...] = ()
    """Broker groups holding the topic, sorted."""
    queue_nums: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Broker group -> its (read, write) queue counts. Empty (a state built without them, or JSON written
    before they were kept): every group of ``brokers`` is taken to have the largest counts."""

    def per_broker(self) -> Mapping[str, tuple[int, int]]:
        """Each holding group's (read, write) counts (``queue_nums``, or the fallback it documents; a topic
        with no group named counts as one group)."""
        if self.queue_nums:
            return self.queue_nums
        return dict.fromkeys(self.brokers or ("",), (self.read_queue_nums, self.write_queue_nums))

    @property
    def total_read_queue_nums(self) -> int:
        """Read queues over every broker group holding the topic."""
        return sum(read for read, _ in self.per_broker().values())

    @property
    def total_write_queue_nums(self) -> int:
        """Write queues over every broker group holding the topic."""
        return sum(write for _, write in self.per_broker().values())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "read": self.read_queue_nums, "write": self.write_queue_nums, "perm": self.perm,
                "order": self.order, "attributes": dict(self.attributes), "brokers": list(self.brokers),
                "queueNums": {b: list(counts) for b, counts in self.queue_nums.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TopicState:
        queue_nums = {str(b): (int(c[0]), int(c[1])) for b, c in d.get("queueNums", {}).items()}
        return cls(d["name"], int(d["read"]), int(d["write"]), int(d["perm"]), bool(d["order"]),
                   dict(d["attributes"]), tuple(d["brokers"]), queue_nums)


@dataclass(frozen=True)
class ClusterState:
    """A cluster's topics and subscription groups at ``taken_ms``."""

    taken_ms: int
    topics: Mapping[str, TopicState]
    groups: Mapping[str, Mapping[str, Any]]
    """Group -> its SubscriptionGroupConfig JSON (of the first broker group holding it)."""
    brokers: tuple[str, ...]
    """Broker groups with a primary, sorted."""
    unreachable: Mapping[str, str] = field(default_factory=dict)
    """Broker group -> why it could not be read (it did not answer, or, added by
    ``connectors.config_sync.evidence.judge``, it holds a remembered name and is no longer registered)."""
    group_holders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Subscription group -> the broker groups holding it, sorted."""

    def to_json(self) -> dict[str, Any]:
        return {"takenMs": self.taken_ms, "topics": [t.to_json() for t in self.topics.values()],
                "groups": {k: dict(v) for k, v in self.groups.items()}, "brokers": list(self.brokers),
                "unreachable": dict(self.unreachable),
                "groupHolders": {k: list(v) for k, v in self.group_holders.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClusterState:
        topics = [TopicState.from_json(t) for t in d["topics"]]
        return cls(int(d["takenMs"]), {t.name: t for t in topics}, dict(d["groups"]), tuple(d["brokers"]),
                   dict(d["unreachable"]), {k: tuple(v) for k, v in d.get("groupHolders", {}).items()})


def _merge(name: str, configs: list[tuple[str, TopicConfig]]) -> TopicState:
    first = configs[0][1]
    return TopicState(name, max(c.read_queue_nums for _, c in configs), max(c.write_queue_nums for _, c in configs),
                      first.perm, first.order, dict(first.attributes or {}), tuple(sorted(b for b, _ in configs)),
                      {b: (c.read_queue_nums, c.write_queue_nums) for b, c in sorted(configs, key=lambda bc: bc[0])})


NO_PRIMARY = "registered by its replicas only: no primary (down, or a failover under way)"
"""Why a broker group listed without a primary is ``unreachable``: what it holds is not known."""


def read_cluster_state(admin: Admin, cluster: str | None, *, subscription_groups: bool = True,
                       clock: ThreadClock = SYSTEM_CLOCK) -> ClusterState:
    """Every primary of ``cluster`` (None: every cluster the name servers know). Raises ``RocketMQError``
    only when the cluster cannot be listed at all."""
    taken_ms = wall_ms(clock)
    registered = admin.broker_groups(cluster)
    primaries = {broker: addr for broker, addr in registered.items() if addr is not None}
    per_topic: dict[str, list[tuple[str, TopicConfig]]] = {}
    groups: dict[str, Mapping[str, Any]] = {}
    group_holders: dict[str, list[str]] = {}
    unreachable: dict[str, str] = {broker: NO_PRIMARY for broker, addr in registered.items() if addr is None}
    for broker, addr in sorted(primaries.items()):
        try:
            for name, config in admin.all_topic_config(addr).items():
                per_topic.setdefault(name, []).append((broker, config))
            if subscription_groups:
                for group, group_config in admin.all_subscription_groups(addr).items():
                    groups.setdefault(group, group_config)
                    group_holders.setdefault(group, []).append(broker)
        except RocketMQError as exc:
            unreachable[broker] = f"{addr}: {exc}"
    topics = {name: _merge(name, configs) for name, configs in sorted(per_topic.items())}
    return ClusterState(taken_ms, topics, groups, tuple(sorted(primaries)), unreachable,
                        {g: tuple(sorted(b)) for g, b in sorted(group_holders.items())})


def registered_groups(admin: Admin, cluster: str | None = None) -> tuple[str, ...] | None:
    """The broker groups of ``cluster`` (None: every cluster) registered with a primary, sorted; None when the
    name servers cannot be asked (nothing is then known, which is not "none registered")."""
    try:
        return tuple(sorted(admin.primary_addrs(cluster)))
    except RocketMQError:
        return None


class ConfigPoller:
    """One ``ClusterState`` of the source per ``next_item()``; ``interval`` is the caller's trigger."""

    def __init__(self, admin: Admin, cluster: str, *, interval: float, subscription_groups: bool = True,
                 clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.interval = interval
        self._admin = admin
        self._cluster = cluster
        self._subscription_groups = subscription_groups
        self._clock = clock

    def next_item(self) -> ClusterState:
        """Never raises for the source: a cluster that cannot be listed is a state with no topics and the
        reason in ``unreachable`` (the applier then deletes nothing)."""
        try:
            return read_cluster_state(self._admin, self._cluster, subscription_groups=self._subscription_groups,
                                      clock=self._clock)
        except RocketMQError as exc:
            return ClusterState(wall_ms(self._clock), {}, {}, (), {self._cluster: f"cannot list brokers: {exc}"})
