"""Link Delta tables: idempotent batch commits (Delta txn), resume offsets, failure replay marking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from broker_store.client import MessageQueue
from connectors.core.errors import TableError
from connectors.core.history_settings import HistorySettings
from connectors.core.maintenance import TableMaintenance
from connectors.core.offsets import SourceOffset
from connectors.core.spark_checkpoint import query_id_from_checkpoint
from connectors.replication.records import (
    BatchMetrics,
    FailedMessage,
    FailureOutcome,
    OffsetMapping,
    RecordedFailure,
    summarise_latencies,
)
from connectors.replication.tables import (
    CURRENT_OFFSETS,
    FAILURES,
    METRICS,
    OFFSET_MAP,
    OFFSETS,
    SCHEMAS,
    LinkTables,
    failure_id,
)
from tests.support.clocks import MillisClock

Q0 = MessageQueue("Orders", "src-a", 0)
Q1 = MessageQueue("Orders", "src-a", 1)


def clock() -> MillisClock:
    """A clock one second later at every reading."""
    return MillisClock(1_700_000_001_000, step_ms=1000)


def tables(tmp_path: Path, tables_clock: MillisClock | None = None) -> LinkTables:
    return LinkTables(tmp_path / "a-to-b", source_cluster="A", clock=tables_clock or clock())


def dismissed(offset: int, queue: MessageQueue = Q0) -> RecordedFailure:
    message = FailedMessage(queue.topic, queue.broker_name, queue.queue_id, offset, f"MSG{offset}",
                            "OrdersDR", b"\x00body", {"KEYS": "k", "ROCKETMQ_REPLICATOR_SOURCE": "Z"},
                            "SystemBusyError", 4, tags="TagA", keys="k", born_timestamp=5, store_timestamp=6)
    return RecordedFailure(message, "dismiss", FailureOutcome.DISMISSED)


def mapping(first: int, last: int) -> OffsetMapping:
    return OffsetMapping("Orders", "src-a", 0, first, last, "OrdersDR", "dst-a", 0, 100 + first, 100 + last,
                         last - first + 1)


def metrics(n: int) -> BatchMetrics:
    return BatchMetrics(messages=n, bytes=10 * n, skipped_loop=1, failed=1,
                        latency=summarise_latencies(range(1, n + 1)), record_age_ms=50, wall_time_ms=9)


def rows(t: LinkTables, table: str) -> list[dict[str, Any]]:
    table_rows: list[dict[str, Any]] = DeltaTable(t.path(table)).to_pyarrow_table().to_pylist()  # pyarrow: untyped
    return table_rows


def test_same_query_and_batch_is_recorded_once(tmp_path: Path) -> None:
    t = tables(tmp_path)
    args = ("query-1", 0, {Q0: 10, Q1: 4}, [mapping(0, 9)], [dismissed(3)], metrics(10))
    first = t.commit_batch(*args)
    assert first.written == {FAILURES: True, OFFSET_MAP: True, METRICS: True, OFFSETS: True, CURRENT_OFFSETS: True}
    versions = {name: DeltaTable(t.path(name)).version() for name in SCHEMAS}

    again = t.commit_batch(*args)
    assert again.duplicate and again.already_committed == frozenset(SCHEMAS)
    assert {name: DeltaTable(t.path(name)).version() for name in SCHEMAS} == versions  # no new commit
    assert [len(rows(t, name)) for name in (OFFSETS, OFFSET_MAP, FAILURES, METRICS, CURRENT_OFFSETS)] == [2, 1, 1, 1, 2]
    # the Delta log carries the txn action that makes this so
    log = (Path(t.path(OFFSETS)) / "_delta_log" / "00000000000000000000.json").read_text()
    assert {"txn": {"appId": "query-1", "version": 0, "lastUpdated": 1_700_000_001_000}} in [
        json.loads(line) for line in log.splitlines()]
    assert t.committed_batch("query-1") == 0 and t.committed_batch("other") is None


def test_a_fresh_instance_also_sees_the_committed_batch(tmp_path: Path) -> None:
    tables(tmp_path).commit_batch("q", 3, {Q0: 1}, [], [], metrics(1))
    again = tables(tmp_path).commit_batch("q", 3, {Q0: 99}, [], [], metrics(1))
    assert again.duplicate
    assert tables(tmp_path).latest_offsets() == {Q0: 1}
    older = tables(tmp_path).commit_batch("q", 2, {Q0: 50}, [], [], metrics(1))  # Spark never goes back
    assert older.duplicate


def test_partial_commit_is_completed_by_the_rerun(tmp_path: Path) -> None:
    t = tables(tmp_path)
    t.commit_batch("q", 0, {}, [mapping(0, 4)], [dismissed(1)], metrics(5))   # crash "before offsets"
    assert t.latest_offsets() == {}
    rerun = t.commit_batch("q", 0, {Q0: 5}, [mapping(0, 4)], [dismissed(1)], metrics(5))
    assert rerun.written[OFFSETS] and rerun.already_committed == {FAILURES, OFFSET_MAP, METRICS}
    assert len(rows(t, FAILURES)) == 1 and t.latest_offsets() == {Q0: 5}


def test_latest_offsets_takes_newest_batch_per_queue_across_queries(tmp_path: Path) -> None:
    t = tables(tmp_path)
    t.commit_batch("q1", 0, {Q0: 10, Q1: 5}, [], [], metrics(1))
    t.commit_batch("q1", 1, {Q0: 20}, [], [], metrics(1))                # Q1 idle in batch 1
    t.commit_batch("q1", 2, {Q0: 30}, [], [], metrics(1))
    # checkpoint lost: a new query restarts batch ids at 0; its rows are still the newest
    t.commit_batch("q2", 0, {Q1: 7}, [], [], metrics(1))
    latest = t.latest_offsets()
    assert latest == {Q0: 30, Q1: 7}
    expected = '{"queues":{"Orders/src-a/0":30,"Orders/src-a/1":7},"version":1}'
    assert SourceOffset.of(latest).to_json() == expected
    # rows of another source cluster (link re-pointed) are ignored
    other = LinkTables(t.location, source_cluster="C")
    assert other.latest_offsets() == {}
    TableMaintenance(t, HistorySettings(), background=False).run_round(t.now_ms())  # compaction, vacuum
    assert t.latest_offsets() == latest and len(rows(t, OFFSETS)) == 5


def test_failures_replay_marking_is_idempotent(tmp_path: Path) -> None:
    t = tables(tmp_path, clock())
    t.commit_batch("q", 0, {Q0: 10}, [], [dismissed(4), dismissed(2)], metrics(10))
    t.commit_batch("q", 1, {Q1: 3}, [], [dismissed(1, Q1)], metrics(3))
    pending = t.unreplayed_failures()
    assert [(f.message.queue, f.message.queue_offset) for f in pending] == [(Q0, 2), (Q0, 4), (Q1, 1)]
    first = pending[0]
    assert first.failure_id == failure_id("q", 0, Q0, 2) and first.batch_id == 0 and not first.replayed
    assert first.message.body == b"\x00body"
    assert first.message.properties == {"KEYS": "k", "ROCKETMQ_REPLICATOR_SOURCE": "Z"}
    assert (first.message.tags, first.message.target_topic, first.message.attempts) == ("TagA", "OrdersDR", 4)

    marked = t.mark_replayed([pending[0].failure_id, pending[2].failure_id], replayed_at_ms=1_800_000_000_000)
    assert marked == 2
    assert t.mark_replayed([pending[0].failure_id, "unknown", "it's"]) == 0            # idempotent
    assert [f.failure_id for f in t.unreplayed_failures()] == [pending[1].failure_id]
    replayed = {r["failure_id"]: r for r in rows(t, FAILURES)}[pending[0].failure_id]
    assert replayed["replayed"] is True and replayed["replayed_at"].timestamp() == 1_800_000_000
    # a replayed commit of batch 0 does not resurrect the failures
    assert t.commit_batch("q", 0, {Q0: 10}, [], [dismissed(4), dismissed(2)], metrics(10)).duplicate
    assert len(rows(t, FAILURES)) == 3


def test_tables_are_plain_delta_readable_back(tmp_path: Path) -> None:
    t = tables(tmp_path)
    t.commit_batch("q", 0, {Q0: 10}, [mapping(0, 9)], [dismissed(3)], metrics(100))
    for name, schema in SCHEMAS.items():
        dt = DeltaTable(t.path(name))
        protocol = dt.protocol()
        assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
        assert not protocol.reader_features and not protocol.writer_features
        assert dt.to_pyarrow_table().schema.names == schema.names
        assert "format 1" in (dt.metadata().description or "")
    (metric,) = rows(t, METRICS)
    assert (metric["latency_p50_ms"], metric["latency_p99_ms"], metric["latency_max_ms"]) == (50, 99, 100)
    (mapped,) = rows(t, OFFSET_MAP)
    assert (mapped["source_first_offset"], mapped["target_last_offset"], mapped["messages"]) == (0, 109, 10)


def test_empty_tables_and_contract_violations(tmp_path: Path) -> None:
    t = tables(tmp_path)
    assert t.latest_offsets() == {} and t.unreplayed_failures() == [] and t.mark_replayed(["x"]) == 0
    assert t.read(FAILURES).num_rows == 0
    blocked = RecordedFailure(dismissed(1).message, "custom", FailureOutcome.FAILED_BATCH)
    with pytest.raises(ValueError, match="must not be committed"):
        t.commit_batch("q", 0, {}, [], [blocked], metrics(1))
    with pytest.raises(ValueError):
        t.commit_batch("", 0, {}, [], [], metrics(1))


def test_query_id_from_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text('{"id":"5f3c-uuid"}\n')
    assert query_id_from_checkpoint(tmp_path) == "5f3c-uuid"
    with pytest.raises(TableError):
        query_id_from_checkpoint(tmp_path / "missing")


def test_concurrent_commit_of_the_same_batch_is_detected(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer 1 checked the txn on a snapshot taken before writer 2 committed the same batch: delta-rs's
    conflict checker rejects writer 1's commit (same app id), and commit_batch reports it as done."""
    t = tables(tmp_path)
    t.commit_batch("q", 0, {Q0: 1}, [], [], metrics(1))
    stale = {name: t.open(name) for name in SCHEMAS}
    tables(tmp_path).commit_batch("q", 1, {Q0: 2}, [], [], metrics(1))      # the other writer wins

    real_open = LinkTables.open
    served: set[str] = set()

    def open_stale_once(self: LinkTables, table: str) -> DeltaTable | None:
        if table not in served:
            served.add(table)
            return stale[table]
        return real_open(self, table)

    monkeypatch.setattr(LinkTables, "open", open_stale_once)
    result = t.commit_batch("q", 1, {Q0: 2}, [], [], metrics(1))
    assert result.duplicate and result.already_committed == {METRICS, OFFSETS, CURRENT_OFFSETS}
    monkeypatch.undo()
    assert len(rows(t, OFFSETS)) == 2 and len(rows(t, METRICS)) == 2


