"""What ``make demo`` reads back at the end: the copy on the target, the heartbeats, the group's translated
offsets and the topics config sync created, from the clusters and the link's Delta tables.

Called by ``jobs/demo.py`` on its own process once the load is through; read-only (deltalake, the broker
clients). Each function prints its part of the summary and returns what the demo checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from broker_store.client import Admin, MessageQueue, PullConsumer, PullStatus
from broker_store.protocol.message import PROPERTY_REPLICATOR_SOURCE
from connectors.checkpoint.tables import CHECKPOINTS, TRANSLATED_OUTCOMES
from connectors.config_sync.applier import CONFIG_CHANGES
from connectors.config_sync.plan import ChangeKind, ChangeStatus
from connectors.heartbeat.monitor import percentile
from connectors.heartbeat.tables import HEARTBEATS
from connectors.replication.tables import METRICS


class DemoCheckError(Exception):
    """A check of the demo's summary failed: the demo exits 1 with this one line."""


def queues_of(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.wait_for_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def table_rows(tables: Path, name: str) -> list[dict[str, Any]]:
    """The rows of the Delta table ``name`` of a link's tables (``tables``: ``<delta_location>/<link>``); none
    while it does not exist."""
    path = tables / name
    if not (path / "_delta_log").exists():
        return []
    rows: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return rows


@dataclass(frozen=True)
class CopyCheck:
    """What ``check_copy`` found on the target."""

    missing: int
    """Acknowledged sends not on the target."""
    repeated: int
    """Copies beyond the first of a message on the target."""
    unacknowledged: int
    """Messages on the target whose send was not acknowledged (stored by a primary that died before answering,
    or answered too late): allowed only with ``maybe_stored``."""


def check_copy(target: str, topic: str, sent: Mapping[str, bytes], tables: Path, *,
               maybe_stored: frozenset[bytes] = frozenset(), repeats_allowed: bool = False) -> CopyCheck:
    """Every message sent is on the target once, byte-identical, with the replicator's chain property.

    ``maybe_stored`` (a failover under the load): bodies of sends that were not acknowledged; such a message may
    be on the target too. ``repeats_allowed``: extra copies (re-sent batches) are counted, not refused."""
    seen: dict[str, int] = {}
    unacknowledged = 0
    with Admin(target) as admin, PullConsumer(target, "DEMO_VERIFY", heartbeat_interval=None) as consumer:
        for mq in queues_of(admin, topic):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 256)
                if result.status is not PullStatus.FOUND:
                    break
                for msg in result.messages:
                    if msg.msg_id not in sent and msg.body in maybe_stored:
                        unacknowledged += 1
                    elif sent.get(msg.msg_id) != msg.body:
                        raise DemoCheckError(f"{msg.msg_id} at {mq} offset {msg.queue_offset} is not the body sent")
                    else:
                        seen[msg.msg_id] = seen.get(msg.msg_id, 0) + 1
                    if msg.properties.get(PROPERTY_REPLICATOR_SOURCE) is None:
                        raise DemoCheckError(f"{msg.msg_id} on the target lacks {PROPERTY_REPLICATOR_SOURCE}")
                offset = result.next_begin_offset
    batches = table_rows(tables, METRICS)
    recorded = sum(int(b["messages"] or 0) for b in batches)
    print(f"  replicated: {len(seen)} of {len(sent)} messages of {topic} on the target, every body byte-identical; "
          f"{len(batches)} batch(es) in the Delta metrics table ({recorded} messages, heartbeats included)")
    check = CopyCheck(len(sent) - len(seen), sum(c - 1 for c in seen.values()), unacknowledged)
    if check.missing or (check.repeated and not repeats_allowed):
        raise DemoCheckError(f"the target holds {len(seen)} distinct messages of {len(sent)} sent "
                             f"({check.repeated} repeated)")
    return check


def heartbeat_summary(tables: Path) -> None:
    lags = sorted(int(r["lag_ms"]) for r in table_rows(tables, HEARTBEATS))
    if not lags:
        raise DemoCheckError("no heartbeat reached the target")
    print(f"  heartbeats: {len(lags)} arrived on the target; lag p50 {percentile(lags, 0.5)} ms, "
          f"p99 {percentile(lags, 0.99)} ms, max {lags[-1]} ms")


def translated_offsets(tables: Path, group: str) -> dict[MessageQueue, int]:
    """The group's newest translated checkpoint: target queue -> offset, printed per source queue."""
    rows = [r for r in table_rows(tables, CHECKPOINTS) if r["group"] == group and r["outcome"] in TRANSLATED_OUTCOMES]
    if not rows:
        raise DemoCheckError(f"no translated checkpoint of {group}")
    newest = max(r["snapshot_at"] for r in rows)
    offsets: dict[MessageQueue, int] = {}
    print(f"  newest translated checkpoint of {group} (source offsets as of {newest:%H:%M:%S}):")
    for r in sorted((r for r in rows if r["snapshot_at"] == newest),
                    key=lambda r: (r["source_broker"], r["source_queue_id"])):
        target = MessageQueue(r["target_topic"], r["target_broker"], r["target_queue_id"])
        offsets[target] = r["target_offset"]
        print(f"    {r['source_topic']}/{r['source_broker']}/{r['source_queue_id']} @ {r['source_offset']}"
              f"  ->  {target.topic}/{target.broker_name}/{target.queue_id} @ {r['target_offset']} ({r['outcome']})")
    return offsets


def finish_on_target(target: str, group: str, topic: str, read_on_source: list[str], sent: Mapping[str, bytes], *,
                     repeats_allowed: bool = False) -> None:
    """A consumer of ``group`` on the target continues from the committed (translated) offsets to the end;
    with what the group read on the source, every message exactly once. ``repeats_allowed`` (copies re-sent
    during a failover are on the target twice): only a message read on both clusters counts as read twice."""
    read: list[str] = []
    with Admin(target) as admin, PullConsumer(target, group, heartbeat_interval=None) as consumer:
        for mq in queues_of(admin, topic):
            offset = consumer.query_consumer_offset(mq) or 0
            while True:
                result = consumer.pull(mq, offset, 256)
                if result.status is not PullStatus.FOUND:
                    break
                read.extend(m.msg_id for m in result.messages)
                offset = result.next_begin_offset
            consumer.update_consumer_offset(mq, offset)
    both = read_on_source + read
    missing = len(set(sent) - set(both))
    repeated = len(set(read_on_source) & set(read)) if repeats_allowed else len(both) - len(set(both))
    print(f"  failover: {group} read {len(read_on_source)} on the source, then {len(read)} on the target from the "
          f"translated offsets: {len(set(both))} of {len(sent)} messages, {missing} missed, {repeated} read twice")
    if missing or repeated:
        raise DemoCheckError(f"{group} missed {missing} and repeated {repeated} message(s) across the failover")


def created_topics(tables: Path) -> None:
    rows = [r for r in table_rows(tables, CONFIG_CHANGES)
            if r["status"] == ChangeStatus.APPLIED.value and r["kind"] == ChangeKind.CREATE_TOPIC.value]
    print(f"  config sync created {len(rows)} topic(s) on the target: " + ", ".join(
        f"{r['subject']} ({r['write_queue_nums']} queues/broker, from {', '.join(r['sources'])})"
        for r in rows))
    groups = [r for r in table_rows(tables, CONFIG_CHANGES)
              if r["status"] == ChangeStatus.APPLIED.value and r["kind"] == ChangeKind.CREATE_GROUP.value]
    if groups:
        print(f"  and {len(groups)} subscription group(s): " + ", ".join(r["subject"] for r in groups))
