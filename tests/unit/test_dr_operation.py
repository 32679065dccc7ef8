"""The disaster-recovery operation state machine (``jobs.dr.operation``) with steps the test writes and the real
journal file (``jobs.dr.journal``): a crash at every point where the journal is written, then the same command
again, does every step's effect exactly once; refusals are retried from the refused step; abort undoes what
ran, newest first, and only while the operation is under way."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.clock import ManualClock
from broker_store.protocol.errors import RequestTimeoutError
from connectors.core.errors import TableError
from jobs.dr.journal import JOURNAL_FILE, FileJournal
from jobs.dr.operation import (
    Json,
    OperationConflictError,
    OperationRecord,
    OperationRunner,
    OperationState,
    Step,
    StepContext,
    StepRecord,
    StepRefusedError,
    StepState,
)
from jobs.dr.switchover import refusing_client_errors


class Crash(BaseException):
    """A kill -9 at a journal write: nothing after it runs (BaseException: no step or runner catches it)."""


class CrashingJournal(FileJournal):
    """The real journal file, crashing (before writing) at its ``crash_at``-th save."""

    def __init__(self, directory: Path, crash_at: int | None = None) -> None:
        super().__init__(directory)
        self.saves = 0
        self.crash_at = crash_at

    def save(self, record: OperationRecord) -> None:
        self.saves += 1
        if self.saves == self.crash_at:
            raise Crash
        super().save(record)


class World:
    """The effects of the fake steps: each step's effect is idempotent (a set), its runs are counted."""

    def __init__(self) -> None:
        self.effects: list[str] = []
        self.runs: dict[str, int] = {}
        self.undone: list[str] = []
        self.refuse: set[str] = set()

    def steps(self, names: list[str]) -> list[Step]:
        return [self.step(n) for n in names]

    def step(self, name: str) -> Step:
        def run(ctx: StepContext) -> Json:
            return self.run(name, ctx)

        def undo(record: StepRecord) -> None:
            self.undo(name, record)

        return Step(name, run, f"step {name}", undo=undo)

    def run(self, name: str, ctx: StepContext) -> Json:
        self.runs[name] = self.runs.get(name, 0) + 1
        if name in self.refuse:
            raise StepRefusedError(f"{name} blocked", "fix it and run again")
        if not ctx.progress:
            ctx.save({"before": len(self.effects)})
        if name not in self.effects:
            self.effects.append(name)
        return {"did": name, "earlier": sorted(ctx.results)}

    def undo(self, name: str, record: StepRecord) -> None:
        if name in self.effects:
            assert "before" in record.progress  # saved before the effect
            self.effects.remove(name)
            self.undone.append(name)


NAMES = ["preflight", "fence", "drain", "groups", "commit", "report"]


def runner(tmp_path: Path, crash_at: int | None = None) -> tuple[OperationRunner, CrashingJournal]:
    journal = CrashingJournal(tmp_path, crash_at)
    return OperationRunner(journal, ManualClock(), new_id=lambda: "op1"), journal


def test_runs_every_step_in_order_and_records_results(tmp_path: Path) -> None:
    world = World()
    op, journal = runner(tmp_path)
    record = op.run("switchover", "l", world.steps(NAMES))
    assert record.state is OperationState.DONE
    assert world.effects == NAMES and all(n == 1 for n in world.runs.values())
    assert record.step("commit").result == {"did": "commit", "earlier": sorted(NAMES[:4])}
    assert journal.load() == record
    assert (tmp_path / JOURNAL_FILE).exists() and (tmp_path / (JOURNAL_FILE + ".bak")).exists()


def test_a_crash_at_every_journal_write_then_resume_does_every_step_exactly_once(tmp_path: Path) -> None:
    # Count the writes of a clean run, then crash at each of them in turn.
    world = World()
    op, journal = runner(tmp_path / "clean")
    op.run("switchover", "l", world.steps(NAMES))
    total = journal.saves
    for crash_at in range(1, total + 1):
        world = World()
        directory = tmp_path / f"crash{crash_at}"
        op, _ = runner(directory, crash_at)
        with pytest.raises(Crash):
            op.run("switchover", "l", world.steps(NAMES))
        op, _ = runner(directory)  # the command again, in a new process
        record = op.run("switchover", "l", world.steps(NAMES))
        assert record.state is OperationState.DONE, crash_at
        assert world.effects == NAMES, crash_at
        assert all(s.state is StepState.DONE for s in record.steps)
        reruns = {n: c for n, c in world.runs.items() if c > 1}
        # at most the step the crash struck runs twice, and its (idempotent) effect is there once
        assert len(reruns) <= 1 and all(c == 2 for c in reruns.values()), (crash_at, world.runs)


