"""The heartbeat message and what the monitor observes of it.

Written by ``connectors.heartbeat.writer`` (executors) and read back by ``connectors.heartbeat.tail``
on both clusters. Message layout on topic ``HEARTBEAT_TOPIC`` (``connectors.core.monitoring``)::

    properties  TAGS = <link name>          (link names never contain "||" or "*")
                KEYS = <link name>:<seq>
    body        UTF-8 JSON object, format 1:
                {"v": 1, "link": "<link>", "seq": <int>, "born_ms": <int>, "source": "<cluster>",
                 "target": "<cluster>"}
                v        format version; readers skip other versions (logged)
                seq      the heartbeat's number, +1 per interval (the producer query's resume state)
                born_ms  ms since the epoch, taken by the producer just before the send: lag is
                         measured from here, not from the message's bornTimestamp, so a retried send
                         cannot hide time
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

HEARTBEAT_FORMAT_VERSION = 1


class HeartbeatFormatError(ValueError):
    """A message on the heartbeat topic that is not a heartbeat of a known format."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One heartbeat of one link, as produced on the source."""

    link: str
    seq: int
    """Per-link sequence number, one per interval."""
    born_ms: int
    """Producer wall clock just before the send (ms since the epoch)."""
    source: str
    """Source cluster name of the link (``ClusterConfig.name``)."""
    target: str
    """Target cluster name of the link."""

    def encode(self) -> bytes:
        return orjson.dumps({"v": HEARTBEAT_FORMAT_VERSION, "link": self.link, "seq": self.seq,
                             "born_ms": self.born_ms, "source": self.source, "target": self.target})

    @property
    def keys(self) -> str:
        return f"{self.link}:{self.seq}"

    @classmethod
    def decode(cls, body: bytes) -> Heartbeat:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise HeartbeatFormatError(f"heartbeat body is not JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("v") != HEARTBEAT_FORMAT_VERSION:
            raise HeartbeatFormatError(f"not a format-{HEARTBEAT_FORMAT_VERSION} heartbeat: {body[:80]!r}")
        try:
            return cls(link=str(data["link"]), seq=int(data["seq"]), born_ms=int(data["born_ms"]),
                       source=str(data["source"]), target=str(data["target"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise HeartbeatFormatError(f"heartbeat body lacks {exc}: {body[:80]!r}") from exc


@dataclass(frozen=True, slots=True)
class Observed:
    """A heartbeat as stored on one cluster (the source: produced; the target: arrived)."""

    heartbeat: Heartbeat
    store_ms: int
    """The cluster's store timestamp of the message: on the target, the arrival time."""
    queue: str
    """``<topic>/<broker>/<queue id>`` it was read from."""
    offset: int
    """Its queue offset there."""

    @property
    def lag_ms(self) -> int:
        """Store time here - born time on the source (the whole path, on the target)."""
        return self.store_ms - self.heartbeat.born_ms