def test_periodic_compaction_keeps_data_txns_and_idempotency(tmp_path: Path) -> None:
    t = LinkTables(tmp_path / "a-to-b", source_cluster="A", clock=clock(),
                   history=HistorySettings(maintenance_interval=5), background_maintenance=False)
    for batch in range(12):
        t.commit_batch("q1", batch, {Q0: 10 * (batch + 1)}, [], [], metrics(batch))
    offsets = DeltaTable(t.path(OFFSETS))
    assert len(offsets.file_uris()) <= 3  # a maintenance round every 5 s (a batch a second): few files
    assert len(list(Path(t.path(OFFSETS)).glob("*.parquet"))) <= 4  # the files compacted away were vacuumed
    assert offsets.transaction_version("q1") == 11
    assert t.latest_offsets() == {Q0: 120} and len(rows(t, OFFSETS)) == 12 and len(rows(t, METRICS)) == 12
    assert t.commit_batch("q1", 4, {Q0: 999}, [], [], metrics(1)).duplicate  # still recorded once
    # another writer's commit is seen by the cached handle, and a deleted table is re-opened
    other = LinkTables(t.location, source_cluster="A")
    other.commit_batch("q2", 0, {Q1: 3}, [], [], metrics(1))
    assert t.latest_offsets() == {Q0: 120, Q1: 3}
    import shutil

    shutil.rmtree(t.path(METRICS))
    assert t.open(METRICS) is None
    t.commit_batch("q3", 0, {}, [], [], metrics(1))
    assert len(rows(t, METRICS)) == 1


