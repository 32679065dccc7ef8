"""``jobs.dr.status.link_status``: lag per topic, the recovery point if A died now, checkpoint ages, drift."""

from __future__ import annotations

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
