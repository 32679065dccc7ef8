"""Delay messages through real broker processes on loopback: a primary with one replica, delay levels
shortened to "1s 2s" (the broker setting message_delay_level) so each case waits about a second.

The decisions (what is due, offsets, the level table, the file and wire formats) are unit-tested without
sockets in tests/unit/test_schedule.py; send-back's delay rule runs in-process on a manual clock in
test_broker_server.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from broker_store.client import (
    Admin,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    SendStatus,
    StoredMessage,
    new_message,
)
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from broker_store.protocol.errors import RocketMQError
from broker_store.store.delay_levels import SCHEDULE_TOPIC
from tests.support.processes import GroupSpec, LocalCluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

GROUP = "dl"
SYNC_INTERVAL_MS = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("delay"), "delay", [GroupSpec.replicated(GROUP, 2)],
                      message_delay_level="1s 2s",
                      ha={"ha_send_heartbeat_interval_ms": 200, "ha_housekeeping_interval_ms": 3000,
                          "metadata_sync_interval_ms": SYNC_INTERVAL_MS}) as started:
        with Admin(started.namesrv_addr) as admin:
            admin.create_topic("Delayed", 2, broker_names=[GROUP])
            admin.wait_for_route("Delayed")
        yield started


def test_a_level_1_message_is_pulled_from_its_topic_after_one_second_and_not_before(cluster: LocalCluster) -> None:
    primary, replica = cluster.groups[GROUP]
    mq = MessageQueue("Delayed", GROUP, 1)
    props = {"DELAY": "1", "custom": "kept"}
    with Producer(cluster.namesrv_addr, "dl-pg") as producer, \
            PullConsumer(cluster.namesrv_addr, "dl-cg", heartbeat_interval=None) as consumer, \
            Admin(cluster.namesrv_addr) as admin:
        start = consumer.pull(mq, 0).next_begin_offset
        sent = producer.send(new_message("Delayed", b"later", tags="TagD", keys=["k1", "k2"], properties=props), mq)
        assert sent.status is SendStatus.SEND_OK
        assert consumer.pull(mq, start).status is PullStatus.NO_NEW_MSG  # waiting in SCHEDULE_TOPIC_XXXX
        # the answer names the queue sent to and the message's offset in its level's schedule queue
        assert sent.message_queue.queue_id == 1

        found: list[StoredMessage] = []

        def delivered() -> bool:
            found[:] = consumer.pull(mq, start).messages
            return bool(found)

        eventually(delivered, timeout=5.0, what="the delayed message in its topic")
        (msg,) = found
        assert msg.store_timestamp >= msg.born_timestamp + 1000  # not delivered before its level's delay
        assert msg.body == b"later" and msg.tags == "TagD" and msg.keys == "k1 k2"
        assert msg.properties["custom"] == "kept" and "DELAY" not in msg.properties
        assert (msg.properties["REAL_TOPIC"], msg.properties["REAL_QID"]) == ("Delayed", "1")
        assert msg.msg_id == sent.msg_id  # UNIQ_KEY, the client's id, is kept
        assert msg.offset_msg_id != sent.offset_msg_id  # the broker's id is the new record's

        eventually(lambda: admin.all_delay_offsets(primary.listen).get(1) == sent.queue_offset + 1,
                   what="GET_ALL_DELAY_OFFSET names the delivered level-1 offset")
        want = admin.all_delay_offsets(primary.listen)

        # The replica copies the table in its metadata sync round and persists it ...
        delay_file = replica.store_dir / "config" / "delayOffset.json"

        def copied() -> bool:
            return delay_file.exists() and json.loads(delay_file.read_text())["offsetTable"] == {
                str(level): offset for level, offset in want.items()}

        eventually(copied, timeout=10 * SYNC_INTERVAL_MS / 1000, what="delayOffset.json copied to the replica")
        assert admin.all_delay_offsets(replica.listen) == want
        # ... and does not deliver itself: its log stays the primary's, byte for byte in length
        eventually(lambda: admin.ha_status(replica.listen).max_offset == admin.ha_status(primary.listen).max_offset,
                   what="the replica caught up")
    assert "schedule service started" in primary.log_tail(100_000)
    assert "schedule service started" not in replica.log_tail(100_000)


def test_levels_above_the_last_wait_the_last_delay(cluster: LocalCluster) -> None:
    mq = MessageQueue("Delayed", GROUP, 0)
    with Producer(cluster.namesrv_addr, "dl-pg2") as producer, \
            PullConsumer(cluster.namesrv_addr, "dl-cg2", heartbeat_interval=None) as consumer:
        start = consumer.pull(mq, 0).next_begin_offset
        sent_at = time.time()
        producer.send(new_message("Delayed", b"capped", properties={"DELAY": "18"}), mq)
        found: list[StoredMessage] = []

        def delivered() -> bool:
            found[:] = consumer.pull(mq, start).messages
            return bool(found)

        eventually(delivered, timeout=6.0, what="the capped message in its topic")
        assert time.time() - sent_at >= 1.9  # level 2's 2 s, the highest of "1s 2s"
        assert found[0].body == b"capped"


def test_a_topic_fenced_read_only_still_gets_its_waiting_delayed_messages_when_due(cluster: LocalCluster) -> None:
    """A switchover's fence (write permission removed from a topic) refuses clients' sends, not the schedule
    service's delivery of a message accepted before it (its put goes through the store); the entry waits in the
    schedule, where ``jobs.dr`` counts it from the delay offsets and the schedule queue's end (asked of the
    primary: the schedule topic has no route). Giving the permission back changes nothing for it either."""
    primary, _ = cluster.groups[GROUP]
    mq = MessageQueue("Fenced", GROUP, 0)
    with Producer(cluster.namesrv_addr, "dl-pg3", retry_times_when_send_failed=0) as producer, \
            PullConsumer(cluster.namesrv_addr, "dl-cg3", heartbeat_interval=None) as consumer, \
            Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("Fenced", 1, broker_names=[GROUP])
        admin.wait_for_route("Fenced")
        sent = producer.send(new_message("Fenced", b"accepted before the fence", properties={"DELAY": "2"}), mq)
        admin.create_topic("Fenced", 1, PERM_READ, broker_names=[GROUP])  # the fence
        eventually(lambda: admin.all_topic_config(primary.listen)["Fenced"].perm == PERM_READ, what="the fence")
        with pytest.raises(RocketMQError):
            producer.send(new_message("Fenced", b"refused"), mq)
        waiting = admin.max_offset_at(primary.listen, SCHEDULE_TOPIC, 1) - admin.all_delay_offsets(primary.listen)[2]
        assert waiting >= 1 or consumer.pull(mq, 0).messages  # waiting, unless already due (a slow machine)
        found: list[StoredMessage] = []

        def delivered() -> bool:
            found[:] = consumer.pull(mq, 0).messages
            return bool(found)

        eventually(delivered, timeout=10.0, what="the delayed message in its fenced topic")
        (msg,) = found
        assert msg.msg_id == sent.msg_id and msg.store_timestamp >= msg.born_timestamp + 2000
        assert admin.all_delay_offsets(primary.listen)[2] == sent.queue_offset + 1
        assert admin.all_topic_config(primary.listen)["Fenced"].perm == PERM_READ  # still fenced
        admin.create_topic("Fenced", 1, PERM_READ | PERM_WRITE, broker_names=[GROUP])  # given back
        eventually(lambda: admin.all_topic_config(primary.listen)["Fenced"].perm == PERM_READ | PERM_WRITE,
                   what="the permission given back")
        assert consumer.pull(mq, 1).status is PullStatus.NO_NEW_MSG  # delivered once, not again
