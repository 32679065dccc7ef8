"""Where a consumer group continues on A after a failback: its committed offsets on B mapped back through
both links' offset maps. Pure: no I/O; called by ``jobs.dr.failback`` (commit step) with the runs of
``connectors.checkpoint.link_state.read_link_progress`` for the forward link (A -> B) and the reverse link
(B -> A); property-tested in tests/unit/test_dr_reverse_positions.py.

A queue of B holds two kinds of messages: copies of A's messages (the forward link's offset map says where
each came from on A: the original is still there) and messages born on B (the reverse link's offset map says
where its copy landed on A). Both maps together give every message of B a place on A: a ``Segment`` is a
stretch of B offsets whose A offsets are known one by one (``exact``), or only as a whole.

The rule, per A queue: the group's next A offset is the lowest A offset of a message it has not read on B
(B offset at or past its committed offset there); when it read every message of the queue that B holds, the
offset after the highest one it read. So nothing is skipped; nothing is read twice unless a message the group
read sits on A above one it did not (B's order and A's order disagree: interleaved writes on both sides, or
a stretch known only as a whole), which the result counts (``re_read``) and marks inexact. The sequence of a
planned switchover, writes on B, and a failback keeps both orders (A's originals first, then B's copies), so
its positions are exact.

A run with gaps (the loop guard skipped the other side's messages inside it) is refined with the other map:
the offsets of the run's span not covered by the other link's copies are the ones it delivered; when their
count equals the run's messages they pair one by one with its target offsets, in order.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from broker_store.client import MessageQueue
from connectors.checkpoint.translation import Run

Span = tuple[int, int]
"""Inclusive offset range ``(first, last)``."""


class Segment(NamedTuple):
    """B offsets ``b_first..b_last`` of ``b_queue`` are messages at ``a_first..a_last`` of ``a_queue``."""

    b_queue: MessageQueue
    b_first: int
    b_last: int
    a_queue: MessageQueue
    a_first: int
    a_last: int
    exact: bool
    """The two spans pair one by one in order (same length). False: only the stretch as a whole is known."""


@dataclass(frozen=True)
class APosition:
    """The group's next offset on one A queue."""

    a_queue: MessageQueue
    offset: int
    exact: bool
    """Nothing the group read on B lies at or above ``offset`` (and no stretch was known only as a whole)."""
    re_read: int
    """Messages the group read on B that it will read again on A (0 when exact)."""


def _subtract(span: Span, covered: Sequence[Span]) -> list[Span]:
    """``span`` minus the sorted disjoint ``covered`` spans (those before it found by bisection)."""
    first, last = span
    out: list[Span] = []
    start = max(0, bisect.bisect_right(covered, (first, first)) - 1)
    for i in range(start, len(covered)):
        c_first, c_last = covered[i]
        if c_first > last:
            break
        if c_last < first:
            continue
        if c_first > first:
            out.append((first, c_first - 1))
        first = max(first, c_last + 1)
        if first > last:
            return out
    out.append((first, last))
    return out


def _refine(source: MessageQueue, run: Run, covered: Sequence[Span], b_side_is_source: bool) -> list[Segment]:
    """The segments of one run: exact where the run is contiguous, or where its gaps are exactly the offsets
    the other link's copies occupy; else the whole run as one inexact segment."""
    pieces: list[tuple[Span, Span]] = []
    if run.contiguous:
        pieces = [((run.source_first, run.source_last), (run.target_first, run.target_last))]
    elif not run.summary:
        delivered = _subtract((run.source_first, run.source_last), covered)
        if sum(last - first + 1 for first, last in delivered) == run.messages:
            target = run.target_first
            for first, last in delivered:
                pieces.append(((first, last), (target, target + last - first)))
                target += last - first + 1
    exact = bool(pieces)
    if not exact:
        pieces = [((run.source_first, run.source_last), (run.target_first, run.target_last))]
    out = []
    for (s_first, s_last), (t_first, t_last) in pieces:
        if b_side_is_source:
            out.append(Segment(source, s_first, s_last, run.target, t_first, t_last, exact))
        else:
            out.append(Segment(run.target, t_first, t_last, source, s_first, s_last, exact))
    return out


def _covered(runs: Mapping[MessageQueue, Sequence[Run]]) -> dict[MessageQueue, list[Span]]:
    """Per target queue, the sorted spans the runs' copies occupy (a run's target span is its messages)."""
    spans: dict[MessageQueue, list[Span]] = {}
    for source_runs in runs.values():
        for r in source_runs:
            spans.setdefault(r.target, []).append((r.target_first, r.target_last))
    return {q: sorted(s) for q, s in spans.items()}


def segments(forward: Mapping[MessageQueue, Sequence[Run]],
             reverse: Mapping[MessageQueue, Sequence[Run]]) -> list[Segment]:
    """Every message of B placed on A. ``forward``: the forward link's runs per A queue (A -> B);
    ``reverse``: the reverse link's runs per B queue (B -> A)."""
    on_a = _covered(reverse)  # A offsets holding copies of B's messages: gaps of the forward runs
    on_b = _covered(forward)  # B offsets holding copies of A's messages: gaps of the reverse runs
    out: list[Segment] = []
    for a_queue, runs in forward.items():
        for r in runs:
            out += _refine(a_queue, r, on_a.get(a_queue, []), b_side_is_source=False)
    for b_queue, runs in reverse.items():
        for r in runs:
            out += _refine(b_queue, r, on_b.get(b_queue, []), b_side_is_source=True)
    return out


def a_positions(all_segments: Iterable[Segment], b_offsets: Mapping[MessageQueue, int]) -> dict[MessageQueue,
                                                                                             APosition]:
    """Per A queue, the group's next offset (module docstring). ``b_offsets``: the group's committed next
    offset per B queue; a B queue without one counts as not read at all (never skipped). A queues no segment
    reaches are absent (nothing of theirs is on B)."""
    unread: dict[MessageQueue, int] = {}
    read: dict[MessageQueue, int] = {}
    whole: set[MessageQueue] = set()  # a queue with a stretch partly read and known only as a whole
    read_spans: dict[MessageQueue, list[Span]] = {}
    for s in all_segments:
        b = b_offsets.get(s.b_queue, s.b_first)
        q = s.a_queue
        if s.exact:
            n = min(max(b - s.b_first, 0), s.b_last - s.b_first + 1)  # read of this segment
            if n:
                read[q] = max(read.get(q, -1), s.a_first + n - 1)
                read_spans.setdefault(q, []).append((s.a_first, s.a_first + n - 1))
            if s.a_first + n <= s.a_last:
                unread[q] = min(unread.get(q, s.a_first + n), s.a_first + n)
        elif b > s.b_last:
            read[q] = max(read.get(q, -1), s.a_last)
            read_spans.setdefault(q, []).append((s.a_first, s.a_last))
        else:
            unread[q] = min(unread.get(q, s.a_first), s.a_first)
            if b > s.b_first:
                whole.add(q)
    out: dict[MessageQueue, APosition] = {}
    for q in set(unread) | set(read):
        offset = unread[q] if q in unread else read[q] + 1
        again = sum(max(0, last - max(first, offset) + 1) for first, last in read_spans.get(q, []))
        out[q] = APosition(q, offset, exact=not again and q not in whole, re_read=again)
    return out


def run_map(pairs: Iterable[tuple[MessageQueue, Sequence[Run]]]) -> dict[MessageQueue, list[Run]]:
    """Runs per source queue from ``(source, runs)`` pairs (``OffsetTranslator.sources`` / ``runs``)."""
    return {q: list(runs) for q, runs in pairs if runs}
