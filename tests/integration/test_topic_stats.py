"""GET_TOPIC_STATS_INFO against real broker processes (tests/support harness), and the replication reader
using it: one request per (topic, broker group) yields exactly the offsets GET_MIN_OFFSET / GET_MAX_OFFSET
answer queue by queue. The codec and the reader's fallbacks without a broker: tests/unit/test_topic_stats.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.protocol.errors import TopicNotExistError
from broker_store.protocol.topic_stats import TopicOffset
from tests.support.processes import GroupSpec, LocalCluster

pytestmark = pytest.mark.integration

TOPIC, OTHER = "stats-topic", "stats-other"
QUEUES = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A name server and two single-broker groups; two topics of 3 queues on both, queue q of group g
    holding g * 3 + q messages of TOPIC and one of OTHER."""
    with LocalCluster(tmp_path_factory.mktemp("topic-stats"), "it",
                      [GroupSpec("broker-a"), GroupSpec("broker-b")]) as started:
        with Admin(started.namesrv_addr) as admin, Producer(started.namesrv_addr, "stats-pg") as producer:
            for topic in (TOPIC, OTHER):
                admin.create_topic(topic, queue_nums=QUEUES, cluster="it")
                admin.wait_for_route(topic, timeout=10, min_queues=2 * QUEUES)
            for g, group in enumerate(("broker-a", "broker-b")):
                for q in range(QUEUES):
                    for i in range(g * 3 + q):
                        producer.send(new_message(TOPIC, f"m{i}".encode()), MessageQueue(TOPIC, group, q))
                    producer.send(new_message(OTHER, b"o"), MessageQueue(OTHER, group, q))
        yield started


def test_topic_stats_answers_every_queue_as_the_per_queue_requests_do(cluster: LocalCluster) -> None:
    with Admin(cluster.namesrv_addr) as admin, PullConsumer(cluster.namesrv_addr, "stats-cg",
                                                            heartbeat_interval=None) as consumer:
        for group in ("broker-a", "broker-b"):
            table = admin.topic_stats(cluster.primary(group).listen, TOPIC)
            assert sorted(table.offsets) == [MessageQueue(TOPIC, group, q) for q in range(QUEUES)]
            for key, offsets in table.offsets.items():
                mq = MessageQueue(TOPIC, group, key.queue_id)
                high = admin.max_offset(mq)
                stored = 0
                if high:
                    pulled = consumer.pull(mq, high - 1)
                    assert pulled.status is PullStatus.FOUND
                    stored = pulled.messages[-1].store_timestamp
                assert offsets == TopicOffset(admin.min_offset(mq), high, stored)
            assert admin.topic_offsets(TOPIC, group) == {k.queue_id: o for k, o in table.offsets.items()}
        assert admin.topic_offsets(TOPIC, "broker-b")[2].max_offset == 5
        with pytest.raises(TopicNotExistError, match="stats-none"):
            admin.topic_stats(cluster.primary("broker-a").listen, "stats-none")


class CountingAdmin(Admin):
    """The reader's Admin, counting the offset requests it sends."""

    requests: Counter[str]

    def topic_offsets(self, topic: str, broker_name: str) -> dict[int, TopicOffset]:
        self.requests["GET_TOPIC_STATS_INFO"] += 1
        return super().topic_offsets(topic, broker_name)

    def max_offset(self, mq: MessageQueue) -> int:
        self.requests["GET_MAX_OFFSET"] += 1
        return super().max_offset(mq)


def test_the_reader_learns_max_offsets_with_one_request_per_topic_and_group(cluster: LocalCluster) -> None:
    from connectors.replication.reader import RocketMQStreamReader

    reader = RocketMQStreamReader({"namesrv": cluster.namesrv_addr, "cluster": "it", "topics": f"{TOPIC},{OTHER}"})
    admin = CountingAdmin(cluster.namesrv_addr)
    admin.requests = Counter()
    reader._state.admin = admin
    try:
        queues = reader.discover_queues()
        assert len(queues) == 2 * 2 * QUEUES
        maxes = reader.max_offsets(queues)
        assert admin.requests == Counter({"GET_TOPIC_STATS_INFO": 4})
        with Admin(cluster.namesrv_addr) as plain:
            per_queue = {q: plain.max_offset(q) for q in queues}
        assert maxes == per_queue
        assert maxes[MessageQueue(TOPIC, "broker-b", 2)] == 5 and maxes[MessageQueue(OTHER, "broker-a", 0)] == 1
    finally:
        reader.stop()
