"""The failback's plan (``jobs.dr.failback``) without clusters: which reverse link it takes, its steps (the
switchover's over the reverse link, and its own), the permissions it gives A back (the switchover's saved ones)
and what ``abort`` puts back. The steps against real clusters: tests/spark/test_dr_failback.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from broker_store.clock import ManualClock
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from connectors.core.config import ReplicatorConfig, load_replicator_config
from connectors.core.errors import ReplicatorConfigError
from jobs.dr.failback import KIND, Failback, FailbackSettings, reverse_link_of
from jobs.dr.failback_cli import print_failback_report
from jobs.dr.journal import FileJournal
from jobs.dr.link_ends import LinkEnds
from jobs.dr.operation import (
    OperationRecord,
    OperationRunner,
    OperationState,
    Step,
    StepContext,
    StepRecord,
    StepRefusedError,
    StepState,
)


def config(tmp_path: Path, *links: tuple[str, str, str]) -> ReplicatorConfig:
    path = tmp_path / "replicator.yaml"
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "A", "namesrv": ["127.0.0.1:9876"]}, {"name": "B", "namesrv": ["127.0.0.1:9877"]}],
        "links": [{"name": n, "source": s, "target": t, "topics": {"explicit": [{"source": "T"}]},
                   "checkpoint_location": str(tmp_path / "cp" / n), "delta_location": str(tmp_path / "delta")}
                  for n, s, t in links]}))
    return load_replicator_config(path)


def test_the_reverse_link_is_the_only_one_back_or_the_one_named(tmp_path: Path) -> None:
    c = config(tmp_path, ("F", "A", "B"), ("R", "B", "A"))
    assert reverse_link_of(c, c.link("F")).name == "R"
    assert reverse_link_of(c, c.link("F"), "R").name == "R"
    with pytest.raises(ReplicatorConfigError, match="link F goes A -> B, not B -> A: it is not the reverse of link F"):
        reverse_link_of(c, c.link("F"), "F")
    c = config(tmp_path, ("F", "A", "B"))
    with pytest.raises(ReplicatorConfigError, match=r"needs one link B -> A in the config \(found: none\)"):
        reverse_link_of(c, c.link("F"))
    c = config(tmp_path, ("F", "A", "B"), ("R1", "B", "A"), ("R2", "B", "A"))
    with pytest.raises(ReplicatorConfigError, match=r"found: R1, R2\); add one, or name it with --reverse-link"):
        reverse_link_of(c, c.link("F"))


def ends(name: str) -> LinkEnds:
    """A link's ends as far as the plan reads them: F goes A -> B, R B -> A."""
    return cast(LinkEnds, SimpleNamespace(link=SimpleNamespace(name=name),
                                          source=SimpleNamespace(name="B" if name == "R" else "A")))


def switchover_done(old_perms: dict[str, dict[str, int]]) -> OperationRecord:
    fence = StepRecord("fence", StepState.DONE, result={"old_perms": old_perms, "probes": {}})
    return OperationRecord("op1", "switchover", "F", OperationState.DONE, 0.0, (StepRecord("preflight"), fence))


def test_the_steps_are_the_switchovers_over_the_reverse_link_with_a_reopened_and_b_released() -> None:
    failback = Failback(ends("F"), ends("R"), FailbackSettings())
    steps = failback.steps()
    assert [s.name for s in steps] == ["preflight", "fence", "reopen", "drain", "groups", "commit", "release",
                                       "report"]
    assert {s.name for s in steps if s.undo is not None} == {"fence", "reopen", "release"}
    assert failback.over_reverse.ends is failback.reverse and failback.on_a.ends is failback.forward
    assert KIND == "failback"


class Perms:
    """``Switchover.set_perm`` of one side, recorded."""

    def __init__(self) -> None:
        self.set: dict[tuple[str, str], int] = {}

    def __call__(self, broker: str, topic: str, perm: int) -> None:
        self.set[(broker, topic)] = perm


def context(record: OperationRecord, step: str, saved: list[dict[str, Any]]) -> StepContext:
    return StepContext(record, record.step(step), {}, saved.append)


