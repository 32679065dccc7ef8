"""GET_TOPIC_STATS_INFO without a broker: the TopicStatsTable codec against fastjson's text (golden bytes,
keys that are MessageQueue objects), and the replication reader learning a trigger's max offsets with one
request per (topic, broker group), falling back to GET_MAX_OFFSET per queue only where a broker refuses.
The real-process counterpart is tests/integration/test_topic_stats.py."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from broker_store.client import MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import (
    ProtocolError,
    RocketMQError,
    TopicNotExistError,
    TransportError,
    error_for_response,
)
from broker_store.protocol.topic_stats import TopicOffset, TopicStatsTable
from connectors.core.errors import SourceUnavailableError
from tests.unit.test_connectors_source_outage import FakeClock, _reader

GOLDEN = (b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:{"lastUpdateTimestamp":0,'
          b'"maxOffset":0,"minOffset":0},{"brokerName":"broker-a","queueId":1,"topic":"Orders"}:'
          b'{"lastUpdateTimestamp":1700000000123,"maxOffset":42,"minOffset":7}},"topicPutTps":0.0}')
TABLE = TopicStatsTable({MessageQueue("Orders", "broker-a", 1): TopicOffset(7, 42, 1700000000123),
                         MessageQueue("Orders", "broker-a", 0): TopicOffset(0, 0, 0)})


def test_encode_writes_fastjson_text_with_message_queue_keys() -> None:
    assert TABLE.encode() == GOLDEN
    assert TopicStatsTable.decode(GOLDEN, "b") == TABLE


def test_decode_reads_pretty_4x_and_string_key_forms() -> None:
    pretty = (b'{\n\t"offsetTable":{\n\t\t{\n\t\t\t"brokerName":"broker-a",\n\t\t\t"queueId":1,\n\t\t\t'
              b'"topic":"Orders"\n\t\t}:{\n\t\t\t"lastUpdateTimestamp":1700000000123,\n\t\t\t"maxOffset":42,'
              b'\n\t\t\t"minOffset":7\n\t\t}\n\t},\n\t"topicPutTps":1.5\n}')
    assert TopicStatsTable.decode(pretty, "b") == TopicStatsTable(
        {MessageQueue("Orders", "broker-a", 1): TopicOffset(7, 42, 1700000000123)}, 1.5)
    no_tps = b'{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T"}:{"maxOffset":5,"minOffset":1}}}'
    assert TopicStatsTable.decode(no_tps, "b").offsets == {MessageQueue("T", "b", 3): TopicOffset(1, 5, 0)}
    string_keys = (b'{"offsetTable":{"{\\"brokerName\\":\\"b\\",\\"queueId\\":3,\\"topic\\":\\"T\\"}":'
                   b'{"maxOffset":5,"minOffset":1}},"topicPutTps":0.0}')
    assert TopicStatsTable.decode(string_keys, "b").offsets == {MessageQueue("T", "b", 3): TopicOffset(1, 5, 0)}
    braces_in_a_string = (b'{"offsetTable":{{"brokerName":"b{:}","queueId":0,"topic":"T"}:'
                          b'{"maxOffset":1,"minOffset":0}}}')
    assert list(TopicStatsTable.decode(braces_in_a_string, "b").offsets) == [MessageQueue("T", "b{:}", 0)]


@pytest.mark.parametrize("body", [b"", b"[]", b'{"offsetTable":[]}', b'{"offsetTable":{{"queueId":0}:{}}}',
                                  b'{"offsetTable":{{"brokerName":"b","queueId":"x","topic":"T"}:{}}}', b"\xff"])
def test_a_malformed_table_is_a_protocol_error_naming_the_broker(body: bytes) -> None:
    with pytest.raises(ProtocolError, match=r"^GET_TOPIC_STATS_INFO from 10\.0\.0\.1:10911: malformed"):
        TopicStatsTable.decode(body, "10.0.0.1:10911")


class StatsAdmin:
    """Two topics on two broker groups, 3 queues each (max offset 100 * group + 10 * topic + queue id);
    records every request. ``refuse``: (topic, group) -> error of its GET_TOPIC_STATS_INFO; ``short``:
    groups whose answer lacks queue 2; ``down``: requests that fail with a refused connection first."""

    def __init__(self, refuse: dict[tuple[str, str], RocketMQError] | None = None,
                 short: frozenset[tuple[str, str]] = frozenset(), down: int = 0) -> None:
        self.refuse = refuse or {}
        self.short = short
        self.down = down
        self.requests: list[tuple[str, ...]] = []

    @staticmethod
    def expected(topic: str, broker: str, queue_id: int) -> int:
        return 100 * int(broker[-1]) + 10 * (topic == "B") + queue_id

    def cluster_info(self) -> Any:
        from types import SimpleNamespace
        return SimpleNamespace(cluster_addr_table={"src": []}, broker_addr_table={"g1": {}, "g2": {}})

    def _reachable(self) -> None:
        if self.down > 0:
            self.down -= 1
            raise TransportError("cannot connect to 127.0.0.1:10911")

    def topic_offsets(self, topic: str, broker_name: str) -> dict[int, TopicOffset]:
        self.requests.append(("stats", topic, broker_name))
        self._reachable()
        if (topic, broker_name) in self.refuse:
            raise self.refuse[(topic, broker_name)]
        ids = (0, 1) if (topic, broker_name) in self.short else (0, 1, 2)
        return {q: TopicOffset(self.expected(topic, broker_name, q) // 2, self.expected(topic, broker_name, q), 0)
                for q in ids}

    def min_offset(self, mq: MessageQueue) -> int:
        self.requests.append(("min", mq.topic, mq.broker_name, str(mq.queue_id)))
        self._reachable()
        return self.expected(mq.topic, mq.broker_name, mq.queue_id) // 2

    def max_offset(self, mq: MessageQueue) -> int:
        self.requests.append(("max", mq.topic, mq.broker_name, str(mq.queue_id)))
        self._reachable()
        return self.expected(mq.topic, mq.broker_name, mq.queue_id)


QUEUES = [MessageQueue(t, b, q) for t in ("A", "B") for b in ("g1", "g2") for q in range(3)]
TRUTH = {q: StatsAdmin.expected(q.topic, q.broker_name, q.queue_id) for q in QUEUES}


def _stats_reader(monkeypatch: pytest.MonkeyPatch, admin: StatsAdmin, clock: FakeClock | None = None) -> Any:
    return _reader(monkeypatch, admin, clock or FakeClock(), topics="A,B")  # type: ignore[arg-type]


def test_max_offsets_cost_one_request_per_topic_and_broker_group(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = StatsAdmin()
    assert _stats_reader(monkeypatch, admin).max_offsets(QUEUES) == TRUTH
    assert sorted(admin.requests) == [("stats", t, b) for t in ("A", "B") for b in ("g1", "g2")]


def test_min_offsets_cost_one_request_per_topic_and_broker_group_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """New queues (a new link, queues taking turns under maxMessagesPerTrigger) ask topic stats, not each queue."""
    admin = StatsAdmin(short=frozenset({("B", "g1")}))
    assert _stats_reader(monkeypatch, admin).min_offsets(QUEUES) == {q: n // 2 for q, n in TRUTH.items()}
    assert sorted(admin.requests) == sorted([("stats", t, b) for t in ("A", "B") for b in ("g1", "g2")]
                                            + [("min", "B", "g1", "2")])


def test_latest_offset_of_an_idle_trigger_asks_each_group_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-trigger path: ``latestOffset`` of a query whose every queue is at its max offset."""
    from connectors.core.offsets import SourceOffset

    admin = StatsAdmin()
    reader = _stats_reader(monkeypatch, admin)
    monkeypatch.setattr(reader, "discover_queues", lambda: list(QUEUES))
    start = SourceOffset.of(TRUTH).to_dict()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert [r[0] for r in admin.requests] == ["stats"] * 4


