"""Per-process state of a Spark executor's Python worker: the RocketMQ clients kept across tasks, and
the one-time heap freeze.

Called on executors at the start of every task (``freeze_worker_heap``) and wherever a task needs a
client (``executor_consumer`` / ``executor_producer`` / ``executor_admin``). Spark reuses a Python
worker for many tasks, so a client created once serves every later task with the same settings; each
cache is keyed by everything the client was built with (credentials included), so two links in one
worker never share a client they should not.
"""

from __future__ import annotations

import gc
import threading

from broker_store.client import Admin, Producer, PullConsumer, TlsClientSettings
from broker_store.protocol.acl import SessionCredentials

CLIENT_MAX_MESSAGE_SIZE = 1 << 30
"""The producers' own size check is disabled (the target broker's max_message_size decides and its
MESSAGE_ILLEGAL answer becomes a recorded failure)."""

_heap_frozen = False


def freeze_worker_heap() -> None:
    """Leave the objects alive now (pyspark, pyarrow, this package, the clients) out of every later
    cyclic garbage collection of this process. Executor only, called at the start of each task.

    pyspark's daemon runs ``gc.collect()`` after every task of a reused Python worker; with those
    modules loaded a full collection scans tens of thousands of objects, a cost per task (and per
    trigger with several partitions; figures in ``benchmarks/MEASUREMENTS.md``). ``gc.freeze()`` moves
    them to the permanent generation: they are still freed by reference counting, only cycles among
    them are never collected, which long-lived module state does not form."""
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


_lock = threading.Lock()
_consumers: dict[tuple[str, str, int, SessionCredentials | None, TlsClientSettings | None], PullConsumer] = {}
_producers: dict[tuple[str, str, int, bool, SessionCredentials | None, TlsClientSettings | None], Producer] = {}
_admins: dict[tuple[str, SessionCredentials | None, TlsClientSettings | None], Admin] = {}


def executor_consumer(namesrv: str, group: str, pull_timeout_ms: int,
                      credentials: SessionCredentials | None = None, *,
                      tls: TlsClientSettings | None = None) -> PullConsumer:
    """The process's PullConsumer for (name servers, group, timeout, credentials). No heartbeats:
    executors only pull by offset, they are not group members."""
    key = (namesrv, group, pull_timeout_ms, credentials, tls)
    with _lock:
        consumer = _consumers.get(key)
        if consumer is None:
            consumer = PullConsumer(namesrv, group, pull_timeout=pull_timeout_ms / 1000, heartbeat_interval=None,
                                    credentials=credentials, tls=tls)
            _consumers[key] = consumer
        return consumer


def executor_producer(namesrv: str, group: str, *, send_timeout_ms: int, auto_create_topic: bool,
                      credentials: SessionCredentials | None, tls: TlsClientSettings | None = None) -> Producer:
    """The process's Producer for these target settings. Its own retries are off (the connectors retry
    with their backoff policy and pin the queue) and so is its size check (``CLIENT_MAX_MESSAGE_SIZE``)."""
    key = (namesrv, group, send_timeout_ms, auto_create_topic, credentials, tls)
    with _lock:
        producer = _producers.get(key)
        if producer is None:
            producer = Producer(namesrv, group, send_timeout=send_timeout_ms / 1000, retry_times_when_send_failed=0,
                                max_message_size=CLIENT_MAX_MESSAGE_SIZE, auto_create_topic=auto_create_topic,
                                credentials=credentials, tls=tls)
            _producers[key] = producer
        return producer


def executor_admin(namesrv: str, credentials: SessionCredentials | None, tls: TlsClientSettings | None = None) -> Admin:
    """The process's Admin for (name servers, credentials, TLS settings): routes and cluster info."""
    with _lock:
        admin = _admins.get((namesrv, credentials, tls))
        if admin is None:
            admin = _admins[(namesrv, credentials, tls)] = Admin(namesrv, credentials=credentials, tls=tls)
        return admin
