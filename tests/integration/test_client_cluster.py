"""Client against the real name server and brokers (processes on loopback, tests/support harness).

The same paths as tests/unit/test_client.py's fakes, end to end: routes registered by real brokers,
auto-creation through TBW102, sends, batches, long polling, tag filtering, offsets and admin calls.
"""

from __future__ import annotations

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
    new_message,
)
from broker_store.protocol.errors import TopicNotExistError
from tests.support.processes import GroupSpec, LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A name server and two single-broker groups, broker-a and broker-b."""
    with LocalCluster(tmp_path_factory.mktemp("client-cluster"), "it",
                      [GroupSpec("broker-a"), GroupSpec("broker-b")]) as started:
        yield started


def test_create_send_pull_and_offsets(cluster: LocalCluster) -> None:
    addr = cluster.namesrv_addr
    with Admin(addr) as admin, Producer(addr, "it-pg") as producer, \
            PullConsumer(addr, "it-cg", heartbeat_interval=None) as consumer:
        info = admin.cluster_info()
        assert sorted(info.cluster_addr_table["it"]) == ["broker-a", "broker-b"]
        admin.create_topic("it-topic", queue_nums=2, cluster="it")
        admin.wait_for_route("it-topic", timeout=10, min_queues=4)  # both groups' queues, not the first one's
        assert "it-topic" in admin.topic_list()
        queues = consumer.fetch_message_queues("it-topic")
        assert len(queues) == 4

        mq = MessageQueue("it-topic", "broker-a", 1)
        tags = ["TagA", "TagB", None, "TagA"]
        sent = [producer.send(new_message("it-topic", f"m{i}".encode(), tags=t), mq)
                for i, t in enumerate(tags)]
        assert all(r.status is SendStatus.SEND_OK for r in sent)
        assert [r.queue_offset for r in sent] == [0, 1, 2, 3]

        r = consumer.pull(mq, 0)
        assert r.status is PullStatus.FOUND
        assert [m.body for m in r.messages] == [b"m0", b"m1", b"m2", b"m3"]
        assert [m.msg_id for m in r.messages] == [s.msg_id for s in sent]
        assert [m.offset_msg_id for m in r.messages] == [s.offset_msg_id for s in sent]
        r = consumer.pull(mq, 0, expression="TagA")
        assert [m.body for m in r.messages] == [b"m0", b"m3"] and r.next_begin_offset == 4
        assert consumer.pull(mq, 4).status is PullStatus.NO_NEW_MSG

        assert admin.max_offset(mq) == 4 and admin.min_offset(mq) == 0
        assert consumer.query_consumer_offset(mq) in (None, 0)
        consumer.update_consumer_offset(mq, 3)
        assert consumer.query_consumer_offset(mq) == 3
        assert admin.consumer_offset("it-cg", mq) == 3
        both = [(MessageQueue("it-topic", mq.broker_name, q), 10 + q) for q in (0, 1)]
        assert consumer.update_consumer_offsets(both) == [None, None]  # one call, concurrent requests
        assert [consumer.query_consumer_offset(q) for q, _ in both] == [10, 11]
        assert admin.search_offset(mq, 0) == 0

        configs = admin.all_topic_config(cluster.primary("broker-a").listen)
        assert configs["it-topic"].read_queue_nums == 2


def test_batch_and_compression_round_trip(cluster: LocalCluster) -> None:
    addr = cluster.namesrv_addr
    with Admin(addr) as admin, Producer(addr, compress_over=64) as producer, \
            PullConsumer(addr, "it-cg2", heartbeat_interval=None) as consumer:
        admin.create_topic("it-batch", queue_nums=1)
        admin.wait_for_route("it-batch", timeout=10)
        mq = MessageQueue("it-batch", "broker-b", 0)
        result = producer.send_batch([new_message("it-batch", f"b{i}".encode()) for i in range(5)], mq)
        assert len(result.msg_ids) == 5 and len(result.offset_msg_ids) == 5
        big = b"0123456789" * 100
        producer.send(new_message("it-batch", big), mq)
        r = consumer.pull(mq, 0)
        assert [m.body for m in r.messages] == [f"b{i}".encode() for i in range(5)] + [big]
        assert [m.msg_id for m in r.messages[:5]] == list(result.msg_ids)


def test_auto_create_through_tbw102(cluster: LocalCluster) -> None:
    addr = cluster.namesrv_addr
    with Producer(addr) as producer, Admin(addr) as admin:
        result = producer.send(new_message("it-auto-created", b"x"))
        assert result.ok
        route = admin.wait_for_route("it-auto-created", timeout=10)
        assert route.queue_datas
    with Producer(addr, auto_create_topic=False) as producer, pytest.raises(TopicNotExistError):
        producer.send(new_message("it-never-created", b"x"))


def test_long_poll_wakes_on_arrival(cluster: LocalCluster) -> None:
    addr = cluster.namesrv_addr
    with Admin(addr) as admin, Producer(addr) as producer, \
            PullConsumer(addr, "it-cg3", heartbeat_interval=None) as consumer:
        admin.create_topic("it-lp", queue_nums=1)
        admin.wait_for_route("it-lp", timeout=10)
        mq = MessageQueue("it-lp", "broker-a", 0)
        fut = producer.send_async(new_message("it-lp", b"late"), mq)
        start = time.monotonic()
        r = consumer.pull(mq, 0, suspend_timeout_ms=5000)
        fut.result(5)
        if r.status is PullStatus.NO_NEW_MSG:  # the pull may have raced ahead of the send
            r = consumer.pull(mq, 0, suspend_timeout_ms=5000)
        assert r.status is PullStatus.FOUND and r.messages[0].body == b"late"
        assert time.monotonic() - start < 5


def test_heartbeat_lists_consumer(cluster: LocalCluster) -> None:
    addr = cluster.namesrv_addr
    with Admin(addr) as admin, PullConsumer(addr, "it-hb") as consumer:
        admin.create_topic("it-hb-topic", queue_nums=1)
        admin.wait_for_route("it-hb-topic", timeout=10)
        consumer.pull(MessageQueue("it-hb-topic", "broker-a", 0), 0)
        consumer.heartbeat()
        assert consumer.client_id in admin.consumer_list("it-hb", "it-hb-topic")


def test_concurrent_sends_to_one_queue_keep_call_order(cluster: LocalCluster) -> None:
    """A fresh producer (route cache and connections cold) started on many sends to one queue at once: they
    are stored in call order. tests/unit/test_producer_order.py pins down the interleavings."""
    addr = cluster.namesrv_addr
    with Admin(addr) as admin:
        admin.create_topic("it-order", queue_nums=1, cluster="it")
        admin.wait_for_route("it-order", timeout=10)
    mq = MessageQueue("it-order", "broker-b", 0)
    for round_ in range(3):
        with Producer(addr, "it-order-pg", shared_runtime=False) as producer:
            futures = [producer.send_async(new_message("it-order", f"{round_}-{i}".encode()), mq) for i in range(20)]
            offsets = [f.result(10).queue_offset for f in futures]
        assert offsets == list(range(offsets[0], offsets[0] + 20)), offsets
