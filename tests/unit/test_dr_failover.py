"""The failover's pure parts and its step machine without sockets: the recovery-point audit's arithmetic
(``jobs.dr.rpo``), the source max offsets record the replication job keeps (``connectors.replication.
source_maxes``: written only when a max offset changed or the record is due), the link's stop marker, the
group offsets a failover commits (never past the replicated data), and the failover's steps over fake ends on a
hand-driven clock: the stop waits until the link's commits settle, and a crash at every journal write followed
by the same command does each step's effect once."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from broker_store.clock import poll
from connectors.checkpoint.snapshot import GroupOffset
from connectors.checkpoint.translation import OffsetTranslator, Outcome, Run
from connectors.replication.link_stop import LinkStop, is_stopped, read_stop, resume_link, stop_link
from connectors.replication.source_maxes import (
    RECORD_FILE,
    ObservedQueue,
    SourceMaxes,
    SourceMaxRecorder,
    next_record,
    read_source_maxes,
)
from jobs.dr.failover import Failover, FailoverSettings, group_starts, newest_checkpoints
from jobs.dr.journal import FileJournal
from jobs.dr.operation import Json, OperationRunner, OperationState, StepContext, StepRefusedError, StepState
from jobs.dr.rpo import audit
from tests.unit.test_dr_operation import Crash, CrashingJournal

Q0, Q1, Q2 = (MessageQueue("T", "b0", 0), MessageQueue("T", "b0", 1), MessageQueue("T", "b1", 0))
OTHER = MessageQueue("U", "b0", 0)


class TickClock:
    """A ThreadClock whose ``block`` advances it (one thread: the step's own wait)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall + self.now

    def block(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, cond: Any, timeout: float) -> None:
        self.now += timeout


def record(cluster: str = "A", **queues: tuple[int, int, float]) -> SourceMaxes:
    by = {"q0": Q0, "q1": Q1, "q2": Q2, "other": OTHER}
    return SourceMaxes(cluster, max(o[2] for o in queues.values()),
                       {by[k]: ObservedQueue(*v) for k, v in queues.items()})


# -- the audit ------------------------------------------------------------------------------------------------


def test_the_audit_counts_what_a_acknowledged_beyond_the_replicated_point_per_queue() -> None:
    rec = record(q0=(0, 100, 50.0), q1=(0, 40, 55.0), q2=(10, 30, 52.0))
    result = audit({Q0: 70, Q1: 45}, rec)
    by_queue = {q.queue: q for q in result.queues}
    assert by_queue[Q0].missing == 30
    assert by_queue[Q1].missing == 0  # replicated past the record (older than the link's last commit): never < 0
    assert by_queue[Q2].missing == 20  # recorded, never replicated: from the first offset A held
    assert result.missing == 50
    assert result.unknown == []
    assert (result.oldest_observation, result.newest_observation, result.recorded_at) == (50.0, 55.0, 55.0)


def test_a_queue_never_observed_is_unknown_not_zero_and_no_record_bounds_nothing() -> None:
    result = audit({Q0: 70, Q1: 5}, record(q0=(0, 90, 10.0)))
    assert [q.queue for q in result.unknown] == [Q1]
    assert result.missing == 20
    assert result.to_json()["unknown_queues"] == ["T/b0/1"]
    empty = audit({Q0: 70}, None)
    assert empty.missing == 0 and [q.queue for q in empty.unknown] == [Q0] and empty.recorded_at is None
    assert "unknown" in empty.to_json()["unknown_after"]


def test_the_audit_keeps_only_the_topics_asked_for() -> None:
    result = audit({Q0: 1, OTHER: 1}, record(q0=(0, 3, 1.0), other=(0, 9, 1.0)), topics=["T"])
    assert [q.queue for q in result.queues] == [Q0] and result.missing == 2


# -- the record of A's max offsets ----------------------------------------------------------------------------


def test_the_record_is_written_when_a_max_offset_changed_or_it_is_due_and_keeps_queues_not_read() -> None:
    first = next_record(None, "A", {Q0: (0, 10), Q1: (0, 5)}, 100.0)
    assert first is not None and first.queues[Q0] == ObservedQueue(0, 10, 100.0)
    assert next_record(first, "A", {Q0: (0, 10), Q1: (0, 5)}, 130.0, refresh_s=60) is None  # unchanged, not due
    due = next_record(first, "A", {Q0: (0, 10), Q1: (0, 5)}, 160.0, refresh_s=60)
    assert due is not None and due.queues[Q0].observed_at == 160.0  # fresh time: "A still held 10 at 160"
    changed = next_record(first, "A", {Q0: (2, 12)}, 101.0)  # Q1's broker group did not answer this trigger
    assert changed is not None
    assert changed.queues == {Q0: ObservedQueue(2, 12, 101.0), Q1: ObservedQueue(0, 5, 100.0)}
    new_queue = next_record(first, "A", {Q0: (0, 10), Q1: (0, 5), Q2: (0, 0)}, 101.0)
    assert new_queue is not None and Q2 in new_queue.queues
    other = next_record(first, "B", {Q0: (0, 10)}, 101.0)  # another source cluster: nothing of the old kept
    assert other is not None and set(other.queues) == {Q0}


def test_the_recorder_writes_the_file_once_per_change_and_reads_back(tmp_path: Path) -> None:
    clock = TickClock()
    recorder = SourceMaxRecorder(tmp_path, "A", clock, refresh_s=60)
    assert read_source_maxes(tmp_path) is None
    assert recorder.observe({Q0: (0, 10)}) is True
    assert recorder.observe({Q0: (0, 10)}) is False
    clock.now += 1
    assert recorder.observe({Q0: (0, 11)}) is True
    back = read_source_maxes(tmp_path)
    assert back is not None and back.queues[Q0] == ObservedQueue(0, 11, clock.time())
    # a new reader (the job restarted) starts from the file: unchanged maxes are not written again
    assert SourceMaxRecorder(tmp_path, "A", clock, refresh_s=60).observe({Q0: (0, 11)}) is False


def test_a_record_that_cannot_be_written_is_logged_and_replication_goes_on(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "file").write_text("not a directory")
    recorder = SourceMaxRecorder(tmp_path / "file", "A", TickClock())
    assert recorder.observe({Q0: (0, 1)}) is False
    assert "could not be recorded" in caplog.text
    (tmp_path / RECORD_FILE).write_text("{not json")
    with pytest.raises(Exception, match="source max offsets record cannot be read"):
        read_source_maxes(tmp_path)


def test_the_stop_marker_round_trips_and_is_removed_idempotently(tmp_path: Path) -> None:
    assert not is_stopped(tmp_path) and read_stop(tmp_path) is None
    stop_link(tmp_path, LinkStop("op1", "failover", 5.0))
    stop_link(tmp_path, LinkStop("op1", "failover", 5.0))
    assert is_stopped(tmp_path) and read_stop(tmp_path) == LinkStop("op1", "failover", 5.0)
    resume_link(tmp_path)
    resume_link(tmp_path)
    assert not is_stopped(tmp_path) and read_stop(tmp_path) is None


# -- the groups' offsets --------------------------------------------------------------------------------------


def test_a_group_offset_beyond_the_replicated_point_is_lowered_to_it_nothing_on_b_skipped() -> None:
    start = group_starts({"g": [GroupOffset("g", Q0, 90), GroupOffset("g", Q1, 3)], "h": [GroupOffset("h", Q2, 7)]},
                         {Q0: 70, Q1: 5})
    assert start.offsets == (GroupOffset("g", Q0, 70), GroupOffset("g", Q1, 3), GroupOffset("h", Q2, 7))
    assert start.lowered == (("g", Q0, 90, 70),)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.integers(1, 7), min_size=1, max_size=12), crossed_batches=st.integers(0, 12),
       at_snapshot=st.integers(0, 100), since=st.integers(0, 30), target_start=st.integers(0, 50))
