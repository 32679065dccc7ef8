"""Recovery after a failover: the messages A acknowledged that the link had not replicated when A was lost,
copied to B once A answers again. The steps of ``python -m jobs.dr recover``, run by
``jobs.dr.operation.OperationRunner``.

    preflight  A and B answer. Per source queue of the link: the replicated point X (the link's committed
               resume point), A's first offset and its max offset Y now; the divergent messages are
               ``[max(X, first), Y)``. Messages below A's first offset were removed by A's retention: counted,
               never silently. With ``--quarantine`` each mapped target topic gets a quarantine topic on B
               (``<target>_DR_RECOVERED``, created like the target topic when missing).
    copy       per queue, the divergent range pulled from A and sent to B through the link's own sink (mapping,
               placement, byte-exact forwarding, loop guard, position property), each message also marked with
               ``ROCKETMQ_REPLICATOR_RECOVERY`` = the operation's id. Every send is checked first against B's
               tail (the recovery check of the sink, on for every send here), so a copy killed half way and run
               again sends nothing twice. Into the mapped topics, each queue is then committed to the link's
               Delta tables (offsets and offset map, query id ``dr-recover-<id>``, one batch per queue: at most
               once each), so consumer-offset translation stays exact for the recovered messages; into
               quarantine topics nothing of the link is changed.
    verify     per queue, every recovered offset is read back from B where the offset map says it landed and its
               position property must name it; recovered + born on B (the loop guard's) must equal the
               divergent range. Nothing on A is truncated or deleted.
    report     per queue: replicated, on A, divergent, recovered, already on B, born on B, lost to retention; the
               failover's audit computed again from the same records (unchanged while the link is stopped); the
               delayed messages still waiting on A (``jobs.dr.delayed``): A delivered those that fell due while it
               was away or before the copy into its topics, beyond the replicated point, so they were copied
               with the rest; those still waiting are delivered by A later and need another ``recover`` after
               their due time (or the link restarted).

``plan_queue`` and ``check_runs`` are the pure parts (unit-tested); the rest is thin I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from broker_store.client import MessageQueue, PullConsumer, PullStatus
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.properties import PROPERTY_REPLICATOR_RECOVERY
from broker_store.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DelayLevels
from connectors.core.offsets import queue_key
from connectors.replication.batch_commit import batch_metrics
from connectors.replication.forwarding import (
    DROPPED_PROPERTIES,
    ForwardedPull,
    RecordForwarder,
    Stamp,
    with_entry_property,
)
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.planning import QueueRange
from connectors.replication.pulling import pull_range_raw
from connectors.replication.reader import RocketMQStreamReader
from connectors.replication.records import OffsetMapping, ReplicationCommitMessage
from connectors.replication.source_maxes import read_source_maxes
from connectors.replication.source_position import POSITION_PROPERTY, parse_position
from connectors.replication.writer_options import SinkOptions
from jobs.dr.delayed import read_waiting
from jobs.dr.link_ends import LinkEnds, queue_of, triple
from jobs.dr.operation import Json, Step, StepContext, StepRefusedError
from jobs.dr.rpo import audit
from jobs.dr.switchover import both_answer, refusing_client_errors

KIND = "recover"
QUARANTINE_SUFFIX = "_DR_RECOVERED"
"""A quarantine topic's name: the mapped target topic's with this suffix."""
QUERY_PREFIX = "dr-recover-"
"""Query id of the link's Delta commits made by a recovery: ``dr-recover-<operation id>``."""


class QueuePlan(NamedTuple):
    """What a recovery does with one source queue."""

    start: int
    """First divergent offset: the replicated point, or A's first offset when retention removed beyond it."""
    end: int
    """A's max offset (next to be written) when the recovery was planned."""
    lost_to_retention: int
    """Divergent messages A no longer holds (below its first offset)."""

    @property
    def divergent(self) -> int:
        return max(0, self.end - self.start)


def plan_queue(replicated: int, first: int, end: int) -> QueuePlan:
    """The divergent range of one queue: ``[replicated, end)`` as far as A still holds it. A queue replicated
    past A's end (A lost data in its own failover, or was rebuilt) has nothing to recover."""
    if end <= replicated:
        return QueuePlan(end, end, 0)
    start = max(replicated, first)
    return QueuePlan(start, end, max(0, min(first, end) - replicated))


