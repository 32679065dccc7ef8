"""The replication reader's look-ups of queue offsets on the source cluster (driver only).

Called by ``connectors.replication.reader`` (``initialOffset``, ``latestOffset``, AvailableNow) and, through
it, by ``jobs.reset_offsets``. Every request rides out a source outage (``SourceOutage.call``, the link's
``retry_*``). Max offsets, asked on every trigger, cost one GET_TOPIC_STATS_INFO per (topic, broker group)
instead of one GET_MAX_OFFSET per queue, whose cost grew with the queue count on every trigger, idle or not
(``benchmarks/replicator.py``; figures in ``benchmarks/MEASUREMENTS.md``); min offsets (queues read for the first
time) the same way. Timestamp searches stay per queue.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, TypeVar

from broker_store.client import Admin, MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import BrokerResponseError
from connectors.core.offsets import QueueKey
from connectors.core.outage import SourceOutage

log = logging.getLogger(__name__)

DRIVER_PARALLELISM = 16
"""Concurrent admin calls (offset look-ups, offset commits) the driver makes at once."""

T = TypeVar("T")
R = TypeVar("R")

_PER_QUEUE_ON = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.NO_PERMISSION,
                           ResponseCode.REQUEST_CODE_NOT_SUPPORTED})
"""Refusals of GET_TOPIC_STATS_INFO that GET_MAX_OFFSET per queue may still answer: the broker has no config
of the topic (a stale route; GET_MAX_OFFSET answers from the store), denies the code, or does not know it."""


def parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``fn`` of every item, at most ``DRIVER_PARALLELISM`` at once, results in order."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(DRIVER_PARALLELISM, len(items))) as pool:
        return list(pool.map(fn, items))


def message_queue(queue: QueueKey) -> MessageQueue:
    return MessageQueue(queue.topic, queue.broker_name, queue.queue_id)


def per_queue(outage: SourceOutage, fn: Callable[[MessageQueue], int], queues: Sequence[QueueKey],
              what: str) -> dict[QueueKey, int]:
    """``fn`` of every queue (concurrently), each call riding out a source outage."""
    def one(queue: QueueKey) -> int:
        return outage.call(lambda: fn(message_queue(queue)), f"reading the {what} of {queue.to_key()}")
    return dict(zip(queues, parallel(one, list(queues)), strict=True))


def min_offsets(admin: Admin, outage: SourceOutage, queues: Sequence[QueueKey]) -> dict[QueueKey, int]:
    """Each queue's min offset, as GET_MIN_OFFSET answers it: one GET_TOPIC_STATS_INFO per (topic, broker group)
    (see ``max_offsets``). Asked for the queues a batch reads for the first time: with hundreds of new queues
    (a new link, a grown topic, queues taking turns under ``max_messages_per_trigger``) one request per queue
    cost a request per queue on every trigger."""
    return _queue_offsets(admin, outage, queues, "min")


def max_offsets(admin: Admin, outage: SourceOutage, queues: Sequence[QueueKey]) -> dict[QueueKey, int]:
    """Each queue's max offset: one GET_TOPIC_STATS_INFO per (topic, broker group) of ``queues``,
    concurrently, at the broker GET_MAX_OFFSET would ask (``Admin.topic_offsets``), so the values are the ones
    GET_MAX_OFFSET answers. A queue the answer does not cover, and every queue of a group whose broker refuses
    the request (``_PER_QUEUE_ON``), is asked alone with GET_MAX_OFFSET, as before this request existed. Any
    other error is raised as the per-queue look-up raised it (after the outage budget for an unavailable
    source)."""
    return _queue_offsets(admin, outage, queues, "max")


def _queue_offsets(admin: Admin, outage: SourceOutage, queues: Sequence[QueueKey],
                   bound: Literal["min", "max"]) -> dict[QueueKey, int]:
    """``min_offsets`` / ``max_offsets``: topic stats per (topic, broker group), per-queue requests for the rest."""
    groups: dict[tuple[str, str], list[QueueKey]] = {}
    for queue in queues:
        groups.setdefault((queue.topic, queue.broker_name), []).append(queue)

    def group_offsets(key: tuple[str, str]) -> dict[int, int]:
        topic, broker = key
        try:
            stats = outage.call(functools.partial(admin.topic_offsets, topic, broker),
                                f"reading the {bound} offsets of topic {topic} on broker group {broker}")
        except BrokerResponseError as exc:
            if exc.code not in _PER_QUEUE_ON:
                raise
            log.debug("topic stats of %s on %s refused (%s); asking its queues one by one", topic, broker, exc)
            return {}
        return {queue_id: offsets.min_offset if bound == "min" else offsets.max_offset
                for queue_id, offsets in stats.items()}

    found: dict[QueueKey, int] = {}
    for key, offsets in zip(groups, parallel(group_offsets, list(groups)), strict=True):
        found.update((q, offsets[q.queue_id]) for q in groups[key] if q.queue_id in offsets)
    missing = [q for q in queues if q not in found]
    if missing:
        one = admin.min_offset if bound == "min" else admin.max_offset
        found.update(per_queue(outage, one, missing, f"{bound} offset"))
    return {q: found[q] for q in queues}
