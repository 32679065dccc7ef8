"""The drill's accounting (``benchmarks/dr_drill_tally.py``): lost, gaps, reads twice charged to the move that
started their stint, the recovery times and the last line."""

from __future__ import annotations

from benchmarks.dr_drill_tally import (
    MOVES,
    Read,
    Stint,
    missed_targets,
    read_within,
    rto,
    summary_line,
    tally,
)

STINTS = [Stint(0, "A", "start", 1.0), Stint(1, "B", "switchover", 20.0), Stint(2, "A", "failback", 40.0),
          Stint(3, "B", "failover", 70.0), Stint(4, "A", "failback", 90.0)]


def reads(*pairs: tuple[str, int]) -> list[Read]:
    return [Read(key, float(i), stint) for i, (key, stint) in enumerate(pairs)]


def test_a_clean_run_counts_nothing() -> None:
    t = tally(["k1", "k2", "k3"], ["k1", "k2", "k3", "unacked"], reads(("k1", 0), ("k2", 1), ("k3", 2)), STINTS)
    assert (t.acknowledged, t.lost, t.gaps, t.read_twice_planned, t.read_twice_failover) == (3, 0, 0, 0, 0)
    assert set(t.read_twice) == set(MOVES)


def test_lost_is_acknowledged_and_absent_at_the_end_gaps_acknowledged_and_never_read() -> None:
    t = tally(["k1", "k2", "k3", "k4"], ["k1", "k3"], reads(("k1", 0), ("k2", 0), ("unacked", 1)), STINTS)
    assert (t.lost, t.gaps) == (2, 2)
    assert t.lost_sample == ("k2", "k4") and t.gap_sample == ("k3", "k4")


def test_a_read_again_is_charged_to_the_move_that_started_its_stint() -> None:
    log = reads(("a", 0), ("b", 0), ("a", 1),            # again after the switchover: planned
                ("c", 2), ("c", 3), ("d", 3), ("d", 3),  # after the failover, twice within its stint too
                ("b", 4))                               # after the second failback: planned
    t = tally(["a", "b", "c", "d"], ["a", "b", "c", "d"], log, STINTS)
    assert t.read_twice == {"start": 0, "failback": 1, "switchover": 1, "failover": 2}
    assert (t.read_twice_planned, t.read_twice_failover, t.gaps) == (2, 2, 0)


def test_a_read_again_within_the_first_stint_is_charged_to_neither() -> None:
    t = tally(["a"], ["a"], reads(("a", 0), ("a", 0)), STINTS)
    assert t.read_twice["start"] == 1 and (t.read_twice_planned, t.read_twice_failover) == (0, 0)


def test_rto_runs_from_the_fence_to_the_first_answer_on_the_other_side() -> None:
    assert rto(12.5, Stint(1, "B", "switchover", 13.0, first_answer_at=18.0)) == 5.5
    assert rto(None, STINTS[1]) is None
    assert rto(12.5, None) is None
    assert rto(12.5, Stint(1, "B", "switchover", 13.0)) is None


def test_read_within_counts_one_stints_reads_in_the_window() -> None:
    log = [Read("a", 1.0, 3), Read("b", 5.0, 3), Read("c", 9.0, 3), Read("d", 6.0, 4)]
    assert read_within(log, 3, 4.0, 9.0) == 2
    assert read_within(log, 3, 10.0, 20.0) == 0


def test_the_last_line_and_the_targets() -> None:
    t = tally(["a", "b"], ["a", "b"], reads(("a", 0), ("b", 0), ("b", 3)), STINTS)
    assert summary_line(6.25, 8.0, 120, 120, t) == (
        "dr drill: switchover rto 6.2 s, failback rto 8.0 s, failover rpo 120, recovered 120, lost 0, gaps 0, "
        "read twice planned 0, read twice failover 1")
    assert summary_line(6.0, None, None, None, t).startswith("dr drill: switchover rto 6.0 s, failback rto - s, "
                                                              "failover rpo -, recovered -,")
    assert missed_targets(6.0, 8.0, 120, 120, t, 1, rto_target_s=10) == []
    missed = missed_targets(11.0, 8.0, 120, 100, t, 0, rto_target_s=10)
    assert missed == ["switchover rto 11.0 s > 10 s", "recovered 100 < rpo 120",
                      "read twice failover 1 > 0 (read in one checkpoint interval before the kill)"]
    bad = tally(["a", "b", "c"], ["a"], reads(("a", 0), ("a", 1)), STINTS)
    assert missed_targets(None, None, None, None, bad, None, rto_target_s=10) == [
        "lost 2 > 0", "gaps 2 > 0", "read twice planned 1 > 0"]
