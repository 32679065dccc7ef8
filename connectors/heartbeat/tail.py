"""New heartbeats on one cluster's heartbeat topic, read by offset from where the tail started.

Used on the job's driver by ``connectors.heartbeat.monitor_loop``: one tail on each link's target
(arrivals) and one on each source cluster (heartbeats produced). A plain puller, not a group member:
offsets live in memory only, so a restarted monitor starts at the topic's end (it reports STARTING
until the next heartbeat arrives, one interval later), while queues that appear later (the topic was
created after the tail started, a broker joined) are read from their first message.
"""

from __future__ import annotations

import logging

from broker_store.client import Admin, MessageQueue, PullConsumer, PullStatus, SessionCredentials, TlsClientSettings
from broker_store.client.route_cache import subscribe_queues
from broker_store.protocol.errors import RocketMQError, TopicNotExistError
from connectors.core.errors import ClusterUnreachableError
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.heartbeat.records import Heartbeat, HeartbeatFormatError, Observed

log = logging.getLogger(__name__)

PULL_BATCH = 32
MONITOR_GROUP = "CID_RMQ_SYS_REPLICATOR_HEARTBEAT_MONITOR"
"""Group named in the pulls (never committed, never registered: the tail is no group member)."""


class HeartbeatTail:
    """See the module docstring. Not thread-safe: one poller thread."""

    def __init__(self, namesrv: str, *, credentials: SessionCredentials | None = None,
                 topic: str = HEARTBEAT_TOPIC, request_timeout: float = 3.0,
                 tls: TlsClientSettings | None = None) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self._admin = Admin(namesrv, credentials=credentials, tls=tls)
        self._consumer = PullConsumer(namesrv, MONITOR_GROUP, pull_timeout=request_timeout,
                                      heartbeat_interval=None, credentials=credentials, tls=tls)
        self._offsets: dict[MessageQueue, int] = {}
        self._located = False
        """True once the topic's queues were seen: queues found after that are read from the start."""

    def poll(self) -> list[Observed]:
        """Every heartbeat stored since the last poll, per queue in order. Raises
        ``ClusterUnreachableError`` when the cluster does not answer (nothing is lost: the next poll
        continues from the same offsets)."""
        try:
            return self._poll()
        except TopicNotExistError:
            self._located = True  # created later: read it from its first message
            return []
        except (RocketMQError, OSError, TimeoutError) as exc:
            raise ClusterUnreachableError(f"{self.namesrv}: {exc}") from exc

    def _poll(self) -> list[Observed]:
        queues = subscribe_queues(self.topic, self._admin.topic_route(self.topic))
        for mq in queues:
            if mq not in self._offsets:
                self._offsets[mq] = self._admin.max_offset(mq) if not self._located else self._admin.min_offset(mq)
        self._located = True
        observed: list[Observed] = []
        for mq in queues:
            observed.extend(self._drain(mq))
        return observed

    def _drain(self, mq: MessageQueue) -> list[Observed]:
        out: list[Observed] = []
        where = f"{mq.topic}/{mq.broker_name}/{mq.queue_id}"
        while True:
            result = self._consumer.pull(mq, self._offsets[mq], PULL_BATCH)
            if result.status is PullStatus.NO_NEW_MSG:
                return out
            self._offsets[mq] = result.next_begin_offset
            for message in result.messages:
                try:
                    heartbeat = Heartbeat.decode(message.body)
                except HeartbeatFormatError as exc:
                    log.debug("skipping %s@%d: %s", where, message.queue_offset, exc)
                    continue
                out.append(Observed(heartbeat, message.store_timestamp, where, message.queue_offset))
            if result.status is PullStatus.FOUND and len(result.messages) < PULL_BATCH:
                return out

    def close(self) -> None:
        self._consumer.close()
        self._admin.close()
