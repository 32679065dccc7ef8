"""The replication reader's look-ups of queue offsets on the source cluster (driver only).

Called by ``connectors.replication.reader`` (``initialOffset``, ``latestOffset``, AvailableNow) and, through
it, by ``jobs.reset_offsets``. Every request rides out a source outage (``SourceOutage.call``, the link's
``retry_*``). Max offsets, asked on every trigger, cost one GET_TOPIC_STATS_INFO per (topic, broker group)
instead of one GET_MAX_OFFSET per queue, whose cost grew with the queue count on every trigger, idle or not
(``benchmarks/replicator.py``; figures in ``benchmarks/MEASUREMENTS.md``); min offsets (queues read for the first
time) the same way, and ``queue_offsets`` returns both from the one answer (``latestOffset`` needs both). Timestamp
searches stay per queue.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from broker_store.client import Admin, MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import BrokerResponseError
from broker_store.protocol.topic_stats import TopicOffset
from connectors.core.offsets import queue_key
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


def per_queue(outage: SourceOutage, fn: Callable[[MessageQueue], R], queues: Sequence[MessageQueue],
              what: str) -> dict[MessageQueue, R]:
    """``fn`` of every queue (concurrently), each call riding out a source outage."""
    def one(queue: MessageQueue) -> R:
        return outage.call(lambda: fn(queue), f"reading the {what} of {queue_key(queue)}")
    return dict(zip(queues, parallel(one, list(queues)), strict=True))


def min_offsets(admin: Admin, outage: SourceOutage, queues: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
    """Each queue's min offset, as GET_MIN_OFFSET answers it: one GET_TOPIC_STATS_INFO per (topic, broker group)
    (see ``queue_offsets``). Asked for the queues a batch reads for the first time: with hundreds of new queues
    (a new link, a grown topic, queues taking turns under ``max_messages_per_trigger``) one request per queue
    cost a request per queue on every trigger."""
    found, missing = _topic_stats(admin, outage, queues, "min")
    found_min = {q: offsets.min_offset for q, offsets in found.items()}
    found_min.update(per_queue(outage, admin.min_offset, missing, "min offset"))
    return {q: found_min[q] for q in queues}


def max_offsets(admin: Admin, outage: SourceOutage, queues: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
    """Each queue's max offset (see ``queue_offsets``); a queue the topic stats do not cover is asked alone with
    GET_MAX_OFFSET."""
    found, missing = _topic_stats(admin, outage, queues, "max")
    found_max = {q: offsets.max_offset for q, offsets in found.items()}
    found_max.update(per_queue(outage, admin.max_offset, missing, "max offset"))
    return {q: found_max[q] for q in queues}


def queue_offsets(admin: Admin, outage: SourceOutage,
                  queues: Sequence[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
    """Each queue's (min offset, max offset): one GET_TOPIC_STATS_INFO per (topic, broker group) of ``queues``,
    concurrently, at the broker GET_MAX_OFFSET would ask (``Admin.topic_offsets``), so the values are the ones
    GET_MIN_OFFSET and GET_MAX_OFFSET answer. A queue the answer does not cover, and every queue of a group whose
    broker refuses the request (``_PER_QUEUE_ON``), is asked alone with GET_MIN_OFFSET and GET_MAX_OFFSET, as
    before this request existed. Any other error is raised as the per-queue look-up raised it (after the outage
    budget for an unavailable source). Both bounds come from one answer, so a trigger that needs the min offsets
    of its new queues and the max offsets of all (``latestOffset``) asks each group once, not twice."""
    found, missing = _topic_stats(admin, outage, queues, "min and max")
    both = {q: (offsets.min_offset, offsets.max_offset) for q, offsets in found.items()}
    both.update(per_queue(outage, lambda mq: (admin.min_offset(mq), admin.max_offset(mq)), missing,
                          "min and max offsets"))
    return {q: both[q] for q in queues}


def _topic_stats(admin: Admin, outage: SourceOutage, queues: Sequence[MessageQueue],
                 what: str) -> tuple[dict[MessageQueue, TopicOffset], list[MessageQueue]]:
    """The topic stats of ``queues`` per (topic, broker group), and the queues they do not cover (to be asked
    one by one): those the answer lacks and those of a group whose broker refused (``_PER_QUEUE_ON``)."""
    groups: dict[tuple[str, str], list[MessageQueue]] = {}
    for queue in queues:
        groups.setdefault((queue.topic, queue.broker_name), []).append(queue)

    def group_offsets(key: tuple[str, str]) -> dict[int, TopicOffset]:
        topic, broker = key
        try:
            return outage.call(functools.partial(admin.topic_offsets, topic, broker),
                               f"reading the {what} offsets of topic {topic} on broker group {broker}")
        except BrokerResponseError as exc:
            if exc.code not in _PER_QUEUE_ON:
                raise
            log.debug("topic stats of %s on %s refused (%s); asking its queues one by one", topic, broker, exc)
            return {}

    found: dict[MessageQueue, TopicOffset] = {}
    for key, offsets in zip(groups, parallel(group_offsets, list(groups)), strict=True):
        found.update((q, offsets[q.queue_id]) for q in groups[key] if q.queue_id in offsets)
    return found, [q for q in queues if q not in found]
