"""Scheduled delivery (RocketMQ 4.x ScheduleMessageService): due messages leave SCHEDULE_TOPIC_XXXX for their
real topic and queue.

Run by ``BrokerServer`` while the broker is unfenced PRIMARY, and only then (``RoleState`` listeners start and stop it;
a replica's delay offsets come from its primary through ``metadata_sync``). Two parts:

    DelaySchedule     pure: which entries of a level's queue are due at a given time, the offset of each level
                      (``DelayOffsetTable``), the back-off after a failed put. Unit-tested with plain numbers.
    ScheduleService   the loop around it on the broker's clock: every ``POLL_INTERVAL`` it reads each level's
                      ConsumeQueue entries from the level's offset and re-puts the due messages through the
                      store's put path, as any put (flush and replication behave the same).

Contract of a delivery (RocketMQ's messageTimeup): body, flag, SYSFLAG, born timestamp and host,
reconsumeTimes and every property are kept, DELAY is removed, WAIT is false (the service does not wait for
durability; its offsets are persisted behind the puts, so a crash delivers again, never loses); the topic and
queue come from REAL_TOPIC / REAL_QID (kept). The delivered message has a new offset msgId; UNIQ_KEY, the
client's id, is unchanged. A level's offset moves past an entry once its put is accepted, or when the entry
cannot be delivered at all (record gone by retention, no REAL_TOPIC): those are logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.broker.delayed_send import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from broker_store.clock import Clock
from broker_store.protocol.errors import ProtocolError, RocketMQError
from broker_store.protocol.message import StoredMessage, decode_stored_message, tags_hash_code
from broker_store.protocol.properties import PROPERTY_DELAY, PROPERTY_WAIT, encode_properties
from broker_store.store import MessageStore, PutStatus, QueueEntry, tags_code_of_properties
from broker_store.store.delay_levels import SCHEDULE_TOPIC, DelayLevels, queue_id_of_level

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.1
"""Seconds between rounds over every level (RocketMQ's DELAY_FOR_A_WHILE, 100 ms)."""
RETRY_AFTER_FAILURE_MS = 10_000
"""A level whose put failed is retried after this long (RocketMQ's DELAY_FOR_A_PERIOD, 10 s)."""
BATCH = 64
"""ConsumeQueue entries read per level per round: bounds the time a round holds the event loop (each delivery
is a record read and a put), and caps delivery at BATCH / POLL_INTERVAL = 640 messages/s per level."""
TRANSACTION_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""A delayed message never goes to the transaction half topic (RocketMQ discards it as a bug)."""


class LevelStep(NamedTuple):
    """What to do with the entries read from one level's queue."""

    due: list[QueueEntry]
    """Entries to deliver now, in queue order."""
    next_due_ms: int | None
    """When the first entry that is not due yet becomes due; None when every entry read is due."""


class DelaySchedule:
    """Per-level progress through SCHEDULE_TOPIC_XXXX and the decision of what is due. No I/O, no clock: the
    caller passes the time (ms) and the queue bounds it read."""

    def __init__(self, levels: DelayLevels, offsets: DelayOffsetTable) -> None:
        self.levels = levels
        self.offsets = offsets
        self._retry_at: dict[int, int] = {}

    def start_offset(self, level: int, min_offset: int, max_offset: int) -> int:
        """The level's offset, moved into [min_offset, max_offset] of its queue when outside (RocketMQ's
        correctDelayOffset: retention removed entries, or a replica promoted with a copy ahead of its queue)."""
        offset = self.offsets.offset(level)
        corrected = min(max(offset, min_offset), max_offset)
        if corrected != offset:
            log.warning("delay level %d: offset %d is outside its queue [%d, %d]; continuing from %d",
                        level, offset, min_offset, max_offset, corrected)
            self.offsets.update(level, corrected)
        return corrected

    def resting(self, level: int, now_ms: int) -> bool:
        """Whether the level waits out the back-off of a failed put."""
        return now_ms < self._retry_at.get(level, 0)

    def step(self, level: int, entries: Sequence[QueueEntry], now_ms: int) -> LevelStep:
        """The entries due at ``now_ms``: the leading run whose delivery time has come. A delivery time more
        than the level's delay in the future (the clock went back) counts as now, as RocketMQ corrects it."""
        latest = now_ms + self.levels.delay_ms(level)
        due: list[QueueEntry] = []
        for entry in entries:
            deliver_ms = entry.tags_code if entry.tags_code <= latest else now_ms
            if deliver_ms > now_ms:
                return LevelStep(due, deliver_ms)
            due.append(entry)
        return LevelStep(due, None)

    def delivered(self, level: int, entry: QueueEntry) -> None:
        """``entry`` left the schedule (put, or skipped as undeliverable): the level moves past it."""
        self.offsets.update(level, entry.queue_offset + 1)
        self._retry_at.pop(level, None)

    def failed(self, level: int, now_ms: int) -> None:
        """A put of the level's next entry failed: the offset stays, the level rests ``RETRY_AFTER_FAILURE_MS``."""
        self._retry_at[level] = now_ms + RETRY_AFTER_FAILURE_MS


class Delivery(NamedTuple):
    """The put that delivers a due message."""

    topic: str
    queue_id: int
    properties: bytes


def delivery_of(msg: StoredMessage) -> Delivery:
    """Where and with which properties a due message is put; ValueError if it names no real topic or queue."""
    props = dict(msg.properties)
    props.pop(PROPERTY_DELAY, None)
    props[PROPERTY_WAIT] = "false"
    topic = props.get(PROPERTY_REAL_TOPIC)
    raw_queue_id = props.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not raw_queue_id.isdigit():
        raise ValueError(f"{PROPERTY_REAL_TOPIC}={topic!r} / {PROPERTY_REAL_QUEUE_ID}={raw_queue_id!r} name no "
                         "topic and queue to deliver to")
    if topic == TRANSACTION_HALF_TOPIC:
        raise ValueError(f"its real topic is {TRANSACTION_HALF_TOPIC}")
    return Delivery(topic, int(raw_queue_id), encode_properties(props))


class ScheduleService:
    """The primary's delivery loop over every level (see the module docstring). ``run`` until cancelled."""

    def __init__(self, store: MessageStore, schedule: DelaySchedule, *, clock: Clock) -> None:
        self._store = store
        self.schedule = schedule
        self._clock = clock
        self.delivered = 0
        """Messages put back into their real topics (tests, admin)."""

    async def run(self) -> None:
        """A round every ``POLL_INTERVAL`` seconds until cancelled; a round the store fails waits
        ``RETRY_AFTER_FAILURE_MS`` before the next."""
        log.info("schedule service started (%d delay levels)", self.schedule.levels.max_level)
        try:
            while True:
                pause = POLL_INTERVAL
                try:
                    self.run_once()
                except RocketMQError as exc:
                    pause = RETRY_AFTER_FAILURE_MS / 1000
                    log.error("schedule service round failed (next in %.0f s): %s", pause, exc)
                await self._clock.sleep(pause)
        finally:
            log.info("schedule service stopped")

    def run_once(self) -> int:
        """One round over every level; returns the messages delivered."""
        delivered = 0
        for level in range(1, self.schedule.levels.max_level + 1):
            delivered += self._deliver_level(level)
        return delivered

    def _deliver_level(self, level: int) -> int:
        store, schedule = self._store, self.schedule
        queue_id = queue_id_of_level(level)
        max_offset = store.get_max_offset(SCHEDULE_TOPIC, queue_id)
        if max_offset == 0 or schedule.offsets.offset(level) == max_offset:  # the common case: nothing new
            return 0
        now_ms = int(self._clock.time() * 1000)
        if schedule.resting(level, now_ms):
            return 0
        offset = schedule.start_offset(level, store.get_min_offset(SCHEDULE_TOPIC, queue_id), max_offset)
        entries = store.get_queue_entries(SCHEDULE_TOPIC, queue_id, offset, BATCH)
        delivered = 0
        for entry in schedule.step(level, entries, now_ms).due:
            status = self._deliver(level, entry)
            if status is None:
                schedule.delivered(level, entry)
                continue
            if status is not PutStatus.PUT_OK:
                log.warning("delay level %d: putting back the message at queue offset %d failed (%s); retrying "
                            "in %d ms", level, entry.queue_offset, status.name, RETRY_AFTER_FAILURE_MS)
                schedule.failed(level, now_ms)
                break
            schedule.delivered(level, entry)
            delivered += 1
        self.delivered += delivered
        return delivered

    def _deliver(self, level: int, entry: QueueEntry) -> PutStatus | None:
        """Put the entry's message back into its real topic: the put's status, None if it cannot be delivered."""
        record = self._store.read_record(entry.physical_offset)
        if record is None:
            log.warning("delay level %d: the message at queue offset %d (commit log %d) is gone; skipped",
                        level, entry.queue_offset, entry.physical_offset)
            return None
        try:
            msg = decode_stored_message(record, decompress=False)
            target = delivery_of(msg)
        except (ProtocolError, ValueError) as exc:
            log.error("delay level %d: the message at queue offset %d cannot be delivered (%s); skipped",
                      level, entry.queue_offset, exc)
            return None
        result = self._store.put_message(
            target.topic, target.queue_id, msg.body, target.properties,
            tags_code=tags_code_of_properties(target.properties, tags_hash_code), flag=msg.flag,
            sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            reconsume_times=msg.reconsume_times)
        return result.status
