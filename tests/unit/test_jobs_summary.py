"""A link's summary line counts what reached the target: a job stopped right after a batch's sends, whose
batch was then aborted and so never committed, says those messages are on the target instead of "0 messages"."""

from __future__ import annotations

from connectors.replication.batch_commit import aborted_on_target, record_aborted
from jobs.replicate import summary_line

TOTAL = {"messages": 0, "bytes": 0, "batches": 0, "skipped_loop": 0, "failed": 0}


def test_aborted_sends_are_counted_per_link() -> None:
    before = aborted_on_target("summary-l1")
    record_aborted("summary-l1", 10)
    record_aborted("summary-l1", 5)
    assert aborted_on_target("summary-l1") == before + 15
    assert aborted_on_target("summary-other") == 0


def test_the_summary_names_messages_of_aborted_batches_on_the_target() -> None:
    assert summary_line("l1", TOTAL, 10, failed=False) == (
        "link l1 done: 0 messages (0 bytes) replicated in 0 committed batch(es) + 10 sent to the target by "
        "batch(es) stopped before their commit (sent again when the link resumes), 0 skipped by the loop guard, "
        "0 failed")
    committed = {**TOTAL, "messages": 3000, "bytes": 3_000_000, "batches": 3, "failed": 2}
    assert summary_line("l1", committed, 0, failed=True) == (
        "link l1 stopped after an error: 3000 messages (3000000 bytes) replicated in 3 committed batch(es), "
        "0 skipped by the loop guard, 2 failed")
