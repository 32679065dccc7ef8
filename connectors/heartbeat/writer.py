"""The heartbeat writer: produces each heartbeat row to ``HEARTBEAT_TOPIC`` on the link's SOURCE cluster
(``writeStream.format("rmq_heartbeat")``), creating the topic there if it is missing.

Created by ``connectors.heartbeat.data_source.HeartbeatDataSource.streamWriter``. What runs where:

* executors: ``write(rows)`` sends one message per row (``connectors.heartbeat.records`` has the
  layout), the born time taken just before the send. A send that fails (source down, no route) is not
  retried and does not fail the task: a late heartbeat would measure nothing, and the next one is one
  interval away. It is reported in the commit message instead, so the monitor sees "no heartbeat
  produced" (IDLE), never a broken link.
* driver: ``commit`` logs what each batch sent (failures at WARNING, once per link until it recovers);
  ``abort`` says the batch was aborted (a WARNING unless the job's stop caused it, ``connectors.core.job_stop``).

The topic is created with ``HEARTBEAT_TOPIC_QUEUES`` queues per broker on every broker group of the
source cluster when its route is missing; an existing topic is never changed. A topic that vanishes later
(deleted on the source) fails one send with TOPIC_NOT_EXIST and is created again by the next.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from broker_store.client import new_message
from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from broker_store.protocol.errors import RocketMQError, TopicNotExistError
from connectors.core.driver_log import driver_logging
from connectors.core.executor import executor_admin, executor_producer, freeze_worker_heap
from connectors.core.job_stop import abort_level
from connectors.core.monitoring import HEARTBEAT_TOPIC, HEARTBEAT_TOPIC_QUEUES
from connectors.core.outage import once_more_on_new_route
from connectors.heartbeat.options import HeartbeatOptions, LinkEndpoints
from connectors.heartbeat.records import Heartbeat

log = logging.getLogger(__name__)

PRODUCER_GROUP = "PID_RMQ_SYS_REPLICATOR_HEARTBEAT"
SEND_TIMEOUT_MS = 3000
ROUTE_WAIT_S = 10.0

_topic_lock = threading.Lock()
_topic_ready: set[str] = set()
"""Source name servers on which this executor process has seen the heartbeat topic routed."""


@dataclass(frozen=True)
class SentHeartbeat:
    """One heartbeat send, as the writer reports it to the driver."""

    link: str
    seq: int
    born_ms: int
    queue: str | None
    """``topic/broker/queue id`` it was stored in; None when the send failed."""
    offset: int | None
    error: str | None = None
    """Why the send failed (the client's error); None when stored."""


@dataclass(frozen=True)
class HeartbeatCommitMessage(WriterCommitMessage):
    sent: tuple[SentHeartbeat, ...]


def ensure_heartbeat_topic(endpoints: LinkEndpoints) -> None:
    """Create ``HEARTBEAT_TOPIC`` on the source when it has no route (executor; once per process)."""
    with _topic_lock:
        if endpoints.source_namesrv in _topic_ready:
            return
        admin = executor_admin(endpoints.source_namesrv, endpoints.credentials, endpoints.tls)
        try:
            admin.topic_route(HEARTBEAT_TOPIC)
        except TopicNotExistError:
            admin.create_topic(HEARTBEAT_TOPIC, HEARTBEAT_TOPIC_QUEUES)
            log.info("created %s on %s (%d queue(s) per broker)", HEARTBEAT_TOPIC, endpoints.source,
                     HEARTBEAT_TOPIC_QUEUES)
            admin.wait_for_route(HEARTBEAT_TOPIC, ROUTE_WAIT_S)
        _topic_ready.add(endpoints.source_namesrv)


def forget_heartbeat_topic(endpoints: LinkEndpoints) -> None:
    """The source said the topic does not exist (deleted since ``ensure_heartbeat_topic`` saw it): check
    and create it again before the next send."""
    with _topic_lock:
        _topic_ready.discard(endpoints.source_namesrv)


class HeartbeatStreamWriter(DataSourceStreamWriter):
    """See the module docstring."""

    clock: ThreadClock = SYSTEM_CLOCK
    """Stamps the heartbeats' born time (a test sets its own on the instance)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = HeartbeatOptions.from_options(options)
        self._failing: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._failing = set()

    def write(self, iterator: Iterator[Any]) -> HeartbeatCommitMessage:
        """Executor task: sends one heartbeat per row to its link's source; a failed send is reported in the
        commit message, never raised (the next interval sends the next heartbeat)."""
        freeze_worker_heap()
        driver_logging()  # executor tasks log like the job (console line, log file), not via lastResort
        return HeartbeatCommitMessage(tuple(self.send(row["link"], int(row["seq"])) for row in iterator))

    def send(self, link_name: str, seq: int) -> SentHeartbeat:
        """Produce one heartbeat of ``link_name`` on its source (executor)."""
        endpoints = self.options.link(link_name)
        born = wall_ms(self.clock)
        heartbeat = Heartbeat(link_name, seq, born, endpoints.source, endpoints.target)
        try:
            ensure_heartbeat_topic(endpoints)
            producer = executor_producer(endpoints.source_namesrv, PRODUCER_GROUP, send_timeout_ms=SEND_TIMEOUT_MS,
                                         auto_create_topic=False, credentials=endpoints.credentials,
                                         tls=endpoints.tls)
            message = new_message(HEARTBEAT_TOPIC, heartbeat.encode(), tags=link_name, keys=heartbeat.keys)
            # the producer's own retries are off: a route naming a primary that died is refreshed and tried once
            result = once_more_on_new_route(lambda: producer.send(message))
        except TopicNotExistError as exc:  # the topic vanished (deleted on the source): the next send creates it
            forget_heartbeat_topic(endpoints)
            return SentHeartbeat(link_name, seq, born, None, None, f"{type(exc).__name__}: {exc}")
        except (RocketMQError, OSError, TimeoutError) as exc:
            return SentHeartbeat(link_name, seq, born, None, None, f"{type(exc).__name__}: {exc}")
        mq = result.message_queue
        return SentHeartbeat(link_name, seq, born, f"{mq.topic}/{mq.broker_name}/{mq.queue_id}", result.queue_offset)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, after every write task of batch ``batchId`` returned: a link's failing sends are logged once
        (WARNING), and again when they succeed (INFO)."""
        driver_logging()
        for message in messages:
            if not isinstance(message, HeartbeatCommitMessage):
                continue
            for sent in message.sent:
                if sent.error is not None:
                    if sent.link not in self._failing:
                        self._failing.add(sent.link)
                        log.warning("link %s: heartbeat %d not produced on its source: %s", sent.link, sent.seq,
                                    sent.error)
                    continue
                if sent.link in self._failing:
                    self._failing.discard(sent.link)
                    log.info("link %s: heartbeats produced again (seq %d)", sent.link, sent.seq)
                log.debug("link %s: heartbeat %d stored at %s@%s", sent.link, sent.seq, sent.queue, sent.offset)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: a write task failed, or the job's stop cancelled the batch (then INFO, ``abort_level``)."""
        driver_logging()
        log.log(abort_level(), "heartbeat batch %d aborted; the next interval sends the next heartbeat", batchId)
