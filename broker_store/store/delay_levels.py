"""Delay levels: the table of RocketMQ 4.x scheduled delivery, and the ConsumeQueue tags code it implies.

Used by the store (a put to ``SCHEDULE_TOPIC`` and a rebuilt ConsumeQueue entry of one get the delivery
timestamp as their tags code: ``schedule_tags_code``), by the broker's send path (which level a message
asks for: ``requested_level``) and by its schedule service (``broker.schedule``). The table comes from the
broker setting ``message_delay_level`` (``broker_store.config``), parsed here: it is a store concern because
recovery and a replica's indexing must compute the same tags code the put did.

A delayed message is stored in ``SCHEDULE_TOPIC``, queue ``level - 1``, its ConsumeQueue entry::

    commit log offset 8 | size 4 | tags code 8 = STORETIMESTAMP + delay of its level (ms)

``message_delay_level`` format: delays separated by single spaces, level 1 first; each an integer followed by
one unit, ``s`` (seconds), ``m`` (minutes), ``h`` (hours) or ``d`` (days): ``"1s 5s 10s 30s 1m ... 2h"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_store.protocol.properties import PROPERTY_DELAY, first_value, property_key

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""TopicValidator.RMQ_SYS_SCHEDULE_TOPIC: where delayed messages wait, one queue per level."""
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ's MessageStoreConfig.messageDelayLevel default (18 levels)."""
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
"""Delay units and their length in milliseconds."""
UNKNOWN_LEVEL_DELAY_MS = 1000
"""Delay applied to a level the table does not hold (RocketMQ's computeDeliverTimestamp fallback)."""
DELAY_KEY = property_key(PROPERTY_DELAY)


@dataclass(frozen=True, slots=True)
class DelayLevels:
    """The delay of each level, level 1 first."""

    delays_ms: tuple[int, ...]
    """``delays_ms[level - 1]`` is the delay of ``level``, in milliseconds."""

    @classmethod
    def parse(cls, text: str) -> DelayLevels:
        """The table of a ``message_delay_level`` string; ValueError naming the bad item and the format."""
        items = text.split(" ")
        delays = []
        for position, item in enumerate(items, 1):
            unit_ms = UNIT_MS.get(item[-1:])
            number = item[:-1]
            if unit_ms is None or not number.isascii() or not number.isdigit():
                raise ValueError(
                    f"message_delay_level {text!r}: item {position} ({item!r}) is not a delay; expected delays "
                    f"separated by single spaces, each an integer followed by one of {sorted(UNIT_MS)}, e.g. "
                    f"{DEFAULT_MESSAGE_DELAY_LEVEL!r}")
            delays.append(int(number) * unit_ms)
        return cls(tuple(delays))

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def cap(self, level: int) -> int:
        """``level`` limited to the highest level (a message asking for more waits the longest delay)."""
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        """The delay of ``level`` (``UNKNOWN_LEVEL_DELAY_MS`` for a level outside the table)."""
        if 1 <= level <= len(self.delays_ms):
            return self.delays_ms[level - 1]
        return UNKNOWN_LEVEL_DELAY_MS

    def deliver_timestamp(self, level: int, store_timestamp: int) -> int:
        """When a message of ``level`` stored at ``store_timestamp`` (ms) is due."""
        return store_timestamp + self.delay_ms(level)


DEFAULT_DELAY_LEVELS = DelayLevels.parse(DEFAULT_MESSAGE_DELAY_LEVEL)


def queue_id_of_level(level: int) -> int:
    """The SCHEDULE_TOPIC queue of ``level``."""
    return level - 1


def requested_level(props: bytes) -> int | None:
    """The DELAY property's value as an integer; None without one. ValueError if it is not an integer.

    Cheap for the common message: one bytes search that finds nothing."""
    raw = first_value(props, DELAY_KEY)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"the DELAY property {raw.decode(errors='replace')!r} is not an integer delay level") \
            from None


def schedule_tags_code(props: bytes | memoryview, store_timestamp: int, levels: DelayLevels) -> int:
    """Tags code of a SCHEDULE_TOPIC record: its delivery timestamp (0 when DELAY is missing, unreadable or not
    positive: such a record is due at once, as RocketMQ would then keep the TAGS hash, an old timestamp)."""
    raw = first_value(bytes(props), DELAY_KEY)
    try:
        level = int(raw) if raw is not None else 0
    except ValueError:
        level = 0
    if level <= 0:
        return 0
    return levels.deliver_timestamp(levels.cap(level), store_timestamp)
