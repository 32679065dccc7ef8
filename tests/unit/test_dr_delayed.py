"""The delayed messages waiting on A (jobs/dr/delayed.py): the waiting entries per broker group and level from the
schedule service's delay offsets and the schedule queues' ends, and the bound of their latest due time that
``switchover`` and ``status`` tell the operator to keep the forward link's job running until."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.store.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from jobs.dr.delayed import keep_link_line, waiting_on_a

READ_MS = 1_700_000_000_000


def test_the_entries_past_each_levels_delay_offset_wait_and_the_longest_level_bounds_the_due_time() -> None:
    waiting = waiting_on_a(READ_MS, DEFAULT_DELAY_LEVELS,
                           {"a-0": {1: 5, 3: 2}, "a-1": {4: 9}},
                           {"a-0": {1: 5, 2: 0, 3: 4}, "a-1": {1: 0, 4: 10}})
    assert [(w.broker, w.level, w.waiting) for w in waiting.levels] == [("a-0", 3, 2), ("a-1", 4, 1)]
    assert waiting.waiting == 3
    assert waiting.latest_due_ms == READ_MS + 30_000  # level 4 (30 s): stored before the read, due before this


def test_a_level_without_a_delay_offset_has_delivered_nothing_yet() -> None:
    waiting = waiting_on_a(READ_MS, DEFAULT_DELAY_LEVELS, {}, {"a-0": {2: 3}})
    assert waiting.waiting == 3 and waiting.latest_due_ms == READ_MS + 5_000


def test_nothing_waiting_has_no_due_time_and_says_so() -> None:
    waiting = waiting_on_a(READ_MS, DEFAULT_DELAY_LEVELS, {"a-0": {1: 4}}, {"a-0": {1: 4, 2: 0}})
    assert waiting.levels == () and waiting.latest_due_ms is None
    line = keep_link_line("AtoB", waiting.to_json())
    assert line.startswith("no delayed message waits on A") and "AtoB" in line


def test_a_delay_offset_past_the_queue_end_counts_nothing_never_negative() -> None:
    waiting = waiting_on_a(READ_MS, DEFAULT_DELAY_LEVELS, {"a-0": {1: 9}}, {"a-0": {1: 4}})
    assert waiting.waiting == 0 and waiting.latest_due_ms is None


def test_the_operator_line_names_the_link_the_count_and_the_time() -> None:
    waiting = waiting_on_a(READ_MS, DelayLevels.parse("1s 2m"), {"a-0": {}}, {"a-0": {2: 2}})
    assert waiting.to_json() == {"read_at_ms": READ_MS, "waiting": 2, "latest_due_ms": READ_MS + 120_000,
                                 "levels": [{"broker": "a-0", "level": 2, "delivered_up_to": 0, "end": 2,
                                             "waiting": 2}]}
    line = keep_link_line("AtoB", waiting.to_json())
    assert line.startswith("2 delayed message(s) wait on A")
    assert "keep the job of link AtoB running until 2023-11-14 22:15:20 UTC" in line


@given(st.dictionaries(st.integers(1, 20), st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=20))
def test_the_bound_is_never_earlier_than_any_waiting_entrys_due_time(table: dict[int, tuple[int, int]]) -> None:
    """Every waiting entry of level L was stored before the read: due at most read + delay(L) (levels above the
    table wait the longest delay, as the broker caps them)."""
    levels = DEFAULT_DELAY_LEVELS
    waiting = waiting_on_a(READ_MS, levels, {"a": {lv: off for lv, (off, _) in table.items()}},
                           {"a": {lv: end for lv, (_, end) in table.items()}})
    assert waiting.waiting == sum(max(0, end - off) for off, end in table.values())
    for w in waiting.levels:
        assert waiting.latest_due_ms is not None
        assert waiting.latest_due_ms >= READ_MS + levels.delay_ms(levels.cap(w.level))


def test_status_and_recover_print_what_waits_and_until_when(capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.dr.cli import print_recover_report, print_status
    from jobs.dr.operation import OperationRecord, OperationState, StepRecord, StepState
    from jobs.dr.status import link_status

    delayed = waiting_on_a(READ_MS, DEFAULT_DELAY_LEVELS, {"a-0": {3: 1}}, {"a-0": {3: 3}}).to_json()
    status = replace(link_status("L", READ_MS / 1000, [], {}, {}, {}, {}), delayed=delayed)
    print_status(status)
    out = capsys.readouterr().out
    assert "a-0" in out and out.rstrip().splitlines()[-1] == keep_link_line("L", delayed)
    assert status.to_json()["delayed_waiting"] == delayed
    report = {"queues": [], "recovered": 0, "lost_to_retention": 0, "quarantine": False, "audited": None,
              "delayed": delayed}
    record = OperationRecord("op", "recover", "L", OperationState.DONE, 0.0,
                             (StepRecord("report", StepState.DONE, result=report),))
    print_recover_report(record)
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("2 delayed message(s) still wait on A") and "2023-11-14 22:13:30 UTC" in last
    print_recover_report(replace(record, steps=(StepRecord("report", StepState.DONE, result={
        **report, "delayed": waiting_on_a(READ_MS, DEFAULT_DELAY_LEVELS, {}, {}).to_json()}),)))
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("no delayed message waits on A")
