"""Shared target queues (docs/replicator.md, "Checkpoints and config sync"): where several source queues feed one target
queue the checkpoint never skips (the minimum), marks the rows "shared: may re-read" (inexact) and reports the group
once; a link whose target queues each have one source queue marks nothing. No socket: the target is a fake Admin."""

from __future__ import annotations

import logging
from typing import cast

from broker_store.client import Admin, MessageQueue
from connectors.checkpoint.committer import SHARED, CheckpointCommitter
from connectors.checkpoint.link_state import LinkProgress
from connectors.checkpoint.snapshot import GroupOffset, GroupOffsetSnapshot
from connectors.checkpoint.tables import SHARED_DETAIL, CheckpointOutcome
from connectors.checkpoint.translation import OffsetTranslator, Run

A0, B0 = MessageQueue("Orders", "src-a", 0), MessageQueue("Orders", "src-b", 0)
T0, T1 = MessageQueue("Orders", "dst", 0), MessageQueue("Orders", "dst", 1)


class FakeTarget:
    """The target Admin calls of the committer: no consumer online, offsets kept in a dict."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}

    def consumer_list(self, group: str, topic: str) -> list[str]:
        return []

    def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        return self.offsets.get((group, mq.queue_id))

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self.offsets[(group, mq.queue_id)] = offset


def _committer(runs: list[tuple[MessageQueue, Run]]) -> tuple[FakeTarget, CheckpointCommitter]:
    target = FakeTarget()
    progress = LinkProgress(OffsetTranslator(runs), {A0: 10, B0: 10}, len(runs))
    return target, CheckpointCommitter(link="l", source_cluster="src", target_cluster="dst",
                                       target_admin=cast(Admin, target), target_producer=None,
                                       progress=lambda: progress)


def _snapshot(a: int, b: int) -> GroupOffsetSnapshot:
    return GroupOffsetSnapshot(1, (GroupOffset("app", A0, a), GroupOffset("app", B0, b)))


# A0's and B0's messages interleaved in T0, five at a time: A0 0-4 -> 0-4, B0 0-4 -> 5-9, A0 5-9 -> 10-14, ...
INTERLEAVED = [(A0, Run(0, 4, T0, 0, 4, 5)), (B0, Run(0, 4, T0, 5, 9, 5)), (A0, Run(5, 9, T0, 10, 14, 5)),
               (B0, Run(5, 9, T0, 15, 19, 5))]


def test_feeders_name_every_source_queue_of_a_target_queue_even_after_folding() -> None:
    translator = OffsetTranslator(INTERLEAVED)
    assert translator.feeders(T0) == {A0, B0} and translator.feeders(T1) == frozenset()
    translator.forget_below({A0: 9, B0: 9})
    assert translator.feeders(T0) == {A0, B0}


def test_a_shared_target_queue_never_skips_and_is_marked_and_reported_once() -> None:
    target, committer = _committer(INTERLEAVED)
    first = committer.apply(_snapshot(7, 3))
    # A0 at 7 -> 12, B0 at 3 -> 8: the minimum, so B0's 3, 4 and A0's 5, 6 (target 8..11) are not skipped;
    # the group re-reads A0's 5 and 6, which it had consumed on the source
    assert target.offsets == {("app", 0): 8}
    rows = first.rows
    assert {r.outcome for r in rows} == {CheckpointOutcome.COMMITTED}
    assert all(not r.exact and r.detail.startswith(SHARED_DETAIL) for r in rows)
    assert "src-a" in rows[0].detail and "src-b" in rows[0].detail
    level, line = first.log_line()
    assert level == logging.WARNING and f"{SHARED} app: {SHARED_DETAIL}: target queue(s) Orders/dst/0" in line
    again_level, again = committer.apply(_snapshot(9, 9)).log_line()
    assert again_level == logging.INFO and "1 problem(s) standing" in again


def test_one_source_queue_per_target_queue_marks_nothing() -> None:
    target, committer = _committer([(A0, Run(0, 9, T0, 0, 9, 10)), (B0, Run(0, 9, T1, 0, 9, 10))])
    report = committer.apply(_snapshot(7, 3))
    assert target.offsets == {("app", 0): 7, ("app", 1): 3}
    assert all(r.exact and not r.detail.startswith(SHARED_DETAIL) for r in report.rows)
    assert report.log_line()[0] == logging.INFO and not report.shared()