def quarantine_topic(target: str) -> str:
    return f"{target}{QUARANTINE_SUFFIX}"


class RunCheck(NamedTuple):
    """The read-back of one queue's offset-map runs."""

    verified: int
    """Offsets found on B where the map says, carrying their position."""
    problems: list[str]
    """What did not match (empty: all did)."""


def check_runs(source: MessageQueue, cluster: str, runs: Sequence[OffsetMapping],
               read: Callable[[MessageQueue, int, int], Mapping[int, str | None]]) -> RunCheck:
    """Read back every run of ``source``'s offset map: ``read(target queue, first, last)`` gives the position
    property of each target offset of ``[first, last]`` found (missing offsets absent). Each target offset must
    hold the source offset the run maps to it."""
    verified, problems = 0, []
    for run in runs:
        target = MessageQueue(run.target_topic, run.target_broker, run.target_queue_id)
        found = read(target, run.target_first_offset, run.target_last_offset)
        for i in range(run.messages):
            at, expect = run.target_first_offset + i, run.source_first_offset + i
            position = parse_position(found.get(at))
            if position is None or position.cluster != cluster or position.queue != source \
                    or position.offset != expect:
                problems.append(f"{queue_key(target)}@{at}: expected {queue_key(source)}@{expect}, found "
                                f"{found.get(at)!r}")
            else:
                verified += 1
    return RunCheck(verified, problems)


def covered(runs: Iterable[OffsetMapping]) -> int:
    return sum(r.messages for r in runs)


def mapping_to_json(m: OffsetMapping) -> list[Any]:
    return [m.source_topic, m.source_broker, m.source_queue_id, m.source_first_offset, m.source_last_offset,
            m.target_topic, m.target_broker, m.target_queue_id, m.target_first_offset, m.target_last_offset,
            m.messages]


def mapping_from_json(v: Sequence[Any]) -> OffsetMapping:
    return OffsetMapping(str(v[0]), str(v[1]), int(v[2]), int(v[3]), int(v[4]), str(v[5]), str(v[6]), int(v[7]),
                         int(v[8]), int(v[9]), int(v[10]))


class MarkingForwarder(RecordForwarder):
    """The link's ``RecordForwarder`` whose entries also carry the recovery property (the operation's id)."""

    def __init__(self, stamp: Stamp, cluster: str | None, operation_id: str) -> None:
        super().__init__(DROPPED_PROPERTIES, stamp, cluster)
        self._operation_id = operation_id

    def forward(self, buf: bytes, topic: str, queue_id: int, first: int = 0, stop: int = 1 << 63,
                broker: str | None = None) -> ForwardedPull:
        pulled = super().forward(buf, topic, queue_id, first, stop, broker)
        entries: list[bytes] = []
        refused = list(pulled.refused)
        keep = []
        for i, entry in enumerate(pulled.entries):
            try:
                entries.append(with_entry_property(entry, PROPERTY_REPLICATOR_RECOVERY, self._operation_id))
                keep.append(i)
            except ProtocolError as exc:  # the properties would pass the limit: refused like an oversized one
                refused.append((pulled.starts[i], str(exc)))
        return pulled._replace(entries=entries, offsets=[pulled.offsets[i] for i in keep],
                               sizes=[pulled.sizes[i] for i in keep], borns=[pulled.borns[i] for i in keep],
                               starts=[pulled.starts[i] for i in keep], refused=refused)


class RecoveryWriter(PartitionWriter):
    """The link's sink for one recovered queue: every send checked against B's tail first, entries marked."""

    def __init__(self, options: SinkOptions, operation_id: str) -> None:
        super().__init__(options)
        self.check_all = True
        self._operation_id = operation_id
        self._marking: dict[str | None, MarkingForwarder] = {}

    def _forwarder(self, source_cluster: str | None) -> RecordForwarder:
        forwarder = self._marking.get(source_cluster)
        if forwarder is None:
            forwarder = self._marking[source_cluster] = MarkingForwarder(
                lambda chain: self._chain(chain, source_cluster), source_cluster, self._operation_id)
        return forwarder


@dataclass(frozen=True)
class RecoverSettings:
    quarantine: bool = False
    delay_levels: str = DEFAULT_MESSAGE_DELAY_LEVEL
    """A's ``message_delay_level``: the due time of the delayed messages still waiting on A (report)."""