def test_failover_from_a_partial_checkpoint_skips_nothing_and_re_reads_only_what_came_after_it(
        batches: list[int], crossed_batches: int, at_snapshot: int, since: int, target_start: int) -> None:
    """The link crossed its first batches (one run each) and stopped; the group's newest checkpoint read it at
    ``at_snapshot`` on A (ahead of the link or not), then it consumed ``since`` more before A died. Failing
    over from that checkpoint: nothing that crossed and the group had not consumed is skipped on B, and it
    re-reads on B only messages it consumed after the checkpoint (at most one checkpoint interval's worth)."""
    translator, truth, source, target = OffsetTranslator(), {}, 0, target_start
    for n in batches[:crossed_batches]:
        translator.add(Q0, Run(source, source + n - 1, OTHER, target, target + n - 1, n))
        truth.update({source + i: target + i for i in range(n)})
        source, target = source + n, target + n
    replicated = source
    start = group_starts({"g": [GroupOffset("g", Q0, at_snapshot)]}, {Q0: replicated})
    (offset,) = start.offsets
    t = translator.translate(Q0, offset.offset, replicated)
    if not truth:
        assert t.outcome is Outcome.UNMAPPED
        return
    assert t.outcome is Outcome.TRANSLATED and t.target_offset is not None
    killed_at = at_snapshot + since  # the group's position on A when A died
    assert all(b >= t.target_offset for a, b in truth.items() if a >= at_snapshot)  # nothing skipped
    re_read = [a for a, b in truth.items() if b >= t.target_offset and a < killed_at]
    assert all(a >= at_snapshot for a in re_read) and len(re_read) <= since