def test_latest_offset_with_new_queues_reads_their_min_and_every_max_from_one_answer_per_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A trigger with queues read for the first time needs their min offsets and every queue's max offset: one
    GET_TOPIC_STATS_INFO per (topic, broker group) serves both (``source_offsets.queue_offsets``), not two."""
    from connectors.core.offsets import SourceOffset

    admin = StatsAdmin()
    reader = _stats_reader(monkeypatch, admin)
    monkeypatch.setattr(reader, "discover_queues", lambda: list(QUEUES))
    old = [q for q in QUEUES if q.topic == "A"]
    start = SourceOffset.of({q: TRUTH[q] for q in old}).to_dict()
    end = SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues
    assert end == TRUTH  # the new queues (topic B) read from their min offset up to their max
    assert sorted(admin.requests) == [("stats", t, b) for t in ("A", "B") for b in ("g1", "g2")]


def test_queue_offsets_asks_both_bounds_of_a_queue_the_stats_do_not_cover(monkeypatch: pytest.MonkeyPatch) -> None:
    from connectors.replication import source_offsets

    admin = StatsAdmin(short=frozenset({("A", "g1")}))
    reader = _stats_reader(monkeypatch, admin)
    got = source_offsets.queue_offsets(admin, reader.outage, QUEUES)  # type: ignore[arg-type]
    assert got == {q: (n // 2, n) for q, n in TRUTH.items()}
    assert sorted(r for r in admin.requests if r[0] != "stats") == [("max", "A", "g1", "2"), ("min", "A", "g1", "2")]


def test_refused_groups_and_uncovered_queues_are_asked_queue_by_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse: dict[tuple[str, str], RocketMQError] = {
        ("A", "g1"): TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "topic[A] not exist"),
        ("B", "g2"): error_for_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request type 202 not supported"),
    }
    admin = StatsAdmin(refuse=refuse, short=frozenset({("A", "g2")}))
    assert _stats_reader(monkeypatch, admin).max_offsets(QUEUES) == TRUTH
    per_queue = sorted(r[1:] for r in admin.requests if r[0] == "max")
    assert per_queue == sorted([("A", "g1", str(q)) for q in range(3)] + [("A", "g2", "2")]
                               + [("B", "g2", str(q)) for q in range(3)])
    assert len([r for r in admin.requests if r[0] == "stats"]) == 4


def test_any_other_refusal_is_raised_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = StatsAdmin(refuse={("B", "g1"): ProtocolError("GET_TOPIC_STATS_INFO from x: malformed")})
    with pytest.raises(ProtocolError, match="malformed"):
        _stats_reader(monkeypatch, admin).max_offsets(QUEUES)


def test_the_group_request_rides_out_a_source_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    admin = StatsAdmin(down=2)
    reader = _stats_reader(monkeypatch, admin, clock)
    queues = [q for q in QUEUES if q.topic == "A" and q.broker_name == "g1"]
    assert reader.max_offsets(queues) == {q: TRUTH[q] for q in queues}
    assert clock.sleeps == [0.1, 0.2] and [r[0] for r in admin.requests] == ["stats"] * 3
    reader = _stats_reader(monkeypatch, StatsAdmin(down=1000))  # a fresh clock, the budget from 500.0
    with pytest.raises(SourceUnavailableError, match=r"unavailable for 30.0s while reading the max offsets of "
                                                     r"topic A on broker group g1: TransportError"):
        reader.max_offsets(queues)


def test_latest_offset_records_the_sources_max_offsets_once_per_change_and_obeys_the_stop_marker(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """With the link's tables (``deltaLocation``), each trigger's max offsets go to the durable record the
    failover audits (``source_maxes``), written only when one changed or the record is due; the failover's stop
    marker (``link_stop``) makes a trigger plan nothing and ask the source nothing."""
    from connectors.core.offsets import SourceOffset
    from connectors.replication.link_stop import LinkStop, stop_link
    from connectors.replication.source_maxes import RECORD_FILE, read_source_maxes

    clock = FakeClock()
    admin = StatsAdmin()
    reader = _reader(monkeypatch, admin, clock, topics="A,B", deltaLocation=str(tmp_path))  # type: ignore[arg-type]
    monkeypatch.setattr(reader, "discover_queues", lambda: list(QUEUES))
    start = SourceOffset.of(TRUTH).to_dict()
    reader.latestOffset(start, ReadAllAvailable())
    record = read_source_maxes(tmp_path / "L")
    assert record is not None and record.cluster == "src"
    assert {q: o.max_offset for q, o in record.queues.items()} == TRUTH
    assert all(o.observed_at == clock.time() for o in record.queues.values())
    written = (tmp_path / "L" / RECORD_FILE).stat().st_mtime_ns
    clock.now += 1
    reader.latestOffset(start, ReadAllAvailable())  # nothing changed, not due: no write
    assert (tmp_path / "L" / RECORD_FILE).stat().st_mtime_ns == written

    stop_link(tmp_path / "L", LinkStop("op", "failover", 0.0))
    admin.requests.clear()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert admin.requests == []


def test_a_lifted_stop_starts_the_next_batch_at_the_links_delta_resume_point_where_that_is_ahead(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A reader held by the stop marker (a reverse link waiting for a switchover, a link stopped by a failover)
    whose query stands behind the Delta resume point the releaser committed starts its next batch there: the
    offsets between are neither read nor sent; a queue behind nothing keeps its position."""
    from connectors.core.offsets import SourceOffset
    from connectors.replication.link_stop import LinkStop, raised_to_floor, resume_link, stop_link
    from connectors.replication.tables import LinkTables

    clock = FakeClock()
    reader = _reader(monkeypatch, StatsAdmin(), clock, topics="A,B", deltaLocation=str(tmp_path))  # type: ignore[arg-type]
    monkeypatch.setattr(reader, "discover_queues", lambda: list(QUEUES))
    held = {q: 0 for q in QUEUES}
    start = SourceOffset.of(held).to_dict()
    stop_link(tmp_path / "L", LinkStop("op", "held for a switchover", 0.0))
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    first, second, *_ = QUEUES
    LinkTables(tmp_path / "L", source_cluster="src").append_resume_point({first: TRUTH[first] - 1, second: 0})
    resume_link(tmp_path / "L")
    end = SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues
    assert end == TRUTH
    ranges = {(r.topic, r.broker_name, r.queue_id): (r.start, r.end) for r in reader.partitions(start, SourceOffset.of(
        end).to_dict()) for r in getattr(r, "ranges", [r])}
    key = (first.topic, first.broker_name, first.queue_id)
    assert ranges[key] == (TRUTH[first] - 1, TRUTH[first])
    assert ranges[(second.topic, second.broker_name, second.queue_id)] == (0, TRUTH[second])
    # a second stop and lift (a failover after the switchover, recover's commit before the lift): the floor is
    # the resume point at this lift, not the first one's
    stop_link(tmp_path / "L", LinkStop("op2", "failover", 1.0))
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    LinkTables(tmp_path / "L", source_cluster="src").append_resume_point({second: TRUTH[second] - 1})
    resume_link(tmp_path / "L")
    again = SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues
    ranges = {(r.topic, r.broker_name, r.queue_id): (r.start, r.end) for r in reader.partitions(start, SourceOffset.of(
        again).to_dict()) for r in getattr(r, "ranges", [r])}
    assert ranges[key] == (TRUTH[first] - 1, TRUTH[first])
    assert ranges[(second.topic, second.broker_name, second.queue_id)] == (TRUTH[second] - 1, TRUTH[second])
    assert raised_to_floor({first: 5}, None) == {first: 5}
    assert raised_to_floor({first: 5, second: 9}, {first: 3, second: 10}) == {first: 5, second: 10}