def test_a_gets_back_the_permissions_its_switchover_saved_and_abort_fences_it_again() -> None:
    old = {"broker-a": {"T": PERM_READ | PERM_WRITE}, "broker-b": {"T": PERM_READ | PERM_WRITE | 1}}
    failback = Failback(ends("F"), ends("R"), FailbackSettings(), previous=switchover_done(old))
    assert failback._a_perms_to_restore() == old
    on_a, on_b = Perms(), Perms()
    failback.on_a.set_perm = on_a  # type: ignore[method-assign]
    failback.over_reverse.set_perm = on_b  # type: ignore[method-assign]
    record = OperationRecord("op2", KIND, "F", OperationState.RUNNING, 0.0, (
        StepRecord("preflight", StepState.DONE, result={"a_perms": old}),
        StepRecord("fence", StepState.DONE, result={"old_perms": {"broker-c": {"T": PERM_READ | PERM_WRITE}}}),
        StepRecord("reopen", StepState.RUNNING), StepRecord("release", StepState.RUNNING)))
    saved: list[dict[str, Any]] = []
    result = failback.reopen(context(record, "reopen", saved))
    assert saved == [{"a_perms": old}]  # saved before any permission changes: abort finds them after a crash
    assert on_a.set == {("broker-a", "T"): PERM_READ | PERM_WRITE, ("broker-b", "T"): PERM_READ | PERM_WRITE | 1}
    failback.refence(StepRecord("reopen", StepState.RUNNING, progress=saved[0]))
    assert on_a.set == {("broker-a", "T"): PERM_READ, ("broker-b", "T"): PERM_READ | 1}
    assert result == {"a_perms": old}
    released = failback.release(context(record, "release", saved))
    assert on_b.set == {("broker-c", "T"): PERM_READ | PERM_WRITE}
    failback.refence_b(StepRecord("release", StepState.DONE, result=released))
    assert on_b.set == {("broker-c", "T"): PERM_READ}


def test_without_its_switchovers_record_a_gets_its_current_permissions_plus_write() -> None:
    """After a failover A was never fenced by a switchover (or another link's operation was last): the current
    permissions of the forward link's topics on A, with write added."""
    topic_config = SimpleNamespace(perm=PERM_READ)
    a = SimpleNamespace(primary_addrs=lambda name: {"broker-a": "127.0.0.1:1"},
                        all_topic_config=lambda addr: {"T": topic_config, "Other": topic_config})
    forward = cast(LinkEnds, SimpleNamespace(link=SimpleNamespace(name="F"), source=SimpleNamespace(name="A"), a=a,
                                             source_queues=lambda: [SimpleNamespace(topic="T")]))
    other = switchover_done({"broker-a": {"T": PERM_READ | PERM_WRITE | 1}})
    for previous in (None, OperationRecord("op", "switchover", "X", OperationState.DONE, 0.0, other.steps),
                     OperationRecord("op", "switchover", "F", OperationState.ABORTED, 0.0, other.steps)):
        failback = Failback(forward, ends("R"), FailbackSettings(), previous=previous)
        assert failback._a_perms_to_restore() == {"broker-a": {"T": PERM_READ | PERM_WRITE}}


def test_group_selection_narrows_the_groups_and_names_one_with_no_offsets_on_b() -> None:
    old = {"broker-a": {"T": PERM_READ | PERM_WRITE}}
    record = OperationRecord("op2", KIND, "F", OperationState.RUNNING, 0.0, (StepRecord("preflight"),))
    for chosen, expected in ((("g2",), ["g2"]), ((), ["g1", "g2"])):
        failback = Failback(ends("F"), ends("R"), FailbackSettings(groups=chosen), previous=switchover_done(old))
        failback.over_reverse.preflight = lambda ctx: {"queues": [], "groups": ["g1", "g2"]}  # type: ignore[method-assign]
        saved: list[dict[str, Any]] = []
        result = failback.preflight(context(record, "preflight", saved))
        assert result["groups"] == expected and result["a_perms"] == old and saved == [{"a_perms": old}]
    failback = Failback(ends("F"), ends("R"), FailbackSettings(groups=("g3",)), previous=switchover_done(old))
    failback.over_reverse.preflight = lambda ctx: {"queues": [], "groups": ["g1"]}  # type: ignore[method-assign]
    with pytest.raises(StepRefusedError, match=r"no offsets on B on the reverse link's topics: g3 \(selected there"):
        failback.preflight(context(record, "preflight", []))


def test_the_report_prints_each_table_and_the_steps_in_their_order(capsys: pytest.CaptureFixture[str]) -> None:
    report = {"queues": [{"queue": ["T", "b", 0], "on_a": 7, "replicated": 7, "missing": 0}],
              "groups": {"g": [{"a_queue": ["T", "a", 0], "a_offset": 5, "exact": True, "re_read": 0}]},
              "forward_resume": {"from_b": 3, "others": 0},
              "durations_s": {"commit": 0.5, "fence": 0.25, "preflight": 0.0, "report": None},
              "operator": "Producers and consumers are moved by the operator"}
    steps = tuple(StepRecord(n, StepState.DONE) for n in ("preflight", "fence", "commit"))
    record = OperationRecord("op3", KIND, "F", OperationState.DONE, 0.0,
                             (*steps, StepRecord("report", StepState.DONE, result=report)))
    print_failback_report(record)
    out = capsys.readouterr().out
    assert "failback op3 of link F: done" in out and "T/a/0" in out and "yes" in out
    assert "A holds 3 copies of B's messages" in out
    assert "steps: preflight 0.0 s, fence 0.2 s, commit 0.5 s" in out


