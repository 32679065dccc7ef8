"""The two ends of a link as ``jobs.dr``'s steps see them: admin clients of A (the link's source) and B (its
target), the link's Delta tables, its topic selection on A and its selected consumer groups. Thin: every
decision is in the steps (``jobs.dr.switchover``); this only reads and holds the clients.

Built once per ``jobs.dr`` command on one machine (no Spark); ``close`` releases the clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from broker_store.client import Admin, MessageQueue
from broker_store.clock import ThreadClock
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.snapshot import GroupOffsetPoller, GroupOffsetSnapshot
from connectors.core.config import ClusterConfig, LinkConfig, ReplicatorConfig
from connectors.core.topic_mapping import TopicMapper
from connectors.replication.reader import RocketMQStreamReader
from connectors.replication.tables import LinkTables

QueueTriple = tuple[str, str, int]
"""A queue as the journal keeps it: (topic, broker name, queue id)."""


def triple(q: MessageQueue) -> QueueTriple:
    return (q.topic, q.broker_name, q.queue_id)


def queue_of(t: Sequence[object]) -> MessageQueue:
    """The queue of a journal triple (JSON makes it a list)."""
    topic, broker, queue_id = t
    return MessageQueue(str(topic), str(broker), int(str(queue_id)))


def cluster_admin(cluster: ClusterConfig, *, request_timeout: float = 3.0) -> Admin:
    return Admin(";".join(cluster.namesrv), credentials=cluster.credentials(), tls=cluster.tls,
                 request_timeout=request_timeout)


@dataclass
class LinkEnds:
    """A and B of one link, and the link's tables."""

    config_path: str
    config: ReplicatorConfig
    link: LinkConfig
    a: Admin
    b: Admin
    tables: LinkTables
    clock: ThreadClock

    @classmethod
    def open(cls, config_path: str, config: ReplicatorConfig, link: LinkConfig, clock: ThreadClock) -> LinkEnds:
        return cls(config_path, config, link, cluster_admin(config.cluster(link.source)),
                   cluster_admin(config.cluster(link.target)), LinkTables.for_link(link), clock)

    @property
    def source(self) -> ClusterConfig:
        return self.config.cluster(self.link.source)

    @property
    def target(self) -> ClusterConfig:
        return self.config.cluster(self.link.target)

    def close(self) -> None:
        for admin in (self.a, self.b):
            admin.close()

    def source_queues(self) -> list[MessageQueue]:
        """The link's source queues on A now (the replication reader's own topic selection and discovery)."""
        reader = RocketMQStreamReader({"config": self.config_path, "link": self.link.name})
        try:
            return reader.discover_queues()
        finally:
            reader.stop()

    def max_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        return {q: self.a.max_offset(q) for q in queues}

    def replicated(self) -> dict[MessageQueue, int]:
        """The link's committed next source offset per queue (its Delta resume point)."""
        return self.tables.latest_offsets()

    def mapper(self) -> TopicMapper:
        info = self.a.cluster_info()
        return TopicMapper(self.link.topics, reserved_names=[self.source.name, *info.broker_addr_table])

    def group_snapshot(self) -> GroupOffsetSnapshot:
        """The selected groups' offsets on A's linked topics now (the checkpoint connector's poller)."""
        return GroupOffsetPoller(self.a, self.source.name, self.mapper(), self.link.checkpoints.groups,
                                 interval=self.link.checkpoints.interval, clock=self.clock).next_item()

    def b_groups(self) -> set[str]:
        """Subscription groups known to any primary of B."""
        groups: set[str] = set()
        for addr in self.b.primary_addrs(self.target.name).values():
            groups.update(self.b.all_subscription_groups(addr))
        return groups

    def online(self, admin: Admin, group: str, topics: Iterable[str]) -> list[str]:
        """Client ids of ``group``'s consumers online on the brokers of ``topics`` (of ``admin``'s cluster)."""
        ids: set[str] = set()
        for topic in topics:
            try:
                ids.update(admin.consumer_list(group, topic))
            except RocketMQError as exc:
                if not exc.invalid_route:
                    raise
                ids.update(admin.consumer_list(group, topic))  # once more, on the route fetched anew
        return sorted(ids)
