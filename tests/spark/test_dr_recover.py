"""``python -m jobs.dr recover`` between the session's real clusters (no Spark query: the link's replicated point
is set in its Delta tables the way ``jobs.reset_offsets`` sets it, as a link stopped by a failover leaves it):
A holds messages beyond the replicated point (acknowledged, never crossed); the command, killed with kill -9
while it copies and run again, puts each of them on B exactly once, byte-exact, marked with the recovery
property and its position, commits them to the link's tables (resume point and offset map), and changes
nothing on A. ``--quarantine`` puts them into ``<topic>_DR_RECOVERED`` and leaves the link's tables alone."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from broker_store.client import MessageQueue
from broker_store.protocol.message import StoredMessage
from broker_store.protocol.properties import PROPERTY_REPLICATOR_POSITION, PROPERTY_REPLICATOR_RECOVERY
from connectors.core.config import load_replicator_config
from connectors.replication.source_position import format_position
from connectors.replication.tables import LinkTables
from jobs.dr.operation import OperationState
from jobs.dr.recover import QUARANTINE_SUFFIX
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random
from tests.spark.spark_processes import wait_for
from tests.spark.test_dr_switchover import Setup

pytestmark = pytest.mark.integration


Messages = dict[MessageQueue, list[StoredMessage]]


def divergent_setup(src: Cluster, dst: Cluster, work: Path, prefix: str, count: int,
                    max_body: int = 64) -> tuple[Setup, dict[MessageQueue, int], Messages]:
    """A link whose replicated point is half of each queue of A: (setup, replicated point, A's messages)."""
    setup = Setup(src, dst, work, prefix)
    produce_random(src.producer, setup.topic, setup.queues, count, max_body=max_body)
    on_a = src.read_all(setup.topic)
    replicated = {q: len(on_a[q]) // 2 for q in setup.queues}
    tables = LinkTables.for_link(load_replicator_config(setup.config).link(setup.link))
    tables.append_resume_point(replicated)
    return setup, replicated, on_a


def expected_on_b(setup: Setup, replicated: dict[MessageQueue, int], on_a: Messages) -> dict[str, tuple[bytes, str]]:
    """Position property -> (body, UNIQ_KEY) of every divergent message of A."""
    return {format_position(setup.src.name, q, m.queue_offset): (m.body, m.msg_id)
            for q in setup.queues for m in on_a[q] if m.queue_offset >= replicated[q]}


def stored_positions(dst: Cluster, topic: str) -> list[StoredMessage]:
    return [m for msgs in dst.read_all(topic).values() for m in msgs]


def test_recover_killed_while_copying_then_resumed_copies_each_divergent_message_once(
        clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup, replicated, on_a = divergent_setup(src, dst, tmp_path, "DrRec", 8000, max_body=1024)
    want = expected_on_b(setup, replicated, on_a)

    first = setup.dr("recover", log="run1.log")
    try:
        wait_for(lambda: "copy: " in first.log(), 120, "the first queue copied", alive=first)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        first.kill()
    killed = setup.record()
    assert killed.kind == "recover" and killed.state is OperationState.RUNNING, killed.to_json()
    assert 1 <= len(killed.step("copy").progress.get("done", {})) < len(setup.queues)

    rc, out = setup.dr_done("recover", "--json", log="run2.log")
    assert rc == 0, out
    document: dict[str, Any] = json.loads(out[out.index("{"):])
    report = document["steps"][-1]["result"]
    assert report["recovered"] == len(want) and report["lost_to_retention"] == 0

    stored = stored_positions(dst, setup.topic)
    positions = [m.properties.get(PROPERTY_REPLICATOR_POSITION) for m in stored]
    assert len(positions) == len(set(positions)), "a divergent message is on B twice"
    assert set(positions) == set(want)
    for m in stored:
        body, uniq = want[m.properties[PROPERTY_REPLICATOR_POSITION]]
        assert m.body == body and m.msg_id == uniq
        assert m.properties[PROPERTY_REPLICATOR_RECOVERY] in (killed.id, document["id"])
    # the link's tables: resume point at A's end, the recovered offsets mapped (exact translation later)
    tables = LinkTables.for_link(load_replicator_config(setup.config).link(setup.link))
    assert tables.latest_offsets() == {q: len(on_a[q]) for q in setup.queues}
    assert src.read_all(setup.topic) == on_a  # A untouched

    rc, out = setup.dr_done("recover", "--json", log="run3.log")  # nothing left to recover
    assert rc == 0, out
    assert json.loads(out[out.index("{"):])["steps"][-1]["result"]["recovered"] == 0
    assert len(stored_positions(dst, setup.topic)) == len(want)


def test_recover_into_quarantine_topics_leaves_the_mapped_topic_and_the_link_alone(
        clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup, replicated, on_a = divergent_setup(src, dst, tmp_path, "DrQuar", 200)
    want = expected_on_b(setup, replicated, on_a)
    rc, out = setup.dr_done("recover", "--quarantine", log="run1.log")
    assert rc == 0, out
    assert f"{len(want)} message(s) recovered into quarantine topics" in out
    quarantine = f"{setup.topic}{QUARANTINE_SUFFIX}"
    stored = stored_positions(dst, quarantine)
    assert sorted(m.properties[PROPERTY_REPLICATOR_POSITION] for m in stored) == sorted(want)
    assert stored_positions(dst, setup.topic) == []
    tables = LinkTables.for_link(load_replicator_config(setup.config).link(setup.link))
    assert tables.latest_offsets() == replicated
