"""GET_TOPIC_STATS_INFO (202): every queue's min / max offset of one topic on one broker, in one answer.

Wire type only (no I/O). Written by the broker (``broker_store.broker.offset_processor``), read by the admin
client (``Admin.topic_stats``; the replication reader learns a trigger's max offsets from it, one request per
broker group and topic instead of one GET_MAX_OFFSET per queue).

Request: extFields ``topic`` (RocketMQ's GetTopicStatsInfoRequestHeader, ``headers.TopicRequestHeader``).
Answer: TOPIC_NOT_EXIST when the broker has no config of the topic, else SUCCESS with RocketMQ's
TopicStatsTable as fastjson writes it: a map keyed by MessageQueue *objects*, which is not standard JSON
(fields sorted, no spaces; ``topicPutTps`` exists since RocketMQ 5 and may be absent)::

    TopicStatsTable  {"offsetTable":{MessageQueue:TopicOffset,...},"topicPutTps":0.0}
    MessageQueue     {"brokerName":"broker-a","queueId":0,"topic":"Orders"}
    TopicOffset      {"lastUpdateTimestamp":1700000000000,"maxOffset":42,"minOffset":0}

    e.g. {"offsetTable":{{"brokerName":"a","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":0,
          "maxOffset":0,"minOffset":0}},"topicPutTps":0.0}

A fastjson writer with WriteNonStringKeyAsString sends each key as a JSON string holding that object; the
decoder reads both. Queue ids run 0 .. max(readQueueNums, writeQueueNums) - 1 of the broker's topic config;
``lastUpdateTimestamp`` is the store time of the message at ``maxOffset - 1`` (0 for an empty queue).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message_queue import MessageQueue


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue's offsets (RocketMQ's TopicOffset)."""

    min_offset: int
    """First queue offset whose message still exists."""
    max_offset: int
    """Next queue offset to be written (what GET_MAX_OFFSET answers)."""
    last_update_timestamp: int
    """Store time (ms) of the message at ``max_offset - 1``; 0 when the queue is empty."""


@dataclass(frozen=True, slots=True)
class TopicStatsTable:
    """A GET_TOPIC_STATS_INFO body: the topic's queues on one broker."""

    offsets: Mapping[MessageQueue, TopicOffset]
    put_tps: float = 0.0
    """``topicPutTps`` (this broker keeps no put rate: 0.0)."""

    def encode(self) -> bytes:
        """The fastjson text (see the module docstring), queues in id order."""
        entries = ",".join(
            orjson.dumps({"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic}).decode() + ":"
            + orjson.dumps({"lastUpdateTimestamp": o.last_update_timestamp, "maxOffset": o.max_offset,
                            "minOffset": o.min_offset}).decode()
            for q, o in sorted(self.offsets.items()))
        return f'{{"offsetTable":{{{entries}}},"topicPutTps":{orjson.dumps(float(self.put_tps)).decode()}}}'.encode()

    @classmethod
    def decode(cls, body: bytes, source: str) -> TopicStatsTable:
        """Parse an answer from ``source`` (named in the error); ProtocolError if it is not a TopicStatsTable."""
        try:
            text = body.decode()
            parsed = orjson.loads(_OBJECT_KEY.sub(_quote_key, text))
            if not isinstance(parsed, dict):
                raise ValueError(f"a {type(parsed).__name__}, not an object")
            table = parsed.get("offsetTable")
            if not isinstance(table, dict):
                raise ValueError("no offsetTable object")
            offsets = {_queue(orjson.loads(key)): _offset(value) for key, value in table.items()}
            return cls(offsets, float(parsed.get("topicPutTps") or 0.0))
        except (UnicodeDecodeError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"GET_TOPIC_STATS_INFO from {source}: malformed TopicStatsTable: {exc}") from exc


# A flat object used as a key: after '{' or ',' (outside strings), an object without nested braces, then ':'.
# Standard JSON never puts ':' after an object, so only fastjson's MessageQueue keys match; each is quoted
# into a string key (the WriteNonStringKeyAsString form), then parsed on its own.
_STRING = r'"(?:[^"\\]|\\.)*"'
_OBJECT_KEY = re.compile(rf'({_STRING})|([{{,]\s*)(\{{(?:[^{{}}"]|{_STRING})*\}})(\s*:)')


def _quote_key(m: re.Match[str]) -> str:
    if m.group(1):
        return m.group(1)
    return m.group(2) + orjson.dumps(m.group(3)).decode() + m.group(4)


def _queue(d: Any) -> MessageQueue:
    if not isinstance(d, dict):
        raise ValueError(f"queue key {d!r} is not an object")
    return MessageQueue(str(d["topic"]), str(d["brokerName"]), int(d["queueId"]))


def _offset(d: Any) -> TopicOffset:
    if not isinstance(d, dict):
        raise ValueError(f"queue offsets {d!r} are not an object")
    return TopicOffset(int(d["minOffset"]), int(d["maxOffset"]), int(d.get("lastUpdateTimestamp") or 0))