@settings(max_examples=40, deadline=None)
@given(crashes=st.lists(st.integers(min_value=1, max_value=20), max_size=4))
def test_any_sequence_of_crashes_ends_with_every_step_done_once(tmp_path_factory: pytest.TempPathFactory,
                                                               crashes: list[int]) -> None:
    directory = tmp_path_factory.mktemp("ops")
    world = World()
    record = None
    for crash_at in [*crashes, None]:  # crash as given, until one run completes; then no crash
        op, _ = runner(directory, crash_at)
        try:
            record = op.run("switchover", "l", world.steps(NAMES))
            break
        except Crash:
            continue
    assert record is not None and record.state is OperationState.DONE
    assert world.effects == NAMES
    assert sum(world.runs.values()) <= len(NAMES) + len(crashes)


def test_a_refusal_is_recorded_and_the_next_run_retries_from_the_refused_step(tmp_path: Path) -> None:
    world = World()
    world.refuse.add("drain")
    op, journal = runner(tmp_path)
    with pytest.raises(StepRefusedError, match="drain blocked"):
        op.run("switchover", "l", world.steps(NAMES))
    stored = journal.load()
    assert stored is not None and stored.state is OperationState.RUNNING
    assert stored.step("drain").state is StepState.FAILED and stored.step("drain").error == \
        "drain blocked; fix it and run again"
    world.refuse.clear()
    record = op.run("switchover", "l", world.steps(NAMES))
    assert record.state is OperationState.DONE and world.effects == NAMES
    assert world.runs == {"preflight": 1, "fence": 1, "drain": 2, "groups": 1, "commit": 1, "report": 1}
    assert record.step("drain").attempts == 2


def test_another_command_is_refused_while_an_operation_is_under_way(tmp_path: Path) -> None:
    world = World()
    world.refuse.add("fence")
    op, _ = runner(tmp_path)
    with pytest.raises(StepRefusedError):
        op.run("switchover", "l", world.steps(NAMES))
    with pytest.raises(OperationConflictError, match="operation switchover op1 of link l is running"):
        op.run("failover", "l", world.steps(["a"]))


def test_abort_undoes_what_ran_newest_first_and_is_itself_resumable(tmp_path: Path) -> None:
    world = World()
    world.refuse.add("groups")
    op, journal = runner(tmp_path)
    with pytest.raises(StepRefusedError):
        op.run("switchover", "l", world.steps(NAMES))
    assert world.effects == ["preflight", "fence", "drain"]
    crash = CrashingJournal(tmp_path, crash_at=3)  # aborting, drain's undo recorded, crash at fence's record
    with pytest.raises(Crash):
        OperationRunner(crash, ManualClock()).abort("l", lambda kind: world.steps(NAMES))
    record = op.abort("l", lambda kind: world.steps(NAMES))
    assert record.state is OperationState.ABORTED
    assert world.undone == ["drain", "fence", "preflight"] and world.effects == []
    assert [s.state for s in record.steps] == [StepState.UNDONE] * 4 + [StepState.PENDING] * 2
    with pytest.raises(OperationConflictError, match="nothing to abort"):
        op.abort("l", lambda kind: world.steps(NAMES))
    # a new run after an abort is a new operation
    world.refuse.clear()
    assert op.run("switchover", "l", world.steps(NAMES)).state is OperationState.DONE


def test_a_finished_operation_cannot_be_aborted(tmp_path: Path) -> None:
    world = World()
    op, _ = runner(tmp_path)
    op.run("switchover", "l", world.steps(NAMES))
    with pytest.raises(OperationConflictError, match="is done: nothing to abort"):
        op.abort("l", lambda kind: world.steps(NAMES))
    assert world.undone == []


def test_a_damaged_journal_falls_back_to_its_copy_and_both_damaged_is_an_error(tmp_path: Path) -> None:
    world = World()
    op, journal = runner(tmp_path)
    record = op.run("switchover", "l", world.steps(NAMES))
    (tmp_path / JOURNAL_FILE).write_text("{torn")
    assert journal.load() == record
    (tmp_path / (JOURNAL_FILE + ".bak")).write_text("{torn")
    with pytest.raises(TableError, match="journal cannot be read"):
        journal.load()


def test_step_durations_come_from_the_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(wall=1000.0)

    def slow(ctx: StepContext) -> Json:
        clock.advance(2.5)
        return {}

    record = OperationRunner(FileJournal(tmp_path), clock).run("switchover", "l", [Step("a", slow)])
    assert record.step("a").duration_s == 2.5


def test_a_cluster_error_in_a_switchover_step_is_recorded_as_its_refusal(tmp_path: Path) -> None:
    def unreachable(ctx: StepContext) -> Json:
        raise RequestTimeoutError("127.0.0.1:9876 did not answer in 3 s")

    journal = FileJournal(tmp_path)
    with pytest.raises(StepRefusedError, match="step fence: a cluster request failed: .*did not answer"):
        OperationRunner(journal, ManualClock()).run("switchover", "l",
                                                    [Step("fence", refusing_client_errors(unreachable))])
    stored = journal.load()
    assert stored is not None and stored.step("fence").state is StepState.FAILED
    assert "run the same command again" in (stored.step("fence").error or "")
