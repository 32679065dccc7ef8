"""What a source snapshot proves, judged against what the config reader remembers: the only place that decides
a source topic or subscription group was deleted. Pure: no I/O, no clock; called by
``connectors.config_sync.data_source.ConfigStreamReader.read`` on the driver once per trigger, and tested
without brokers.

"Absent from a listing" is not "deleted" (STYLE.md 15). A name seen before is judged by the broker groups that
held it (its *holders*), never by the whole listing:

* present in the snapshot: known, with its holders (a holder that does not answer now is kept among them);
* not present, and some holder did not answer or is no longer registered with a primary on the name server
  (an expired, killed or frozen broker): *unknown*, with the reason; kept, never counted as absent;
* not present, and every holder answered without it: *absent*. Absent in two consecutive snapshots (the
  reader's triggers, so at least one trigger apart): *deleted*, and forgotten. Absent once, then present or
  unknown: the count starts again.

A broker group holding a remembered name but not registered now is added to the snapshot's ``unreachable``
(``judge`` returns the amended state), so the applier sees a partial view and clears nothing on it. The same
holds for the target: every target broker group seen registered so far (``Memory.target_groups``, travelling as
``Evidence.known_target_groups``) that the applier's own read of the target lacks counts as unreachable there
(``Evidence.target_gaps``), so a target broker that is down or expired, before the snapshot or between it and
the apply, never makes a topic look missing there.

The memory is the reader's Spark offset (``Memory.to_offset`` / ``from_offset``), so a restart keeps it::

    {"tick": n, "version": 2,
     "topics": {name: [holders]}, "groups": {name: [holders]},      # every name not yet judged deleted
     "absentTopics": {name: first-absent ms}, "absentGroups": {...}, # absent once, every holder answering
     "targetGroups": [target broker groups seen registered]}

An offset of version 1 (``"topics"`` / ``"groups"`` as lists, holders not recorded) is read with each name held
by every broker group registered at the first snapshot after the upgrade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from connectors.config_sync.state import ClusterState

OFFSET_VERSION = 2
NOT_REGISTERED = "not registered with a primary on the name server"


@dataclass(frozen=True)
class Memory:
    """What the reader remembers of both clusters between snapshots (see the module docstring)."""

    topics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Source topic -> the broker groups that held it; every topic seen and not yet judged deleted."""
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Source subscription group -> the broker groups that held it (the same rule as topics)."""
    absent_topics: Mapping[str, int] = field(default_factory=dict)
    """Topics absent once with every holder answering -> the snapshot time of that first absence."""
    absent_groups: Mapping[str, int] = field(default_factory=dict)
    target_groups: tuple[str, ...] = ()
    """Target broker groups seen registered with a primary (sorted); one missing now is unreachable."""
    tick: int = 0

    def to_offset(self) -> dict[str, Any]:
        return {"tick": self.tick, "version": OFFSET_VERSION,
                "topics": {k: list(v) for k, v in sorted(self.topics.items())},
                "groups": {k: list(v) for k, v in sorted(self.groups.items())},
                "absentTopics": dict(sorted(self.absent_topics.items())),
                "absentGroups": dict(sorted(self.absent_groups.items())),
                "targetGroups": list(self.target_groups)}

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> Memory:
        """A version-2 offset, or a version-1 one (names as lists: holders empty, see ``judge``)."""
        def names(value: Any) -> dict[str, tuple[str, ...]]:
            if isinstance(value, Mapping):
                return {str(k): tuple(str(b) for b in v) for k, v in value.items()}
            return {str(k): () for k in value or ()}
        return cls(names(offset.get("topics")), names(offset.get("groups")),
                   {str(k): int(v) for k, v in (offset.get("absentTopics") or {}).items()},
                   {str(k): int(v) for k, v in (offset.get("absentGroups") or {}).items()},
                   tuple(str(g) for g in offset.get("targetGroups") or ()), int(offset.get("tick", 0)))


@dataclass(frozen=True)
class Evidence:
    """What one snapshot proves (see the module docstring); travels with the snapshot to the applier."""

    deleted_topics: Mapping[str, str] = field(default_factory=dict)
    """Source topic -> the evidence that it was deleted (for the change's detail and the log line)."""
    deleted_groups: Mapping[str, str] = field(default_factory=dict)
    unknown_topics: Mapping[str, str] = field(default_factory=dict)
    """Source topic not in the snapshot whose holders did not all answer -> why its state is unknown."""
    unknown_groups: Mapping[str, str] = field(default_factory=dict)
    known_target_groups: tuple[str, ...] = ()
    """Every target broker group seen registered so far (sorted), those missing at the snapshot included: one
    the applier's own, later read of the target lacks counts as unreachable (``target_gaps``). The groups missing
    at the snapshot are not stored apart: they are among these and the later read lacks them too, unless they
    came back, when they are not unreachable any more."""

    def to_json(self) -> dict[str, Any]:
        return {"deletedTopics": dict(self.deleted_topics), "deletedGroups": dict(self.deleted_groups),
                "unknownTopics": dict(self.unknown_topics), "unknownGroups": dict(self.unknown_groups),
                "knownTargetGroups": list(self.known_target_groups)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Evidence:
        """Reads a row written before ``missingTargetGroups`` went too (its groups are among ``knownTargetGroups``)."""
        return cls(dict(d.get("deletedTopics", {})), dict(d.get("deletedGroups", {})),
                   dict(d.get("unknownTopics", {})), dict(d.get("unknownGroups", {})),
                   tuple(d.get("knownTargetGroups", ())))

    def target_gaps(self, target: ClusterState) -> dict[str, str]:
        """The target broker groups this evidence expects and ``target`` (read later) neither lists with a
        primary nor already calls unreachable -> why they count as unreachable."""
        return {g: NOT_REGISTERED for g in self.known_target_groups
                if g not in target.brokers and g not in target.unreachable}

    def retrying(self, topics: Iterable[str], groups: Iterable[str]) -> Evidence:
        """With the deletions judged in an earlier round and not applied yet (``standing.unfinished_deletions``)
        added: a name judged deleted is forgotten by the reader, so the applier's table carries the retry."""
        again = "judged deleted in an earlier round; deletion not applied yet"
        return dataclasses.replace(
            self, deleted_topics={**{t: again for t in topics}, **self.deleted_topics},
            deleted_groups={**{g: again for g in groups}, **self.deleted_groups})


@dataclass(frozen=True)
class Judgement:
    state: ClusterState
    """The snapshot, with every broker group that holds a remembered name but is not registered added to
    ``unreachable``."""
    evidence: Evidence
    memory: Memory
    """The next offset's memory (tick + 1)."""


def judge(memory: Memory, state: ClusterState, target_groups: Iterable[str] | None) -> Judgement:
    """The rules of the module docstring. ``target_groups``: the target's broker groups registered with a
    primary now, or None when the target could not be listed (its memory is then kept as it is)."""
    answering = set(state.brokers) - set(state.unreachable)
    unreachable = dict(state.unreachable)

    listing = "; ".join(state.unreachable.values()) if not state.brokers else ""  # the cluster was not listed

    def why(holder: str) -> str:
        return unreachable.get(holder) or listing or NOT_REGISTERED

    def items(known: Mapping[str, tuple[str, ...]], present: Mapping[str, tuple[str, ...]],
              absent: Mapping[str, int]) -> tuple[dict[str, str], dict[str, str], dict[str, tuple[str, ...]],
                                                  dict[str, int]]:
        deleted: dict[str, str] = {}
        unknown: dict[str, str] = {}
        kept: dict[str, tuple[str, ...]] = {}
        absent_now: dict[str, int] = {}
        for name, holders in present.items():
            silent = [h for h in known.get(name, ()) if h not in answering]
            kept[name] = tuple(sorted({*holders, *silent}))
        for name, remembered in known.items():
            if name in present:
                continue
            holders = remembered or tuple(sorted(state.brokers))  # version 1 offsets recorded no holders
            missing = sorted(h for h in holders if h not in answering)
            if not holders or missing:
                unknown[name] = "; ".join(f"broker group {h}: {why(h)}" for h in missing) or "no broker group " \
                                                                                             "registered"
                kept[name] = holders
                for h in missing:
                    unreachable.setdefault(h, NOT_REGISTERED)
            elif name in absent:
                deleted[name] = (f"absent from every broker group that held it ({', '.join(holders)}, all "
                                 f"answering) in the snapshots of {_iso(absent[name])} and {_iso(state.taken_ms)}")
            else:
                kept[name] = holders
                absent_now[name] = state.taken_ms
        return deleted, unknown, kept, absent_now

    d_topics, u_topics, k_topics, a_topics = items(
        memory.topics, {n: t.brokers for n, t in state.topics.items()}, memory.absent_topics)
    d_groups, u_groups, k_groups, a_groups = items(
        memory.groups, {g: state.group_holders.get(g, ()) for g in state.groups}, memory.absent_groups)
    known_target = set(memory.target_groups) | set(target_groups or ())
    amended = dataclasses.replace(state, unreachable=unreachable)
    return Judgement(amended, Evidence(d_topics, d_groups, u_topics, u_groups, tuple(sorted(known_target))),
                     Memory(k_topics, k_groups, a_topics, a_groups, tuple(sorted(known_target)), memory.tick + 1))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