class Recover:
    """The steps over one link's ends. ``progress`` gets a line per queue copied."""

    def __init__(self, ends: LinkEnds, settings: RecoverSettings,
                 progress: Callable[[str], None] | None = None) -> None:
        self.ends = ends
        self.settings = settings
        self._progress = progress or (lambda line: None)

    def steps(self) -> list[Step]:
        return [replace(s, run=refusing_client_errors(s.run)) for s in [
            Step("preflight", self.preflight, "read each source queue's replicated point and A's offsets now; "
                                              "create quarantine topics on B (--quarantine)"),
            Step("copy", self.copy, "copy A's divergent messages to B through the link's sink, marked; commit "
                                    "each queue to the link's tables (not with --quarantine)"),
            Step("verify", self.verify, "read every recovered message back from B"),
            Step("report", self.report, "per queue: divergent, recovered, already on B, lost to retention"),
        ]]

    # -- preflight --------------------------------------------------------------------------------------

    def preflight(self, ctx: StepContext) -> Json:
        ends = self.ends
        both_answer(ends, "a recovery reads A and writes B")
        queues = ends.source_queues()
        replicated = ends.replicated()
        mapper = ends.mapper()
        plans: list[Json] = []
        for q in sorted(queues, key=queue_key):
            plan = plan_queue(replicated.get(q, 0), ends.a.min_offset(q), ends.a.max_offset(q))
            target = mapper.target_for(q.topic)
            if target is None:
                continue
            plans.append({"queue": triple(q), "replicated": replicated.get(q, 0), "start": plan.start,
                          "end": plan.end, "lost_to_retention": plan.lost_to_retention,
                          "target": quarantine_topic(target) if self.settings.quarantine else target})
        if self.settings.quarantine:
            self._create_quarantine_topics({str(p["target"]) for p in plans if p["end"] > p["start"]})
        # the failover's audit, again from the same records (unchanged while the link is stopped): the bound
        # the recovered count is held against
        audited = audit(replicated, read_source_maxes(ends.link.tables_location))
        return {"queues": plans, "quarantine": self.settings.quarantine,
                "audited": None if audited.recorded_at is None else audited.missing}

    def _create_quarantine_topics(self, topics: set[str]) -> None:
        b = self.ends.b
        existing = set(b.topic_list())
        for topic in sorted(topics - existing):
            origin = topic[:-len(QUARANTINE_SUFFIX)]
            per_group = max((d.write_queue_nums for d in b.topic_route(origin).queue_datas), default=8) \
                if origin in existing else 8
            b.create_topic(topic, max(1, per_group), cluster=self.ends.target.name)
            b.wait_for_route(topic)

    # -- copy -------------------------------------------------------------------------------------------

    def _sink_options(self) -> SinkOptions:
        return SinkOptions.from_options({"config": self.ends.config_path, "link": self.ends.link.name})

    def copy(self, ctx: StepContext) -> Json:
        ends = self.ends
        done: dict[str, Json] = dict(ctx.progress.get("done") or {})
        reader = RocketMQStreamReader({"config": ends.config_path, "link": ends.link.name})
        options = self._sink_options()
        quarantine = bool(ctx.results["preflight"]["quarantine"])
        query_id = f"{QUERY_PREFIX}{ctx.operation.id}"
        try:
            for batch_id, plan in enumerate(ctx.results["preflight"]["queues"]):
                q = queue_of(plan["queue"])
                key = queue_key(q)
                if key in done or plan["end"] <= plan["start"]:
                    continue
                writer = RecoveryWriter(options, ctx.operation.id)
                for raw in pull_range_raw(reader.settings, QueueRange(q.topic, q.broker_name, q.queue_id,
                                                                      int(plan["start"]), int(plan["end"]))):
                    writer.add_pull(raw.records, q.topic, q.broker_name, q.queue_id, ends.source.name,
                                    str(plan["target"]), int(plan["start"]), int(plan["end"]))
                result = writer.finish()
                if result.failures:
                    first = result.failures[0]
                    raise StepRefusedError(f"{len(result.failures)} message(s) of {key} were refused by "
                                           f"{ends.target.name} (e.g. offset {first.queue_offset}: {first.error})",
                                           "fix the cause on B (topic, permission, size), then run again")
                if not quarantine:
                    self._commit(query_id, batch_id, q, int(plan["end"]), result)
                done[key] = {"recovered": result.delivered, "already_on_b": result.duplicates_avoided,
                             "born_on_b": result.skipped_loop,
                             "runs": [mapping_to_json(m) for m in result.offset_map]}
                ctx.save({"done": done})
                self._progress(f"copy: {key}: {result.delivered} recovered, {result.duplicates_avoided} already on "
                               f"B, {result.skipped_loop} born on B")
        finally:
            reader.stop()
        return {"queues": done}

    def _commit(self, query_id: str, batch_id: int, q: MessageQueue, end: int,
                result: ReplicationCommitMessage) -> None:
        """The queue's range into the link's Delta tables, at most once per (query id, batch id)."""
        metrics = batch_metrics([result], 0, int(self.ends.clock.time() * 1000))
        self.ends.tables.commit_batch(query_id, batch_id, {q: end}, list(result.offset_map), [], metrics)

    # -- verify -----------------------------------------------------------------------------------------

    def verify(self, ctx: StepContext) -> Json:
        ends = self.ends
        copied: Mapping[str, Json] = ctx.results["copy"]["queues"]
        consumer = PullConsumer(";".join(ends.target.namesrv), f"PID_RMQ_SYS_DR_VERIFY_{ends.link.name}",
                                credentials=ends.target.credentials(), tls=ends.target.tls)
        out: dict[str, Json] = {}
        try:
            for plan in ctx.results["preflight"]["queues"]:
                q = queue_of(plan["queue"])
                key = queue_key(q)
                divergent = max(0, int(plan["end"]) - int(plan["start"]))
                entry = copied.get(key, {"recovered": 0, "already_on_b": 0, "born_on_b": 0, "runs": []})
                runs = [mapping_from_json(r) for r in entry["runs"]]
                check = check_runs(q, ends.source.name, runs, lambda t, a, b: _positions(consumer, t, a, b))
                born_on_b = int(entry["born_on_b"])
                if check.problems or check.verified + born_on_b != divergent:
                    said = "; ".join(check.problems[:3]) or (
                        f"{check.verified} read back + {born_on_b} born on B != {divergent} divergent")
                    raise StepRefusedError(f"recovered messages of {key} do not read back from "
                                           f"{ends.target.name}: {said}", "run again (copy is resumable), or "
                                                                          "look at B's queue")
                out[key] = {"divergent": divergent, "verified": check.verified}
        finally:
            consumer.close()
        return {"queues": out}

    # -- report -----------------------------------------------------------------------------------------

    def report(self, ctx: StepContext) -> Json:
        copied: Mapping[str, Json] = ctx.results["copy"]["queues"]
        rows = []
        for plan in ctx.results["preflight"]["queues"]:
            key = queue_key(queue_of(plan["queue"]))
            entry = copied.get(key, {})
            rows.append({"queue": plan["queue"], "target": plan["target"], "replicated": plan["replicated"],
                         "on_a": plan["end"], "divergent": max(0, int(plan["end"]) - int(plan["start"])),
                         "recovered": int(entry.get("recovered", 0)) + int(entry.get("already_on_b", 0)),
                         "sent_now": int(entry.get("recovered", 0)),
                         "born_on_b": int(entry.get("born_on_b", 0)),
                         "lost_to_retention": plan["lost_to_retention"]})
        return {"queues": rows, "recovered": sum(r["recovered"] for r in rows),
                "lost_to_retention": sum(int(r["lost_to_retention"]) for r in rows),
                "quarantine": ctx.results["preflight"]["quarantine"],
                "audited": ctx.results["preflight"].get("audited"),
                "delayed": read_waiting(self.ends, DelayLevels.parse(self.settings.delay_levels)).to_json()}


def _positions(consumer: PullConsumer, queue: MessageQueue, first: int, last: int) -> dict[int, str | None]:
    """Target offset -> position property of the messages of ``[first, last]`` of ``queue``."""
    found: dict[int, str | None] = {}
    offset = first
    while offset <= last:
        result = consumer.pull(queue, offset, min(32, last - offset + 1))
        if result.status is not PullStatus.FOUND:
            break
        for m in result.messages:
            if first <= m.queue_offset <= last:
                found[m.queue_offset] = m.properties.get(POSITION_PROPERTY)
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return found