def test_each_groups_newest_complete_checkpoint_is_taken() -> None:
    from datetime import UTC, datetime

    def at(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    rows = [
        {"group": "g", "source_topic": "T", "source_broker": "b0", "source_queue_id": 0, "source_offset": 5,
         "snapshot_at": at(1000)},
        {"group": "g", "source_topic": "T", "source_broker": "b0", "source_queue_id": 0, "source_offset": 9,
         "snapshot_at": at(2000)},
        {"group": "g", "source_topic": "", "source_broker": "b1", "source_queue_id": -1, "source_offset": -1,
         "snapshot_at": at(2000)},  # a condition row
        {"group": "h", "source_topic": "T", "source_broker": "b0", "source_queue_id": 1, "source_offset": 4,
         "snapshot_at": at(1000)},
    ]
    got = newest_checkpoints(rows, {"g": 2000, "h": 1000, "none": None}, ["g", "h", "none"])
    assert got == {"g": [GroupOffset("g", Q0, 9)], "h": [GroupOffset("h", Q1, 4)]}


# -- the steps ------------------------------------------------------------------------------------------------


@dataclass
class FakeCluster:
    name: str
    namesrv: list[str]


@dataclass
class FakeLink:
    name: str
    tables_location: Path


class FakeAdmin:
    def __init__(self, answers: bool = True) -> None:
        self.answers = answers

    def cluster_info(self) -> object:
        if not self.answers:
            from broker_store.protocol.errors import RequestTimeoutError
            raise RequestTimeoutError("no answer")
        return object()

    def primary_addrs(self, cluster: str) -> dict[str, str]:
        return {"b0": "127.0.0.1:1"}

    def all_delay_offsets(self, addr: str) -> dict[int, int]:
        self.cluster_info()
        return {}


@dataclass
class FakeEnds:
    """What the failover's steps read of ``LinkEnds``: B answers; the link's committed point moves as told."""

    tables: Path
    clock: TickClock = field(default_factory=TickClock)
    points: list[dict[MessageQueue, int]] = field(default_factory=list)
    a: FakeAdmin = field(default_factory=lambda: FakeAdmin(False))
    b: FakeAdmin = field(default_factory=FakeAdmin)
    source: FakeCluster = field(default_factory=lambda: FakeCluster("A", ["127.0.0.1:9876"]))
    target: FakeCluster = field(default_factory=lambda: FakeCluster("B", ["127.0.0.1:9877"]))

    def __post_init__(self) -> None:
        self.link = FakeLink("L", self.tables)

    def replicated(self) -> dict[MessageQueue, int]:
        return self.points.pop(0) if len(self.points) > 1 else self.points[0]


def failover(ends: FakeEnds, settings: FailoverSettings | None = None) -> Failover:
    return Failover(ends, settings or FailoverSettings(settle_s=2.0, settle_timeout_s=10.0, poll_s=0.5))  # type: ignore[arg-type]


def test_the_gate_refuses_while_a_answers_unless_forced(tmp_path: Path) -> None:
    ends = FakeEnds(tmp_path, points=[{}], a=FakeAdmin(True))
    with pytest.raises(StepRefusedError, match="broker group b0 of A at 127.0.0.1:1 answers.*--force"):
        failover(ends).gate()
    failover(ends, FailoverSettings(force=True)).gate()
    failover(FakeEnds(tmp_path, points=[{}])).gate()  # A silent: no refusal


def test_the_stop_waits_until_the_links_commits_settle(tmp_path: Path) -> None:
    ends = FakeEnds(tmp_path, points=[{Q0: 5}, {Q0: 6}, {Q0: 8}, {Q0: 8}])
    steps = {s.name: s for s in failover(ends).steps()}
    result = OperationRunner(FileJournal(tmp_path), ends.clock).run(
        "failover", "L", [replace(steps["stop"])]).step("stop").result
    assert result == {"replicated": {"T/b0/0": 8}}
    assert is_stopped(tmp_path)
    assert ends.clock.now - 1000.0 >= 2.0  # it waited the settle time after the last change


def test_the_stop_refuses_while_the_link_keeps_committing(tmp_path: Path) -> None:
    ends = FakeEnds(tmp_path, points=[{Q0: i} for i in range(100)])
    steps = {s.name: s for s in failover(ends).steps()}
    with pytest.raises(StepRefusedError, match="still moves 10 s after the stop"):
        OperationRunner(FileJournal(tmp_path), ends.clock).run("failover", "L", [steps["stop"]])


def test_a_crash_at_every_journal_write_then_the_same_command_commits_once_and_keeps_the_audit(
        tmp_path: Path) -> None:
    def run_all(directory: Path, crash_at: int | None, commits: list[Json]) -> tuple[CrashingJournal, Any]:
        ends = FakeEnds(directory, points=[{Q0: 70, Q1: 5}])
        SourceMaxRecorder(directory, "A", ends.clock).observe({Q0: (0, 100), Q1: (0, 5)})
        steps = failover(ends).steps()

        def commit(ctx: StepContext) -> Json:
            commits.append(ctx.results["audit"])
            return {"groups": {}, "lowered": []}

        steps = [replace(s, run=commit) if s.name == "commit" else s for s in steps]
        journal = CrashingJournal(directory, crash_at)
        return journal, OperationRunner(journal, ends.clock).run("failover", "L", steps)

    clean_commits: list[Json] = []
    journal, _ = run_all(tmp_path / "clean", None, clean_commits)
    writes = journal.saves
    for crash_at in range(1, writes + 1):
        directory = tmp_path / f"crash{crash_at}"
        commits: list[Json] = []
        with pytest.raises(Crash):
            run_all(directory, crash_at, commits)
        _, record = run_all(directory, None, commits)
        assert record.state is OperationState.DONE
        assert all(s.state is StepState.DONE for s in record.steps)
        assert len(commits) <= 2 and commits[-1]["missing"] == 30  # commit is idempotent; it ran at most twice
        report = record.step("report").result
        assert report["audit"]["missing"] == 30 and report["audit"]["queues"][0]["last_seen"] == 100
        assert is_stopped(directory)


def test_poll_returns_the_first_answer_or_none_at_the_deadline() -> None:
    clock = TickClock()
    answers: list[int | None] = [None, None, 3]
    waits: list[float] = []
    got = poll(clock, lambda: answers.pop(0), 10, 1, lambda: waits.append(clock.now))
    assert got == 3 and waits == [1000.0, 1001.0]
    calls: list[float] = []

    def never() -> int | None:
        calls.append(clock.now)
        return None

    assert poll(clock, never, 2.5, 1) is None
    assert calls == [1002.0, 1003.0, 1004.0, 1004.5]  # at least once, and once more at the deadline


def test_abort_of_an_unfinished_failover_removes_the_stop_marker(tmp_path: Path) -> None:
    ends = FakeEnds(tmp_path, points=[{Q0: 5}])
    steps = failover(ends).steps()
    runner = OperationRunner(FileJournal(tmp_path), ends.clock)

    def refuse(ctx: StepContext) -> Json:
        raise StepRefusedError("a group is online on B", "stop it")

    with pytest.raises(StepRefusedError):
        runner.run("failover", "L", [replace(s, run=refuse) if s.name == "commit" else s for s in steps])
    assert is_stopped(tmp_path)
    record = runner.abort("L", lambda kind: steps)
    assert record.state is OperationState.ABORTED and not is_stopped(tmp_path)


def test_status_prints_the_recovery_point_from_the_jobs_record(capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.dr.cli import print_status
    from jobs.dr.status import link_status

    status = link_status("L", 1_700_000_100.0, [Q0], {Q0: 10}, {Q0: 4}, {"T": "T"}, {})
    print_status(status)
    assert "has not recorded A's max offsets yet" in capsys.readouterr().out
    print_status(replace(status, recorded_rpo=6, recorded_at=1_700_000_090.0))
    assert "from the job's own record (a failover's audit): at least 6 message(s), A observed 10.0 s ago" in \
        capsys.readouterr().out
