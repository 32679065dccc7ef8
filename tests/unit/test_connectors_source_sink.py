"""Pure parts of the rocketmq Spark source and sink: admission control, partition planning, options,
property rules and the offset-log reader (no Spark session, no broker)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.client import MessageQueue, PullResult, PullStatus
from connectors.core.errors import DataLossError, ReplicatorConfigError, SourceUnavailableError
from connectors.core.offsets import SourceOffset, queue_key
from connectors.core.spark_checkpoint import read_offset_log
from connectors.replication.forwarding import DROPPED_PROPERTIES, target_properties
from connectors.replication.loop_guard import CHAIN_PROPERTY
from connectors.replication.planning import QueueRange, admit, distribute_limit, plan_ranges
from connectors.replication.reader_options import SourceOptions
from connectors.replication.records import ReplicationCommitMessage
from connectors.replication.writer_options import SinkOptions
from tests.support.clocks import MillisClock

Q = [MessageQueue("T", f"b{i % 2}", i) for i in range(6)]


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), st.integers(0, 20_000))
def test_distribute_limit_never_exceeds(backlogs: list[int], limit: int) -> None:
    backlog = dict(zip(Q, backlogs, strict=False))
    alloc = distribute_limit(backlog, limit)
    assert sum(alloc.values()) == min(limit, sum(backlog.values()))
    assert all(0 < n <= backlog[q] for q, n in alloc.items())


def test_distribute_limit_is_proportional() -> None:
    alloc = distribute_limit({Q[0]: 900, Q[1]: 100, Q[2]: 0}, 100)
    assert alloc == {Q[0]: 90, Q[1]: 10}


@given(st.lists(st.integers(0, 5_000), min_size=1, max_size=6), st.integers(0, 12_000), st.integers(1, 3_000),
       st.sampled_from([None, *Q]))
def test_admit_grants_exactly_the_budget_in_ranges_of_at_least_min_range(
        backlogs: list[int], limit: int, min_range: int, after: MessageQueue | None) -> None:
    backlog = dict(zip(Q, backlogs, strict=False))
    granted = admit(backlog, limit, min_range, after)
    assert sum(granted.take.values()) == min(limit, sum(backlog.values()))
    assert all(0 < n <= backlog[q] for q, n in granted.take.items())
    if sum(backlog.values()) > limit:  # only the last queue served may get less than min(backlog, min_range)
        short = [q for q, n in granted.take.items() if n < min(backlog[q], min_range)]
        assert len(short) <= 1


def test_admit_takes_turns_when_the_budget_cannot_give_every_queue_min_range() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(10)]
    backlog = dict.fromkeys(queues, 5_000)
    served: list[set[MessageQueue]] = []
    after = None
    for _ in range(4):  # 3 queues a batch (3,000 / 1,000), continuing where the previous batch stopped
        granted = admit(backlog, 3_000, 1_000, after)
        assert set(granted.take.values()) == {1_000}
        served.append(set(granted.take))
        after = granted.next_after
    assert [sorted(q.queue_id for q in s) for s in served] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 1, 9]]


def test_admit_gives_every_queue_an_equal_share_when_the_budget_allows_then_the_rest_in_proportion() -> None:
    granted = admit({Q[0]: 10_000, Q[1]: 10_000, Q[2]: 300}, 9_000, 1_000)
    assert granted == admit({Q[2]: 300, Q[1]: 10_000, Q[0]: 10_000}, 9_000, 1_000)
    assert granted.take == {Q[0]: 4_350, Q[1]: 4_350, Q[2]: 300} and granted.next_after is None
    assert admit({Q[0]: 10, Q[1]: 20}, 100, 1_000).take == {Q[0]: 10, Q[1]: 20}  # everything fits


def test_plan_ranges_one_per_moved_queue_and_new_queues_from_earliest() -> None:
    start = SourceOffset.of({Q[0]: 5, Q[1]: 7})
    end = SourceOffset.of({Q[0]: 10, Q[1]: 7, Q[2]: 3})
    ranges = plan_ranges(start, end)
    assert ranges == [QueueRange("T", "b0", 0, 5, 10, False), QueueRange("T", "b0", 2, 0, 3, True)]
    assert pickle.loads(pickle.dumps(ranges)) == ranges


def test_plan_ranges_min_partitions_splits_contiguously() -> None:
    start = SourceOffset.of({Q[0]: 0, Q[1]: 0})
    end = SourceOffset.of({Q[0]: 100, Q[1]: 10})
    ranges = plan_ranges(start, end, min_partitions=6)
    assert len(ranges) >= 6
    for queue in (Q[0], Q[1]):
        mine = [r for r in ranges if r.queue == queue]
        assert mine[0].start == 0 and mine[-1].end == end.queues[queue]
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))


def test_source_options_validation() -> None:
    base = {"namesrv": "127.0.0.1:9876", "cluster": "c"}
    with pytest.raises(ReplicatorConfigError, match="exactly one"):
        SourceOptions.from_options(base)
    with pytest.raises(ReplicatorConfigError, match="maxMessagesPerTrigger"):
        SourceOptions.from_options({**base, "topics": "A", "maxMessagesPerTrigger": "0"})
    with pytest.raises(ReplicatorConfigError, match="startingOffsets"):
        SourceOptions.from_options({**base, "topics": "A", "startingOffsets": "yesterday"})
    opts = SourceOptions.from_options({**base, "TOPICS": "A, B", "maxmessagespertrigger": "10"})
    assert opts.selection.topics == ("A", "B") and opts.max_messages_per_trigger == 10
    assert opts.group.startswith("CID_RMQ_SYS_REPLICATOR_")


def test_sink_options_need_target_and_checkpoint_for_tables() -> None:
    with pytest.raises(ReplicatorConfigError, match="namesrv"):
        SinkOptions.from_options({"targetCluster": "t"})
    with pytest.raises(ReplicatorConfigError, match="checkpointLocation"):
        SinkOptions.from_options({"namesrv": "h:1", "targetCluster": "t", "sourceCluster": "s",
                                  "deltaLocation": "/x", "link": "l"})
    with pytest.raises(ReplicatorConfigError, match="failureHook"):
        SinkOptions.from_options({"namesrv": "h:1", "targetCluster": "t", "failurePolicy": "custom"})


def test_target_properties_keep_ids_drop_generated_and_stamp() -> None:
    source = {"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U1", "user": "v", "CLUSTER": "src", "DELAY": "3",
              CHAIN_PROPERTY: "x"}
    out = target_properties(source, "src")
    assert out == {"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U1", "user": "v", CHAIN_PROPERTY: "x,src"}
    assert "CLUSTER" in source  # input untouched
    assert target_properties({}, "src", "OFFSETID")["UNIQ_KEY"] == "OFFSETID"
    assert not DROPPED_PROPERTIES & {"TAGS", "KEYS", "UNIQ_KEY", "WAIT"}


def test_read_offset_log(tmp_path: Path) -> None:
    offsets = SourceOffset.of({Q[0]: 4})
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n' + offsets.to_json())
    assert read_offset_log(str(tmp_path), 3) == offsets
    assert read_offset_log(f"file:{tmp_path}", 3) == offsets
    assert read_offset_log(str(tmp_path), 4) is None
    assert read_offset_log("hdfs://nn/x", 3) is None


def test_acl_credentials_come_from_the_named_environment_variables(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from broker_store.protocol.acl import SessionCredentials
    from connectors.core.errors import CredentialError

    config = tmp_path / "replicator.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "A", "namesrv": "127.0.0.1:9876", "access_key_env": "T_SRC_AK",
                      "secret_key_env": "T_SRC_SK"},
                     {"name": "B", "namesrv": "127.0.0.1:9886", "access_key_env": "T_DST_AK",
                      "secret_key_env": "T_DST_SK"}],
        "links": [{"name": "ab", "source": "A", "target": "B", "topics": {"explicit": [{"source": "T"}]},
                   "checkpoint_location": str(tmp_path / "cp"), "delta_location": str(tmp_path / "d")}]}))
    opts = {"config": str(config), "link": "ab"}
    with pytest.raises(CredentialError, match="T_SRC_AK is not set") as err:
        SourceOptions.from_options(opts)
    assert err.value.field == "clusters[A].access_key_env"
    for var, value in (("T_SRC_AK", "src-ak"), ("T_SRC_SK", "src-secret"), ("T_DST_AK", "dst-ak"),
                       ("T_DST_SK", "dst-secret")):
        monkeypatch.setenv(var, value)
    source = SourceOptions.from_options(opts)
    sink = SinkOptions.from_options(opts)
    assert source.credentials == SessionCredentials("src-ak", "src-secret")
    assert (sink.credentials, sink.source_credentials) == (SessionCredentials("dst-ak", "dst-secret"),
                                                           SessionCredentials("src-ak", "src-secret"))
    # resolved on the driver, they travel pickled with the reader/writer and never show in a repr
    assert pickle.loads(pickle.dumps(sink)).credentials == sink.credentials
    assert "secret" not in repr(source).replace("secret_key", "") + repr(sink).replace("secret_key", "")
    # plain options name the variables too; a missing one is named
    direct = SourceOptions.from_options({"namesrv": "h:1", "topics": "T", "cluster": "A",
                                         "accessKeyEnv": "T_DST_AK", "secretKeyEnv": "T_DST_SK"})
    assert direct.credentials == SessionCredentials("dst-ak", "dst-secret")
    with pytest.raises(CredentialError, match="must be set together") as err:
        SinkOptions.from_options({"namesrv": "h:1", "targetCluster": "B", "sourceAccessKeyEnv": "T_SRC_AK"})
    assert err.value.field == "sourceSecretKeyEnv"


def test_pull_range_raw_trims_to_whole_records_inside_the_range() -> None:
    from broker_store.client import PullResult, PullStatus
    from broker_store.protocol.message import decode_stored_messages, encode_stored_message
    from connectors.replication.pulling import PullSettings, pull_range_raw

    def record(offset: int) -> bytes:
        return encode_stored_message(topic=b"T", queue_id=0, queue_offset=offset, physical_offset=offset * 200,
                                     body=b"m%d" % offset, properties=b"")

    class Stub:
        def __init__(self) -> None:
            self.asked: list[int] = []

        def pull_wait_budget(self) -> float:
            return 1.0

        def pull_async(self, mq: object, at: int, n: int, *, expression: str, decode: bool) -> Future[PullResult]:
            assert decode is False
            self.asked.append(at)
            # the broker answers from an earlier offset than asked and past the range end, in 4s
            first = at - 1 if at > 10 else at
            raw = b"".join(record(o) for o in range(first, first + 4))
            future: Future[PullResult] = Future()
            future.set_result(PullResult(PullStatus.FOUND, first + 4, 0, 100, [], 0, raw=raw))
            return future

    settings = PullSettings(namesrv="h:1", group="g", cluster="c", tags="*", pull_batch_size=4,
                            fail_on_data_loss=True, pull_timeout_ms=1000, row_format="raw")
    stub = Stub()
    got = list(pull_range_raw(settings, QueueRange("T", "b", 0, 10, 17), stub))  # type: ignore[arg-type]
    assert [(r.first_offset, r.last_offset, r.count) for r in got] == [(10, 13, 4), (14, 16, 3)]
    assert [m.queue_offset for r in got for m in decode_stored_messages(r.records)] == list(range(10, 17))
    assert stub.asked == [10, 14]


def _scripted_pulls(answers: list[tuple[PullStatus, int, int]]) -> tuple[list[int], Callable[..., Future[PullResult]]]:
    """A pull_async answering (status, nextBeginOffset, maxOffset) in turn, then the last one forever; FOUND and
    NO_MATCHED_MSG carry the records in [at, nextBeginOffset)."""
    from broker_store.protocol.message import encode_stored_message

    asked: list[int] = []

    def pull_async(mq: object, at: int, n: int, *, expression: str, decode: bool) -> Future[PullResult]:
        status, next_begin, max_offset = answers[min(len(asked), len(answers) - 1)]
        asked.append(at)
        raw = b"".join(encode_stored_message(topic=b"T", queue_id=0, queue_offset=o, physical_offset=o * 200,
                                             body=b"m%d" % o, properties=b"") for o in range(at, next_begin))
        future: Future[PullResult] = Future()
        future.set_result(PullResult(status, next_begin, 0, max_offset, [], 0, raw=raw))
        return future

    return asked, pull_async


def test_a_pull_answered_without_progress_is_retried_like_an_outage_never_lost_or_looped() -> None:
    # A source primary right after its promotion (fenced: serves only up to its confirm offset) or a replica
    # that sends reads to the primary answers at the pulled offset without reading; the reader waits with
    # backoff and goes on, reporting neither a loop nor data loss.
    from connectors.core.outage import OutagePolicy, SourceOutage
    from connectors.replication.pulling import PullSettings, pull_range_raw

    # one pull in flight: the scripted answers pair with the asks in order (pipelined pulls through an outage:
    # tests/unit/test_connectors_source_outage.py)
    settings = PullSettings(namesrv="h:1", group="g", cluster="c", tags="*", pull_batch_size=4,
                            fail_on_data_loss=True, pull_timeout_ms=1000, row_format="raw",
                            retry=OutagePolicy(timeout_ms=5000, backoff_ms=100, backoff_max_ms=400),
                            pulls_in_flight=1)
    clock = MillisClock()

    def outage() -> SourceOutage:
        return SourceOutage(link="l", cluster="c", namesrv="h:1", policy=settings.retry,
                            cluster_has_brokers=lambda: True, clock=clock)

    class Stub:
        def __init__(self, answers: list[tuple[PullStatus, int, int]]) -> None:
            self.asked, self.pull_async = _scripted_pulls(answers)
            self.routes_forgotten = 0

        def pull_wait_budget(self) -> float:
            return 1.0

        def forget_route(self, topic: str) -> None:
            assert topic == "T"
            self.routes_forgotten += 1

    stub = Stub([(PullStatus.NO_MATCHED_MSG, 10, 20), (PullStatus.NO_NEW_MSG, 10, 20),
                 (PullStatus.FOUND, 14, 20), (PullStatus.FOUND, 16, 20)])
    task_outage = outage()
    got = list(pull_range_raw(settings, QueueRange("T", "b", 0, 10, 16), stub,  # type: ignore[arg-type]
                              outage=task_outage))
    assert [(r.first_offset, r.last_offset) for r in got] == [(10, 13), (14, 15)]
    assert stub.asked == [10, 10, 10, 14] and task_outage.retries == 2 and clock.now_ms > 1_700_000_000_000
    # an answer that never advances ends the task after retry_timeout_ms, naming what it saw
    stuck = Stub([(PullStatus.NO_MATCHED_MSG, 10, 20)])
    with pytest.raises(SourceUnavailableError, match=r"pulling T/b/0 at offset 10: QueueNotServedError: "
                                                      r"NO_MATCHED_MSG at 10 \(nextBeginOffset 10"):
        list(pull_range_raw(settings, QueueRange("T", "b", 0, 10, 16), stuck,  # type: ignore[arg-type]
                            outage=outage()))
    # a queue that ends before the planned end (which the source's primary gave): a broker deposed by a failover
    # answering on this worker's stale route, behind the new primary -- the route is asked anew and the pull
    # repeated; the new primary has the range: nothing lost, nothing skipped (soak, a source primary-pause: the
    # thawed ex-primary answered "ends at 62910" for a range planned to 62970 and the link failed on data loss)
    deposed = Stub([(PullStatus.NO_NEW_MSG, 10, 10), (PullStatus.FOUND, 14, 20), (PullStatus.FOUND, 16, 20)])
    got = list(pull_range_raw(settings, QueueRange("T", "b", 0, 10, 16), deposed,  # type: ignore[arg-type]
                              outage=outage()))
    assert [(r.first_offset, r.last_offset) for r in got] == [(10, 13), (14, 15)]
    assert deposed.asked == [10, 10, 14] and deposed.routes_forgotten == 1
    # a queue that really ends before the planned end stays short on every fresh route: data loss once the
    # grace (BEHIND_GRACE_MS, within retry_timeout_ms) is spent, never a skipped range
    short = Stub([(PullStatus.NO_NEW_MSG, 10, 12)])
    started = clock.now_ms
    with pytest.raises(DataLossError, match=r"the queue ends at 12, before the planned end 16 \(truncated or "
                                            r"re-created\), still after 5.0s and \d+ route refresh"):
        list(pull_range_raw(settings, QueueRange("T", "b", 0, 10, 16), short,  # type: ignore[arg-type]
                            outage=outage()))
    assert set(short.asked) == {10} and short.routes_forgotten == len(short.asked)
    assert clock.now_ms - started == 5000  # min(retry_timeout_ms 5 s, BEHIND_GRACE_MS 30 s)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 500)), min_size=1, max_size=12),
       st.integers(1, 6), st.integers(1, 8))
def test_group_ranges_keeps_each_queue_whole_and_in_order(sizes: list[tuple[int, int]], min_parts: int,
                                                          max_parts: int) -> None:
    from connectors.replication.planning import QueueRangeGroup, group_ranges

    queues = {MessageQueue("T", f"b{q % 2}", q): n for q, n in sizes}
    ranges = plan_ranges(SourceOffset.of(dict.fromkeys(queues, 0)), SourceOffset.of(queues), min_partitions=min_parts)
    grouped = group_ranges(ranges, max_parts)
    assert pickle.loads(pickle.dumps(grouped)) == grouped
    if len(ranges) <= max_parts:  # few enough: unchanged (minPartitions may have split a queue)
        assert grouped == ranges
        return
    assert len(grouped) <= max_parts
    flat = [r for p in grouped for r in (p.ranges if isinstance(p, QueueRangeGroup) else (p,))]
    def by_queue(r: QueueRange) -> tuple[str, int]:
        return queue_key(r.queue), r.start
    assert sorted(flat, key=by_queue) == sorted(ranges, key=by_queue)
    for p in grouped:
        members = p.ranges if isinstance(p, QueueRangeGroup) else (p,)
        for queue in {r.queue for r in members}:
            mine = [r for r in members if r.queue == queue]
            assert [r for r in flat if r.queue == queue] == mine  # one group per queue, offsets ascending
            assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))


def test_group_ranges_balances_by_size() -> None:
    from connectors.replication.planning import QueueRangeGroup, group_ranges

    sizes = {MessageQueue("T", "b", q): n for q, n in enumerate([900, 100, 500, 500, 10])}
    grouped = group_ranges(plan_ranges(SourceOffset.of(dict.fromkeys(sizes, 0)), SourceOffset.of(sizes)), 2)
    loads = sorted(sum(r.size for r in (p.ranges if isinstance(p, QueueRangeGroup) else (p,))) for p in grouped)
    assert loads == [1000, 1010]
    with pytest.raises(ReplicatorConfigError, match="minPartitions 4 exceeds maxPartitions 2"):
        SourceOptions.from_options({"namesrv": "h:1", "topics": "T", "cluster": "A", "minPartitions": "4",
                                    "maxPartitions": "2"})


def test_sink_pulls_every_range_of_a_task_concurrently(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark may hand the ranges rows over one per Arrow batch: the writer still starts every range's pulls
    before it takes any result, and takes the results round-robin (not one range after the other)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from broker_store.client import PullResult, PullStatus
    from connectors.core import executor
    from connectors.core.rows import RANGES_ARROW_SCHEMA
    from connectors.replication import partition_writer, sending, writer

    events: list[tuple[str, int]] = []

    def fake_pull_results(settings: object, queue: QueueRange, *, decode: bool, outage: object) -> object:
        events.append(("start", queue.queue_id))

        def pulls() -> object:
            for at in range(queue.start, queue.end):
                events.append(("result", queue.queue_id))
                yield at, PullResult(PullStatus.FOUND, next_begin_offset=at + 1, min_offset=0, max_offset=queue.end,
                                     messages=[], suggest_which_broker_id=0)
        return pulls()

    monkeypatch.setattr(partition_writer, "pull_results", fake_pull_results)
    monkeypatch.setattr(sending, "target_producer", lambda options: object())
    monkeypatch.setattr(executor, "freeze_worker_heap", lambda: None)
    stream_writer = writer.RocketMQStreamWriter({"namesrv": "127.0.0.1:1", "targetCluster": "dst"},
                                                from_arrow_schema(RANGES_ARROW_SCHEMA))
    rows = [pa.RecordBatch.from_pylist([{
        "topic": "T", "brokerName": "b0", "queueId": qid, "startOffset": 0, "endOffset": 2, "fromEarliest": False,
        "sourceCluster": "src", "sourceNamesrv": "127.0.0.1:1", "consumerGroup": "G", "tagFilter": None,
        "pullBatchSize": 1024, "pullTimeoutMs": 1000, "failOnDataLoss": True}], schema=RANGES_ARROW_SCHEMA)
        for qid in range(3)]
    message = stream_writer.write(iter(rows))
    assert events[:3] == [("start", 0), ("start", 1), ("start", 2)]
    assert [q for kind, q in events[3:]] == [0, 1, 2, 0, 1, 2]
    assert isinstance(message, ReplicationCommitMessage)
    assert message.delivered == 0 and not message.failures


def test_queue_placement_counts_source_queues_where_the_rows_pull_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """preserveQueues without the sink's sourceNamesrv option (a query not built from config + link): the
    source topic's queues are listed on the name server the ranges rows name, and each source queue keeps
    its position on the target."""
    from broker_store.client import MessageQueue
    from connectors.replication import placement as placement_module
    from connectors.replication.placement import QueuePlacement

    asked: list[str] = []
    sources = [MessageQueue("S", "b1", 1), MessageQueue("S", "b1", 0), MessageQueue("S", "b0", 1),
               MessageQueue("S", "b0", 0)]

    class FakeAdmin:
        def topic_route(self, topic: str) -> str:
            return topic

    def fake_admin(namesrv: str, credentials: object, tls: object = None) -> FakeAdmin:
        asked.append(namesrv)
        return FakeAdmin()

    class FakeProducer:
        def writable_queues(self, topic: str) -> list[MessageQueue]:
            return [MessageQueue(topic, "t0", q) for q in range(4)]

    monkeypatch.setattr(placement_module, "executor_admin", fake_admin)
    monkeypatch.setattr(placement_module, "subscribe_queues", lambda topic, route: sorted(sources))
    options = SinkOptions(namesrv="127.0.0.1:2", target_cluster="dst")
    assert options.source_namesrv is None and options.preserve_queues
    placement = QueuePlacement(options, FakeProducer())  # type: ignore[arg-type]
    placement.pulled_from("S", "127.0.0.1:9876")
    placed = [placement.place("T", MessageQueue("S", mq.broker_name, mq.queue_id)) for mq in sorted(sources)]
    assert asked == ["127.0.0.1:9876"]
    assert placed == [MessageQueue("T", "t0", q) for q in range(4)]
