"""Which changes of a config-sync round are recorded in the ``config_changes`` table, and which stand (the
"config changes pending" gauge). Pure: no I/O; called by ``connectors.config_sync.applier.ConfigTables`` when
it commits a round, and by ``jobs.metrics`` when it folds the table's new rows into the gauge.

The rules see the same refusal every round while it lasts (a shrink the source keeps asking for, a target
that stays unreachable). The table is a log of what happened, not of every round, so:

* an APPLIED change is recorded every time (each one is an action on the target);
* a not-applied change (REFUSED, FAILED, DISABLED, DEFERRED) is recorded when it first appears, and again only when it
  differs from the one standing for its (kind, subject) (other counts, reason, status);
* a change that stood and that this round's rules no longer call for is recorded once more as CLEARED; after
  a round that saw only part of the clusters (a broker group unreachable, the target unreadable) nothing is
  cleared, since the missing part may be why the change was not called for.

A change stands, per (kind, subject), from its not-applied row until a later APPLIED or CLEARED row of the same
key; the pending gauge counts what stands (``pending``), so it keeps reporting a refusal that is recorded once.
A refusal that was cleared and comes back is recorded again. (The start / change / clear rule itself is
``connectors.core.standing``, shared with the checkpoint connector's log lines.)

A deletion is called for once, in the round whose snapshot proves it (``connectors.config_sync.evidence``). One
that FAILED (the target refused or did not answer) or was DEFERRED (a partial view) is not dropped:
``unfinished_deletions`` gives its source names back to the caller, which adds them to the round's evidence, so
the rules call for it again until it is applied or moot (the target no longer has it, the source has it again).

``queue_floors``: the queue counts a target topic had when config sync deleted it (the APPLIED ``delete_topic``
rows carry them), so a re-creation never has fewer queues than the topic had.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange
from connectors.core.standing import transitions

ChangeKey = tuple[str, str]
"""(kind value, subject): one change's identity across rounds."""
NOT_APPLIED = frozenset({ChangeStatus.REFUSED, ChangeStatus.FAILED, ChangeStatus.DISABLED, ChangeStatus.DEFERRED})
NOT_APPLIED_VALUES = frozenset(s.value for s in NOT_APPLIED)


def change_key(change: ConfigChange) -> ChangeKey:
    return change.kind.value, change.subject


def _same(a: ConfigChange, b: ConfigChange) -> bool:
    """Equal as recorded (``order`` is not a column of the table, so it does not count)."""
    def canon(c: ConfigChange) -> tuple[Any, ...]:
        return (c.kind, c.subject, c.status, tuple(c.sources), c.read_queue_nums, c.write_queue_nums, c.perm,
                sorted(c.attributes.items()), None if c.group_config is None else json.dumps(c.group_config,
                                                                                            sort_keys=True),
                c.detail)
    return canon(a) == canon(b)


def to_record(standing: Mapping[ChangeKey, ConfigChange], changes: Sequence[ConfigChange], *,
              whole_view: bool) -> list[ConfigChange]:
    """The rows of this round (see the module docstring). ``standing``: what stood after the previous round
    (``fold``); ``changes``: this round's, with their final status (none PLANNED); ``whole_view``: every
    broker group of both clusters was read. The start / change / clear rule is ``connectors.core.standing``'s;
    a change applied this round is recorded as APPLIED, not CLEARED."""
    called_for = {change_key(c) for c in changes}
    not_applied = {change_key(c): c for c in changes if c.status in NOT_APPLIED}
    done = transitions(standing, not_applied, same=_same, judged=lambda key: whole_view and key not in called_for)
    new = {key for key, _ in (*done.started, *done.changed)}
    out = [c for c in changes if c.status not in NOT_APPLIED or change_key(c) in new]
    out.extend(c.with_status(ChangeStatus.CLEARED, f"no longer called for (was {c.status.value}: {c.detail})")
               for _, c in sorted(done.cleared, key=lambda item: item[0]))
    return out


def fold(standing: MutableMapping[ChangeKey, ConfigChange], recorded: Iterable[ConfigChange]) -> None:
    """Apply recorded rows, oldest first, to ``standing`` (in place)."""
    for change in recorded:
        if change.status in NOT_APPLIED:
            standing[change_key(change)] = change
        else:
            standing.pop(change_key(change), None)


def fold_statuses(standing: MutableMapping[ChangeKey, str], rows: Iterable[tuple[str, str, str]]) -> int:
    """``fold`` for the gauge, on (kind, subject, status) values of rows oldest first (in place); returns
    ``pending(standing)``. Re-reading rows already folded is harmless when newer rows follow them."""
    for kind, subject, status in rows:
        if status in NOT_APPLIED_VALUES:
            standing[(kind, subject)] = status
        else:
            standing.pop((kind, subject), None)
    return len(standing)


def pending(standing: Mapping[ChangeKey, Any]) -> int:
    """The "config changes pending" gauge: not-applied changes standing."""
    return len(standing)


def unfinished_deletions(standing: Mapping[ChangeKey, ConfigChange]) -> tuple[list[str], list[str]]:
    """(source topics, source groups) of the deletions that failed or were deferred and still stand (see the
    module docstring)."""
    failed = [c for c in standing.values() if c.status in (ChangeStatus.FAILED, ChangeStatus.DEFERRED)]
    return (sorted({s for c in failed if c.kind is ChangeKind.DELETE_TOPIC for s in c.sources}),
            sorted({s for c in failed if c.kind is ChangeKind.DELETE_GROUP for s in c.sources}))


def queue_floors(recorded: Iterable[ConfigChange]) -> dict[str, tuple[int, int]]:
    """Target topic -> the largest (read, write) queue counts of its APPLIED deletions (see the module
    docstring); rows recorded before deletions carried counts have none and add nothing."""
    floors: dict[str, tuple[int, int]] = {}
    for c in recorded:
        if c.kind is ChangeKind.DELETE_TOPIC and c.status is ChangeStatus.APPLIED and c.read_queue_nums is not None:
            read, write = floors.get(c.subject, (0, 0))
            floors[c.subject] = (max(read, c.read_queue_nums), max(write, c.write_queue_nums or 0))
    return floors
