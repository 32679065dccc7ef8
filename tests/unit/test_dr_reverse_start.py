"""``jobs.dr.reverse_start``: the reverse link's exact start after a switchover with ``--reverse`` (pure), and its
``hold`` / ``reverse`` steps over a link's real tables and stop marker, with the clusters left out."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from broker_store.client import MessageQueue
from broker_store.clock import ManualClock
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from connectors.checkpoint.translation import Run
from connectors.replication.link_stop import LinkStop, read_stop, stop_link
from connectors.replication.tables import LinkTables
from jobs.dr.link_ends import LinkEnds
from jobs.dr.operation import OperationRecord, OperationState, StepContext, StepRecord, StepState
from jobs.dr.reverse_start import ReverseStandby, ReverseStart, copy_spans, reverse_starts
from jobs.dr.switchover import Switchover, SwitchoverSettings
from tests.unit.test_dr_failback import Perms

B0, B1, B2 = (MessageQueue("T", "b", i) for i in range(3))
A0 = MessageQueue("T", "a", 0)


def run(first: int, last: int, target: MessageQueue, t_first: int, t_last: int, messages: int | None = None,
        summary: bool = False) -> Run:
    return Run(first, last, target, t_first, t_last, t_last - t_first + 1 if messages is None else messages, summary)


def test_a_summary_run_with_fewer_messages_than_offsets_does_not_count_as_copies() -> None:
    spans = copy_spans([run(0, 9, B0, 0, 9), run(10, 19, B0, 12, 21), run(0, 50, B1, 0, 60, messages=40,
                                                                            summary=True),
                        run(0, 50, B2, 0, 50, messages=51, summary=True)])
    assert spans == {B0: [(0, 9), (12, 21)], B2: [(0, 50)]}


def test_the_start_skips_exactly_the_leading_copies_of_as_messages() -> None:
    copies = {B0: [(0, 99)], B1: [(0, 49), (50, 79)], B2: [(0, 9), (20, 29)]}
    b_min = {B0: 0, B1: 0, B2: 0}
    starts = reverse_starts([B2, B0, B1], {}, b_min, {B0: 100, B1: 90, B2: 30}, copies)
    assert starts == [ReverseStart(B0, 100, 0, 100),   # all copies: B's end
                      ReverseStart(B1, 80, 0, 90),     # 80..89 born on B (a producer moved early): read
                      ReverseStart(B2, 10, 0, 30)]     # 10..19 not a copy: read from there, copies after skipped
    assert [s.skipped for s in starts] == [100, 80, 10]


def test_the_start_is_never_below_the_resume_point_nor_past_bs_end() -> None:
    copies = {B0: [(0, 99)], B1: [(0, 99)]}
    starts = reverse_starts([B0, B1, B2], {B0: 120, B1: 40}, {B0: 0, B1: 0, B2: 5}, {B0: 130, B1: 70, B2: 9}, copies)
    assert [(s.queue, s.start, s.resume) for s in starts] == [(B0, 120, 120), (B1, 70, 40), (B2, 5, 5)]


def ends(tmp_path: Path, name: str, clock: ManualClock) -> LinkEnds:
    location = tmp_path / name
    return cast(LinkEnds, SimpleNamespace(link=SimpleNamespace(name=name, tables_location=location), clock=clock,
                                          tables=LinkTables(location, source_cluster="B")))


def context(record: OperationRecord, step: str, progress: dict[str, Any] | None = None) -> StepContext:
    saved: list[dict[str, Any]] = []
    return StepContext(record, record.step(step), dict(progress or {}), saved.append)


def record(*steps: StepRecord) -> OperationRecord:
    return OperationRecord("op1", "switchover", "F", OperationState.RUNNING, 0.0, steps)


def test_hold_stops_the_reverse_link_and_abort_puts_back_what_was_there(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    standby = ReverseStandby(ends(tmp_path, "F", clock), ends(tmp_path, "R", clock))
    rec = record(StepRecord("hold", StepState.RUNNING))
    result = standby.hold(context(rec, "hold"))
    stop = read_stop(tmp_path / "R")
    assert stop is not None and stop.operation == "op1" and "held until A is the standby" in stop.reason
    assert result == {"reverse_link": "R", "previous": None}
    standby.unhold(StepRecord("hold", StepState.DONE, result=result))
    assert read_stop(tmp_path / "R") is None
    stop_link(tmp_path / "R", LinkStop("op0", "held by the operator", 5.0))  # a hold before the switchover
    ctx = context(rec, "hold")
    result = standby.hold(ctx)
    assert result["previous"] == {"operation": "op0", "reason": "held by the operator", "stopped_at": 5.0}
    standby.unhold(StepRecord("hold", StepState.RUNNING, progress=ctx.progress))  # crashed before done
    assert read_stop(tmp_path / "R") == LinkStop("op0", "held by the operator", 5.0)


def test_reverse_commits_the_start_once_reopens_a_and_releases_the_link_and_a_rerun_keeps_the_start(
        tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    standby = ReverseStandby(ends(tmp_path, "F", clock), ends(tmp_path, "R", clock))
    standby.starts = lambda: [ReverseStart(B0, 100, 0, 100), ReverseStart(B1, 80, 0, 90)]  # type: ignore[method-assign]
    stop_link(tmp_path / "R", LinkStop("op1", "held", 1.0))
    perms = Perms()
    old = {"a": {"T": PERM_READ | PERM_WRITE}}
    rec = record(StepRecord("reverse", StepState.RUNNING))
    ctx = context(rec, "reverse")
    result = standby.start_reverse(ctx, old, perms)
    assert LinkTables(tmp_path / "R", source_cluster="B").latest_offsets() == {B0: 100, B1: 80}
    assert perms.set == {("a", "T"): PERM_READ | PERM_WRITE} and read_stop(tmp_path / "R") is None
    assert result["skipped"] == 180 and result["reverse_link"] == "R"

    def moved_on() -> list[ReverseStart]:
        raise AssertionError("the start is decided once")

    standby.starts = moved_on  # type: ignore[method-assign]
    again = standby.start_reverse(context(rec, "reverse", ctx.progress), old, perms)  # a crash after the release
    assert again == result
    assert LinkTables(tmp_path / "R", source_cluster="B").committed_batch("dr-switchover-op1") == 0
    standby.stop_reverse(StepRecord("reverse", StepState.DONE, result=result), old, perms)
    assert perms.set == {("a", "T"): PERM_READ} and read_stop(tmp_path / "R") is not None


def test_with_reverse_the_switchover_holds_first_and_starts_the_reverse_link_after_the_commit(
        tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    plain = Switchover(ends(tmp_path, "F", clock), SwitchoverSettings())
    assert [s.name for s in plain.steps()] == ["preflight", "fence", "drain", "groups", "commit", "report"]
    standby = ReverseStandby(ends(tmp_path, "F", clock), ends(tmp_path, "R", clock))
    switchover = Switchover(ends(tmp_path, "F", clock), SwitchoverSettings(), standby=standby)
    steps = switchover.steps()
    assert [s.name for s in steps] == ["preflight", "hold", "fence", "drain", "groups", "commit", "reverse", "report"]
    assert {s.name for s in steps if s.undo is not None} == {"hold", "fence", "reverse"}


@pytest.mark.parametrize("lag", [0, 10_000])
def test_the_default_lag_gate_lets_ten_seconds_of_a_thousand_messages_a_second_through(lag: int) -> None:
    assert lag <= SwitchoverSettings().max_lag


def test_a_resumed_or_aborted_switchover_finds_the_reverse_link_its_hold_step_recorded() -> None:
    from jobs.dr.cli import _held_link

    assert _held_link(None) is None
    assert _held_link(record(StepRecord("preflight"), StepRecord("fence"))) is None  # no --reverse
    assert _held_link(record(StepRecord("hold"))) is None  # nothing held yet
    assert _held_link(record(StepRecord("hold", StepState.RUNNING, progress={"reverse_link": "R"}))) == "R"
    assert _held_link(record(StepRecord("hold", StepState.DONE, result={"reverse_link": "R2"}))) == "R2"


def test_the_report_shows_where_the_reverse_link_starts(capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.dr.cli import print_report

    report = {"queues": [], "groups": {}, "durations_s": {"hold": 0.0, "reverse": 0.4}, "operator": "moved",
              "reverse": {"reverse_link": "R", "skipped": 180, "queues": [
                  {"queue": ["T", "b", 0], "start": 100, "resume": 0, "end": 100}]}}
    print_report(record(StepRecord("hold", StepState.DONE), StepRecord("reverse", StepState.DONE),
                        StepRecord("report", StepState.DONE, result=report)))
    out = capsys.readouterr().out
    assert "reverse link R starts on B at" in out and "180 copies of A's messages not read again" in out
    assert "T/b/0" in out and "steps: hold 0.0 s, reverse 0.4 s" in out


def test_a_switchover_under_way_keeps_the_shape_it_was_started_with() -> None:
    from argparse import Namespace

    from jobs.dr.cli import _reverse_for
    from jobs.dr.operation import OperationConflictError

    def args(command: str, reverse: str | None) -> Namespace:
        return Namespace(command=command, reverse=reverse)

    plain = record(StepRecord("preflight", StepState.DONE), StepRecord("fence", StepState.RUNNING))
    held = record(StepRecord("preflight", StepState.DONE),
                  StepRecord("hold", StepState.DONE, result={"reverse_link": "R"}))
    fresh = record(StepRecord("preflight", StepState.FAILED), StepRecord("hold"))
    assert _reverse_for(args("switchover", None), "F", None) is None
    assert _reverse_for(args("switchover", ""), "F", None) == ""
    assert _reverse_for(args("switchover", "R"), "F", None) == "R"
    assert _reverse_for(args("switchover", None), "F", plain) is None
    with pytest.raises(OperationConflictError, match="under way without --reverse"):
        _reverse_for(args("switchover", "R"), "F", plain)
    assert _reverse_for(args("switchover", None), "F", held) == "R"  # resumed as it was started
    with pytest.raises(OperationConflictError, match="with --reverse R, not R2"):
        _reverse_for(args("switchover", "R2"), "F", held)
    assert _reverse_for(args("switchover", None), "F", fresh) == ""  # refused in preflight: the only one
    assert _reverse_for(args("abort", None), "F", held) == "R"
    assert _reverse_for(args("abort", None), "F", fresh) is None
