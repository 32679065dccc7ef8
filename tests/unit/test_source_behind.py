"""``connectors.replication.source_behind``: a source queue that ends below the link's position (the source lost
messages the link had read) is reported once it stayed so for the grace period, once per episode, with what to do;
a short blip (a deposed primary on a stale route) is not."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker_store.client import MessageQueue
from connectors.replication.source_behind import Behind, BehindWatch, behind_warning

Q1, Q2 = MessageQueue("T", "src-a", 0), MessageQueue("T", "src-a", 1)


def test_a_queue_short_for_the_grace_period_is_reported_once() -> None:
    watch = BehindWatch(grace_s=30.0)
    position = {Q1: 100, Q2: 50}
    assert watch.check(0.0, position, {Q1: 40, Q2: 60}) == []
    assert watch.check(29.9, position, {Q1: 45, Q2: 60}) == []
    assert watch.check(30.0, position, {Q1: 47, Q2: 60}) == [Behind(Q1, 47, 100)]
    assert watch.check(90.0, position, {Q1: 80, Q2: 60}) == []  # once per episode


def test_a_blip_shorter_than_the_grace_is_forgotten() -> None:
    watch = BehindWatch(grace_s=30.0)
    assert watch.check(0.0, {Q1: 100}, {Q1: 90}) == []
    assert watch.check(10.0, {Q1: 100}, {Q1: 100}) == []  # the queue reached the position again
    assert watch.check(35.0, {Q1: 100}, {Q1: 90}) == []  # a new episode starts its own grace
    assert watch.check(65.0, {Q1: 100}, {Q1: 90}) == [Behind(Q1, 90, 100)]


def test_a_new_episode_after_recovery_is_reported_again() -> None:
    watch = BehindWatch(grace_s=0.0)
    assert watch.check(0.0, {Q1: 10}, {Q1: 5}) == [Behind(Q1, 5, 10)]
    assert watch.check(1.0, {Q1: 10}, {Q1: 12}) == []
    assert watch.check(2.0, {Q1: 20}, {Q1: 3}) == [Behind(Q1, 3, 20)]


def test_queues_the_link_has_not_read_yet_are_not_checked() -> None:
    assert BehindWatch(grace_s=0.0).check(0.0, {}, {Q1: 0}) == []


def test_the_warning_names_the_queue_the_loss_and_the_one_queue_reset() -> None:
    text = behind_warning("l1", "src", Behind(Q2, 5, 9), 30.0, "conf/replicator.yaml")
    assert "source queue T/src-a/1 of cluster src ends at 5, below the link's position 9" in text
    assert "will not be replicated" in text
    assert '{"T/src-a/1": <offset>}' in text
    assert "python -m jobs.reset_offsets --config conf/replicator.yaml --link l1 --to <file>" in text


def test_the_reader_warns_about_a_queue_below_its_position_and_reads_on(monkeypatch: Any,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """``latestOffset`` with one queue whose end fell below the query's position (a re-created topic): a WARNING
    once the grace passed, the batch end unchanged for it, the other queues read as before."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from connectors.core.offsets import SourceOffset
    from tests.unit.test_connectors_source_outage import FakeClock
    from tests.unit.test_topic_stats import QUEUES, TRUTH, StatsAdmin, _stats_reader

    clock = FakeClock()
    reader = _stats_reader(monkeypatch, StatsAdmin(), clock)
    monkeypatch.setattr(reader, "discover_queues", lambda: list(QUEUES))
    short = QUEUES[0]
    position = {**{q: n - 1 for q, n in TRUTH.items()}, short: TRUTH[short] + 7}
    start = SourceOffset.of(position).to_dict()
    with caplog.at_level(logging.WARNING, logger="connectors.replication.reader"):
        end = SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues
        assert not [r for r in caplog.records if "below the link's position" in r.getMessage()]
        clock.now += reader._state.behind.grace_s
        reader.latestOffset(start, ReadAllAvailable())
    assert end == {**TRUTH, short: TRUTH[short] + 7}
    warned = [r.getMessage() for r in caplog.records if "below the link's position" in r.getMessage()]
    assert len(warned) == 1
    assert (f"source queue {short.topic}/{short.broker_name}/{short.queue_id} of cluster src ends at "
            f"{TRUTH[short]}, below the link's position {TRUTH[short] + 7}") in warned[0]
