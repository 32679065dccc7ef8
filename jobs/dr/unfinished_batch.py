"""What a batch the link never committed wrote to B, found there by the position property and adopted into the
link's committed point: the ``adopt`` step of ``python -m jobs.dr failover``.

Why. A failover stops the link and waits until its committed point settles, but with A dead a batch planned
before the stop can hang instead of committing: its tasks that pulled before A died have sent their messages to
B, the others retry A for the link's ``retry_timeout_ms``. What the hung batch sent is on B though the link's
tables do not say so: the audit would count it as lost, a group whose checkpoint lies beyond the committed point
would be lowered to it and read those messages twice on B, and their offsets would translate nowhere.

Rule. Per source queue S of the link with committed next offset X whose target queue T is known (the link's
placements table: the first decision stands, ``placement_table``): T's tail is read down to a message of S below
X, or to the highest target offset the link ever committed in T (batches write in commit order), or to T's
first offset (``target_tail.TargetTails``, the sink's recovery-check reader), and the copies of S
at X, X+1, ... without a gap are adopted: committed to the link's Delta tables as one batch per source queue
(offsets to X + n, offset-map runs where each copy landed; query id ``dr-failover-adopt-<operation id>.<attempt>``,
at most once each). Copies of S beyond a missing offset (a send of the batch that failed while later ones
landed) are counted, not adopted: the groups start at the gap, and ``recover`` copies the missing message and
finds the later ones already on B. A source queue placed into several target topics adopts only what all of
them hold. A source queue without a recorded placement (another row format's executor decision whose batch never
committed) is not looked for: nothing of it was committed, so nothing of it is translated either.

Adopting is safe while the hung batch lives on: it can only commit the same copies again (its planned ends lie
at or beyond what it sent), never move the committed point back.

``adoption`` is the pure part (unit-tested); ``adopt_unfinished`` the thin I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import pyarrow.compute as pc

from broker_store.client import MessageQueue
from connectors.core.offsets import queue_key
from connectors.replication.placement_table import PlacementTable
from connectors.replication.queue_placement import LinkPlacements
from connectors.replication.records import BatchMetrics, OffsetMapping
from connectors.replication.tables import OFFSET_MAP, LinkTables
from connectors.replication.target_tail import TargetTails
from connectors.replication.writer_options import SinkOptions
from jobs.dr.link_ends import LinkEnds, triple

QUERY_PREFIX = "dr-failover-adopt-"
"""Query id of the adoptions' Delta commits: ``dr-failover-adopt-<operation id>.<step attempt>``."""


class Adoption(NamedTuple):
    """What of one source queue is on B beyond the link's committed point."""

    source: MessageQueue
    committed: int
    """The link's committed next offset of ``source`` (X)."""
    adopted: int
    """n: the source offsets X .. X + n - 1 are on B."""
    runs: tuple[OffsetMapping, ...]
    """Where they landed, as offset-map runs (a run ends where the target offsets jump; one set per target
    topic)."""
    beyond_gap: int
    """Copies of ``source`` above a missing offset: on B, not adopted."""

    @property
    def next_offset(self) -> int:
        return self.committed + self.adopted

    def to_json(self) -> dict[str, Any]:
        return {"queue": list(triple(self.source)), "committed": self.committed, "adopted": self.adopted,
                "beyond_gap": self.beyond_gap,
                "targets": sorted({f"{r.target_topic}/{r.target_broker}/{r.target_queue_id}" for r in self.runs})}


def adoption(source: MessageQueue, committed: int, target: MessageQueue,
             landed: Mapping[tuple[MessageQueue, int], int]) -> Adoption:
    """The copies of ``source`` at ``committed``, ``committed + 1``, ... found on ``target`` (``landed``: (source
    queue, source offset) -> target offset, ``resend_check.TailIndex.landed``). Pure."""
    landings: list[tuple[int, int]] = []
    offset = committed
    while (at := landed.get((source, offset))) is not None:
        landings.append((offset, at))
        offset += 1
    beyond = sum(1 for q, o in landed if q == source and o > offset)
    runs: list[OffsetMapping] = []
    for s, t in landings:
        last = runs[-1] if runs else None
        if last is not None and t == last.target_last_offset + 1:
            runs[-1] = replace(last, source_last_offset=s, target_last_offset=t, messages=last.messages + 1)
        else:
            runs.append(OffsetMapping(source.topic, source.broker_name, source.queue_id, s, s,
                                      target.topic, target.broker_name, target.queue_id, t, t, 1))
    return Adoption(source, committed, len(landings), tuple(runs), beyond)


