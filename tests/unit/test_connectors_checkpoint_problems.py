"""The checkpoint connector's problems stand while they last (``connectors.core.standing``, the rule config
sync records its refusals by): an unreachable source or target is a WARNING when it starts and an INFO when it
clears, nothing repeated per checkpoint in between. No socket: the source and target clusters are fakes whose
failures are switched on and off (the real-process counterparts are tests/integration/
test_checkpoint_committer.py's unreachable source and target)."""

from __future__ import annotations

import logging
from typing import Any, cast

from broker_store.client import Admin, MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import RocketMQError, TransportError, error_for_response
from connectors.checkpoint.committer import CheckpointCommitter
from connectors.checkpoint.link_state import LinkProgress
from connectors.checkpoint.snapshot import GroupOffsetPoller
from connectors.checkpoint.translation import OffsetTranslator, Run
from connectors.core.sync_settings import GroupSelection
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from tests.support.clocks import MillisClock

SOURCE_Q = MessageQueue("Orders", "src-a", 0)
TARGET_Q = MessageQueue("Orders", "dst-a", 0)


class FakeCluster:
    """The Admin calls the poller (source) and the committer (target) make; ``down`` makes each fail as a
    refused connection does."""

    def __init__(self) -> None:
        self.down = False
        self.failures: list[RocketMQError] = []
        """Raised by the next calls, one each (a primary that just died, then its successor answering)."""
        self.update_failures: list[RocketMQError] = []
        """The same, for ``update_consumer_offset`` only."""
        self.updates: list[tuple[str, int]] = []

    def _check(self) -> None:
        if self.down:
            raise TransportError("cannot connect to 127.0.0.1:10911")
        if self.failures:
            raise self.failures.pop(0)

    def primary_addrs(self, cluster: str | None = None) -> dict[str, str]:
        self._check()
        return {"src-a": "127.0.0.1:10911"}

    def all_consumer_offsets(self, broker_addr: str) -> dict[tuple[str, str], dict[int, int]]:
        self._check()
        return {("Orders", "app"): {0: 5}}

    def consumer_list(self, group: str, topic: str) -> list[str]:
        self._check()
        return []

    def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        self._check()
        return max((offset for g, offset in self.updates if g == group), default=None)

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self._check()
        if self.update_failures:
            raise self.update_failures.pop(0)
        self.updates.append((group, offset))


def _link() -> tuple[FakeCluster, FakeCluster, GroupOffsetPoller, CheckpointCommitter]:
    source, target = FakeCluster(), FakeCluster()
    poller = GroupOffsetPoller(cast(Admin, source), "src", TopicMapper(TopicMappingConfig(all_topics=True)),
                               GroupSelection(), interval=1.0, clock=MillisClock(1))
    progress = LinkProgress(OffsetTranslator([(SOURCE_Q, Run(0, 9, TARGET_Q, 0, 9, 10))]), {SOURCE_Q: 10}, 1)
    committer = CheckpointCommitter(link="l", source_cluster="src", target_cluster="dst",
                                    target_admin=cast(Admin, target), target_producer=None,
                                    progress=lambda: progress)
    return source, target, poller, committer


def _rounds(poller: GroupOffsetPoller, committer: CheckpointCommitter, switch: list[Any]) -> list[tuple[int, str]]:
    """One checkpoint per entry of ``switch`` (a callable run before it); the log line of each."""
    lines = []
    for before in switch:
        before()
        lines.append(committer.apply(poller.next_item()).log_line())
    return lines


def test_an_unreachable_source_is_one_warning_when_it_starts_and_one_info_when_it_clears() -> None:
    source, target, poller, committer = _link()

    def down() -> None:
        source.down = True

    def up() -> None:
        source.down = False

    lines = _rounds(poller, committer, [up, down, down, down, up, up])
    levels = [level for level, _ in lines]
    assert levels == [logging.INFO, logging.WARNING, logging.INFO, logging.INFO, logging.INFO, logging.INFO], lines
    assert "source_unreachable src: cannot list the source cluster's brokers: " in lines[1][1]
    assert "127.0.0.1:10911" in lines[1][1]
    assert [text.endswith("(1 problem(s) standing, reported when they started)") for _, text in lines[2:4]] == [
        True, True]
    assert "cleared: source_unreachable src (was: cannot list the source cluster's brokers" in lines[4][1]
    assert "problem" not in lines[5][1] and "cleared" not in lines[5][1]
    assert target.updates == [("app", 5)]  # moved once; later checkpoints find nothing to move


def test_an_unreachable_target_is_one_warning_and_stands_through_a_source_outage() -> None:
    """A target error of a group clears only at a checkpoint that reached the target for that group: one that
    could not read the source says nothing about the target."""
    source, target, poller, committer = _link()

    def set_down(cluster: FakeCluster, down: bool) -> Any:
        return lambda: setattr(cluster, "down", down)

    lines = _rounds(poller, committer, [set_down(target, True), set_down(target, True), set_down(source, True),
                                        set_down(target, False), set_down(source, False), set_down(source, False)])
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO, logging.WARNING, logging.INFO,
                                             logging.INFO, logging.INFO], lines
    assert "target_error app: target cluster dst: " in lines[0][1]
    assert "source_unreachable src" in lines[2][1] and "cleared" not in lines[2][1]  # the target error stands
    assert "cleared" not in lines[3][1]  # source still down: nothing reached the target either
    assert "cleared: " in lines[4][1] and "source_unreachable src" in lines[4][1]
    assert "target_error app (was: target cluster dst: " in lines[4][1]
    assert "cleared" not in lines[5][1] and target.updates == [("app", 5)]


def test_a_target_primary_replaced_since_the_last_checkpoint_is_reached_in_the_same_checkpoint() -> None:
    """The first target request after a failover fails on the dead primary's address (``invalid_route``): the
    client dropped the route, so the committer asks once more and commits now, not one interval later."""
    _, target, poller, committer = _link()
    target.failures = [TransportError("cannot connect to 127.0.0.1:10911")]
    report = committer.apply(poller.next_item())
    assert [r.outcome.value for g in report.groups for r in g.rows] == ["committed"]
    assert target.updates == [("app", 5)]
    # the commit itself is repeated the same way
    _, target, poller, committer = _link()
    target.update_failures = [TransportError("cannot connect to 127.0.0.1:10911")]
    report = committer.apply(poller.next_item())
    assert [r.outcome.value for g in report.groups for r in g.rows] == ["committed"]
    assert target.updates == [("app", 5)]
    # twice in a row: the new primary is not there yet; the next checkpoint tries again
    _, target, poller, committer = _link()
    target.failures = [TransportError("cannot connect"), TransportError("connection reset")]
    report = committer.apply(poller.next_item())
    assert [r.outcome.value for g in report.groups for r in g.rows] == ["target_error"]
    assert target.updates == []


def test_a_refusal_is_not_repeated_in_the_same_checkpoint() -> None:
    """Only a stale route is worth a second try now; a broker's refusal waits for the next checkpoint."""
    _, target, poller, committer = _link()
    target.failures = [error_for_response(ResponseCode.SYSTEM_ERROR, "disk full"), TransportError("unexpected")]
    report = committer.apply(poller.next_item())
    assert [r.outcome.value for g in report.groups for r in g.rows] == ["target_error"]
    assert len(target.failures) == 1  # the second failure was never asked for
