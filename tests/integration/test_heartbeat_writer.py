"""The heartbeat writer's send against a real source cluster, without Spark: it creates the heartbeat topic
when missing, and when the topic vanishes (deleted on the source) a send may fail, reported in the commit
message (never an exception), and the next one creates the topic again: heartbeats resume by themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_store.client import Admin
from broker_store.protocol.errors import TopicNotExistError
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.heartbeat.options import HeartbeatOptions, LinkEndpoints
from connectors.heartbeat.writer import HeartbeatStreamWriter
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def source(tmp_path: Path) -> Iterator[LocalCluster]:
    # no auto-create on the broker (as production clusters often run): only the writer can bring the topic back
    with LocalCluster(tmp_path, "wsrc", auto_create_topic_enable=False) as cluster:
        yield cluster


def test_a_vanished_heartbeat_topic_is_created_again(source: LocalCluster) -> None:
    writer = HeartbeatStreamWriter.__new__(HeartbeatStreamWriter)
    writer.__setstate__({"options": HeartbeatOptions(1000, (
        LinkEndpoints("l1", "wsrc", "wdst", source.namesrv_addr, None),))})
    first = writer.send("l1", 0)
    assert first.error is None and first.offset is not None, first
    with Admin(source.namesrv_addr) as admin:
        admin.delete_topic(HEARTBEAT_TOPIC)
        with pytest.raises(TopicNotExistError):
            admin.topic_route(HEARTBEAT_TOPIC)
        sent = [writer.send("l1", seq) for seq in range(1, 4)]
        assert sent[-1].error is None and sent[-1].queue is not None, sent  # resumed by itself
        assert admin.wait_for_route(HEARTBEAT_TOPIC, 10).queue_datas