def common(adoptions: Sequence[Adoption]) -> Adoption:
    """One source queue's adoption from several target topics: what all of them hold (the fewest), every
    target's runs cut to it. Pure."""
    n = min(a.adopted for a in adoptions)
    runs = [r for a in adoptions for r in _first(a.runs, n)]
    return Adoption(adoptions[0].source, adoptions[0].committed, n, tuple(runs),
                    max(a.beyond_gap + a.adopted - n for a in adoptions))


def _first(runs: Sequence[OffsetMapping], n: int) -> list[OffsetMapping]:
    out: list[OffsetMapping] = []
    for r in runs:
        if n <= 0:
            break
        take = min(n, r.messages)
        out.append(replace(r, source_last_offset=r.source_first_offset + take - 1,
                           target_last_offset=r.target_first_offset + take - 1, messages=take))
        n -= take
    return out


def committed_target_ends(tables: LinkTables) -> dict[MessageQueue, int]:
    """Per target queue, the offset after the highest one the link's committed offset map names: batches write
    in commit order, so an unfinished batch's copies all lie at or above it (the tail is read no lower)."""
    rows = tables.read(OFFSET_MAP, columns=["target_topic", "target_broker", "target_queue_id",
                                            "target_last_offset", "messages"])
    rows = rows.filter(pc.greater(rows["messages"], 0))
    if rows.num_rows == 0:
        return {}
    top = rows.group_by(["target_topic", "target_broker", "target_queue_id"]).aggregate(
        [("target_last_offset", "max")])
    return {MessageQueue(r["target_topic"], r["target_broker"], int(r["target_queue_id"])):
            int(r["target_last_offset_max"]) + 1 for r in top.to_pylist()}


def adopt_unfinished(ends: LinkEnds, query_id: str) -> list[Adoption]:
    """Find, per source queue of the link, its copies on B beyond the committed point and commit them to the
    link's tables (see the module docstring). Returns every queue looked at, adopted or not."""
    committed = ends.replicated()
    targets: dict[MessageQueue, list[MessageQueue]] = {}
    decided = LinkPlacements(PlacementTable(ends.link.tables_location, source_cluster=ends.source.name).load())
    for p in decided.decided():  # the first decision per (source queue, target topic) stands
        targets.setdefault(p.source, []).append(MessageQueue(p.target_topic, p.target.broker_name, p.target.queue_id))
    wanted: dict[MessageQueue, dict[MessageQueue, int]] = {}
    for source, x in committed.items():
        for target in targets.get(source, []):
            wanted.setdefault(target, {})[source] = x
    if not wanted:
        return []
    tails = TargetTails(SinkOptions.from_options({"config": ends.config_path, "link": ends.link.name}),
                        ends.source.name)
    floors = committed_target_ends(ends.tables)
    found: dict[MessageQueue, list[Adoption]] = {}
    for target in sorted(wanted, key=queue_key):
        if target in floors:  # nothing the unfinished batch sent lies below what the link committed there
            tails.floors[target] = max(tails.admin.min_offset(target), floors[target])
        index = tails.index(target, wanted[target], refresh=False)
        for source, x in wanted[target].items():
            found.setdefault(source, []).append(adoption(source, x, target, index.landed))
    out = [common(found[s]) for s in sorted(found, key=queue_key)]
    for batch_id, a in enumerate(out):
        if a.adopted:
            ends.tables.commit_batch(query_id, batch_id, {a.source: a.next_offset}, list(a.runs), [],
                                     BatchMetrics(messages=a.adopted, bytes=0))
    return out
