"""``jobs.dr.status.link_status``: lag per topic, the recovery point if A died now, checkpoint ages, drift."""

from __future__ import annotations

import pytest

from broker_store.client import MessageQueue
from jobs.dr.status import link_status


def test_lag_per_topic_and_the_rpo_is_what_a_holds_beyond_the_replicated_point() -> None:
    a0, a1, b0 = MessageQueue("A", "b1", 0), MessageQueue("A", "b2", 0), MessageQueue("B", "b1", 0)
    status = link_status("l", 1000.0, [a0, a1, b0], {a0: 10, a1: 5, b0: 7}, {a0: 8, b0: 9},
                         {"A": "A", "B": "BDR"}, {"g": 990_000, "h": None}, missing_on_b=["BDR"],
                         groups_missing_on_b=["h"])
    by_topic = {t.topic: t for t in status.topics}
    assert (by_topic["A"].on_a, by_topic["A"].replicated, by_topic["A"].lag) == (15, 8, 7)  # a1 never replicated
    assert by_topic["B"].lag == 0  # replicated past A's max offset: never negative
    assert status.rpo_messages == 7
    assert status.checkpoint_age_s == {"g": 10.0, "h": None}
    doc = status.to_json()
    assert doc["rpo_messages"] == 7 and doc["topics_missing_on_b"] == ["BDR"] and doc["groups_missing_on_b"] == ["h"]


def test_with_a_unreachable_a_is_what_the_jobs_record_last_saw_and_the_output_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from connectors.replication.source_maxes import ObservedQueue, SourceMaxes
    from jobs.dr.cli import print_status
    from jobs.dr.status import recorded_status

    a0, a1, a2 = (MessageQueue("A", "b1", i) for i in range(3))
    record = SourceMaxes("src", 1005.0, {a0: ObservedQueue(0, 10, 1000.0), a1: ObservedQueue(0, 4, 1002.0)})
    status = recorded_status("l", 1020.0, record, {a0: 8, a2: 3}, {"A": "A"}, {"g": 990_000}, "connection refused")
    (topic,) = status.topics
    assert (topic.queues, topic.on_a, topic.replicated) == (3, 10 + 4 + 3, 8 + 0 + 3)  # a2: never recorded
    assert status.recorded_rpo == 2 + 4 and status.recorded_at == 1000.0 and status.observed_at == 1000.0
    assert status.to_json()["a_answered"] is False and status.checkpoint_age_s == {"g": 30.0}  # now
    print_status(status)
    out = capsys.readouterr().out
    assert "A does not answer (connection refused)" in out and "record of its max offsets" in out
    assert "at least 6 acknowledged message(s) of A are not on B" in out
    blind = recorded_status("l", 1020.0, None, {a0: 8}, {"A": "A"}, {}, "timeout")
    assert blind.recorded_rpo is None and blind.rpo_messages == 0 and blind.observed_at == 1020.0
    print_status(blind)
    assert "never recorded" in capsys.readouterr().out