def test_offsets_are_not_committed_when_another_table_fails(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    t = tables(tmp_path)
    real = LinkTables._append_once

    def metrics_fails(self: LinkTables, table: str, *args: object) -> bool | None:
        if table == METRICS:
            raise TableError("disk full (simulated)")
        return real(self, table, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LinkTables, "_append_once", metrics_fails)
    with pytest.raises(TableError, match="simulated"):
        t.commit_batch("q", 0, {Q0: 5}, [mapping(0, 4)], [dismissed(1)], metrics(5))
    assert t.latest_offsets() == {}  # the resume point did not move
    monkeypatch.undo()
    rerun = t.commit_batch("q", 0, {Q0: 5}, [mapping(0, 4)], [dismissed(1)], metrics(5))
    assert rerun.written[METRICS] and rerun.written[CURRENT_OFFSETS]
    assert rerun.already_committed == {FAILURES, OFFSET_MAP, OFFSETS}  # committed beside the failed one
    assert len(rows(t, FAILURES)) == 1 and t.latest_offsets() == {Q0: 5}


def test_totals_sum_the_metrics_of_one_query_or_all(tmp_path: Path) -> None:
    t = tables(tmp_path)
    t.commit_batch("q1", 0, {Q0: 10}, [], [dismissed(1)], metrics(10))
    t.commit_batch("q1", 1, {Q0: 20}, [], [], metrics(5))
    t.commit_batch("q2", 0, {Q0: 30}, [], [], metrics(7))
    assert t.totals("q1") == {"batches": 2, "messages": 15, "bytes": 150, "skipped_loop": 2, "failed": 2}
    assert t.totals()["messages"] == 22
    assert tables(tmp_path / "empty").totals() == {"batches": 0, "messages": 0, "bytes": 0, "skipped_loop": 0,
                                                    "failed": 0}