class Sides:
    """Both clusters' topic permissions as the steps set them (``set_perm`` of each side), fakes of the I/O
    steps, and the failback wired to them."""

    def __init__(self, refuse_at: str | None) -> None:
        self.a = {("broker-a", "T"): PERM_READ}  # fenced by the switchover
        self.b = {("broker-b", "T"): PERM_READ | PERM_WRITE}
        self.commits = 0
        old = {"broker-a": {"T": PERM_READ | PERM_WRITE}}
        self.failback = f = Failback(ends("F"), ends("R"), FailbackSettings(), previous=switchover_done(old))
        f.on_a.set_perm = lambda broker, topic, perm: self.a.__setitem__((broker, topic), perm)  # type: ignore
        f.over_reverse.set_perm = lambda broker, topic, perm: self.b.__setitem__((broker, topic), perm)  # type: ignore

        def refusing(name: str, result: dict[str, Any]) -> Callable[[StepContext], dict[str, Any]]:
            def run(ctx: StepContext) -> dict[str, Any]:
                if name == refuse_at:
                    raise StepRefusedError(f"{name} refused", "run again")
                return result
            return run

        def fence(ctx: StepContext) -> dict[str, Any]:
            ctx.save({"old_perms": {"broker-b": {"T": PERM_READ | PERM_WRITE}}})
            self.b[("broker-b", "T")] = PERM_READ
            return refusing("fence", {"old_perms": {"broker-b": {"T": PERM_READ | PERM_WRITE}}})(ctx)

        def commit(ctx: StepContext) -> dict[str, Any]:
            self.commits += 1
            return refusing("commit", {"groups": {}})(ctx)

        f.over_reverse.preflight = refusing("preflight", {"queues": [], "groups": ["g"]})  # type: ignore
        f.over_reverse.fence = fence  # type: ignore[method-assign]
        f.over_reverse.drain = refusing("drain", {"queues": []})  # type: ignore
        f.over_reverse.groups_offline = refusing("groups", {"groups": ["g"]})  # type: ignore
        f.commit = commit  # type: ignore[method-assign]
        f.report = refusing("report", {})  # type: ignore


def steps_of(failback: Failback) -> Callable[[str], list[Step]]:
    return lambda kind: failback.steps()


STEPS = ["preflight", "fence", "reopen", "drain", "groups", "commit", "release", "report"]


@pytest.mark.parametrize("refused", [s for s in STEPS if s not in ("reopen", "release")])
def test_abort_at_any_step_leaves_the_state_after_the_switchover(tmp_path: Path, refused: str) -> None:
    """Refused at a step, then aborted: A fenced again, B with its permissions; run again instead: done, and
    both take writes (B as the standby)."""
    for then in ("abort", "again"):
        sides = Sides(refused)
        runner = OperationRunner(FileJournal(tmp_path / then / refused), ManualClock())
        with pytest.raises(StepRefusedError):
            runner.run(KIND, "F", sides.failback.steps())
        if then == "abort":
            runner.abort("F", steps_of(sides.failback))
            assert sides.a == {("broker-a", "T"): PERM_READ} and sides.b == {("broker-b", "T"): PERM_READ | PERM_WRITE}
        else:
            again = Sides(None)
            again.a, again.b, again.commits = sides.a, sides.b, sides.commits
            record = runner.run(KIND, "F", again.failback.steps())
            assert record.state is OperationState.DONE
            assert again.commits == 1 + (refused == "commit")  # a refused commit runs again
            assert again.a == {("broker-a", "T"): PERM_READ | PERM_WRITE}
            assert again.b == {("broker-b", "T"): PERM_READ | PERM_WRITE}


def test_the_fence_leaves_the_replicators_heartbeat_topic_writable() -> None:
    """The link replicates the heartbeat topic beside the application's: the fence (of a switchover, and of a
    failback over the reverse link) takes write away from the application's topics only."""
    from connectors.core.monitoring import HEARTBEAT_TOPIC
    from jobs.dr.switchover import Switchover, SwitchoverSettings

    configs = {t: SimpleNamespace(perm=PERM_READ | PERM_WRITE) for t in ("T", HEARTBEAT_TOPIC, "Other")}
    a = SimpleNamespace(primary_addrs=lambda cluster: {"broker-a": "127.0.0.1:1"},
                        all_topic_config=lambda addr: configs)
    link_ends = cast(LinkEnds, SimpleNamespace(link=SimpleNamespace(name="F"), source=SimpleNamespace(name="A"), a=a))
    switchover = Switchover(link_ends, SwitchoverSettings())
    perms = Perms()
    switchover.set_perm = perms  # type: ignore[method-assign]
    switchover._probe = lambda op_id, broker, topic: "forbidden"  # type: ignore[method-assign]
    preflight = StepRecord("preflight", StepState.DONE, result={
        "queues": [["T", "broker-a", 0], [HEARTBEAT_TOPIC, "broker-a", 0]]})
    record = OperationRecord("op1", "switchover", "F", OperationState.RUNNING, 0.0,
                             (preflight, StepRecord("fence", StepState.RUNNING)))
    result = switchover.fence(context(record, "fence", []))
    assert result["old_perms"] == {"broker-a": {"T": PERM_READ | PERM_WRITE}}
    assert perms.set == {("broker-a", "T"): PERM_READ} and set(result["probes"]) == {"T/broker-a"}
