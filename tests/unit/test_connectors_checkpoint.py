"""connectors.checkpoint without brokers: group selection, the snapshot's rows, the outcome of each source
queue, the link's progress read from real Delta tables, and the recovery-point query."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.client import MessageQueue
from connectors.checkpoint.committer import CheckpointReport, GroupCheckpoint, outcome_rows
from connectors.checkpoint.link_state import LinkProgress, LinkProgressReader, read_link_progress
from connectors.checkpoint.snapshot import (
    Condition,
    ConditionKind,
    GroupOffset,
    GroupOffsetSnapshot,
    snapshot_from_rows,
    snapshot_rows,
)
from connectors.checkpoint.tables import (
    CHECKPOINTS,
    CheckpointOutcome,
    CheckpointRow,
    CheckpointTables,
    checkpoint_age_ms,
    newest_complete_snapshot_ms,
)
from connectors.checkpoint.translation import OffsetTranslator, Outcome, Run
from connectors.core.config import parse_replicator_config
from connectors.core.errors import ReplicatorConfigError
from connectors.core.history_settings import HistorySettings
from connectors.core.sync_settings import GroupSelection
from connectors.replication.records import BatchMetrics, OffsetMapping
from connectors.replication.tables import LinkTables
from tests.support.clocks import MillisClock, ReadingClock

A0, A1 = MessageQueue("Orders", "src-a", 0), MessageQueue("Orders", "src-a", 1)
T0, T1 = MessageQueue("OrdersDR", "dst-a", 0), MessageQueue("OrdersDR", "dst-a", 1)


def test_group_selection() -> None:
    everything = GroupSelection()
    assert everything.selects("billing") and not everything.selects("CID_RMQ_SYS_REPLICATOR_l1")
    chosen = GroupSelection(explicit=("billing",), include=("app_.*",), exclude=(".*_test",))
    assert chosen.selects("billing") and chosen.selects("app_x")
    assert not chosen.selects("app_x_test") and not chosen.selects("other")


def test_link_yaml_takes_checkpoint_settings_and_names_a_bad_field() -> None:
    link_doc: dict[str, object] = {"name": "l", "source": "a", "target": "b", "topics": {"all_topics": True},
                                   "checkpoint_location": "c", "delta_location": "d",
                                   "checkpoints": {"interval": "2 seconds", "groups": {"include": ["app_.*"]}}}
    doc = {"clusters": [{"name": "a", "namesrv": ["127.0.0.1:1"]}, {"name": "b", "namesrv": ["127.0.0.1:2"]}],
           "links": [link_doc]}
    link = parse_replicator_config(doc).links[0]
    assert link.checkpoints.interval == 2.0 and link.checkpoints.groups.selects("app_1")
    assert link.config_sync.propagate_deletion is False
    link_doc["checkpoints"] = {"groups": {"include": ["("]}}
    with pytest.raises(ReplicatorConfigError, match=r"links\[0\]\.checkpoints\.groups\.include\[0\]"):
        parse_replicator_config(doc, file="x.yaml")


def test_snapshot_rows_round_trip() -> None:
    snapshot = GroupOffsetSnapshot(1234, (GroupOffset("g", A0, 7), GroupOffset("h", A1, 0)),
                                   (Condition(ConditionKind.UNKNOWN_GROUP, "lost", "no offsets"),))
    assert snapshot_from_rows(snapshot_rows(snapshot)) == snapshot
    empty = GroupOffsetSnapshot(99, ())
    assert snapshot_from_rows(snapshot_rows(empty)) == empty


def test_outcome_of_each_source_queue() -> None:
    translator = OffsetTranslator([(A0, Run(0, 9, T0, 100, 109, 10)), (A1, Run(0, 9, T1, 0, 9, 10))])
    b = MessageQueue("Orders", "src-b", 0)
    translations = [translator.translate(A0, 5, 10), translator.translate(A1, 3, 10),
                    translator.translate(b, 0, None)]
    assert [t.outcome for t in translations] == [Outcome.TRANSLATED, Outcome.TRANSLATED, Outcome.UNMAPPED]
    rows = outcome_rows("g", 1, translations, current={T1: 3}, committed={T0: 105}, errors={})
    assert [(r.outcome, r.committed_offset) for r in rows] == [
        (CheckpointOutcome.COMMITTED, 105), (CheckpointOutcome.CURRENT, None), (CheckpointOutcome.UNMAPPED, None)]
    failed = outcome_rows("g", 1, translations[:1], {}, {}, {T0: "TOPIC_NOT_EXIST"})
    assert failed[0].outcome is CheckpointOutcome.TARGET_ERROR and "TOPIC_NOT_EXIST" in failed[0].detail
    # a source queue still pending blocks the other one feeding the same target queue
    c = MessageQueue("Pay", "src-a", 0)
    merged = OffsetTranslator([(A0, Run(0, 9, T0, 0, 9, 10)), (c, Run(0, 4, T0, 10, 14, 5))])
    pending = [merged.translate(A0, 5, 10), merged.translate(c, 8, 5)]
    rows = outcome_rows("g", 1, pending, {}, {}, {})
    assert [(r.outcome, r.target_offset, r.committed_offset) for r in rows] == [
        (CheckpointOutcome.PENDING, 5, None), (CheckpointOutcome.PARTIAL, 15, None)]
    # (the partial row: the group read ahead of the link; 15 is the end of what crossed of c, not committed)


def _mapping(first: int, last: int, target_first: int, messages: int) -> OffsetMapping:
    return OffsetMapping("Orders", "src-a", 0, first, last, "OrdersDR", "dst-a", 0, target_first,
                         target_first + messages - 1, messages)


def test_link_progress_from_the_replication_tables(tmp_path: Path) -> None:
    clock = iter(range(1_000, 100_000, 1_000))
    tables = LinkTables(tmp_path / "l", source_cluster="src", clock=ReadingClock(lambda: next(clock)))
    assert read_link_progress(tables).runs == 0
    tables.commit_batch("q1", 0, {A0: 10}, [_mapping(0, 9, 0, 10)], [], BatchMetrics(10, 10))
    tables.commit_batch("q1", 1, {A0: 20}, [_mapping(10, 14, 10, 5), _mapping(17, 19, 15, 3)], [],
                        BatchMetrics(8, 8))
    progress = read_link_progress(tables)
    assert progress.replicated_next == {A0: 20} and progress.runs == 3
    assert progress.translator.translate(A0, 12, 20).target_offset == 12
    assert progress.translator.translate(A0, 15, 20).target_offset == 15  # 15, 16 filtered: next is 17 -> 15
    assert progress.translator.translate(A0, 20, 20).target_offset == 18
    assert progress.translator.translate(A0, 21, 20).outcome is Outcome.PENDING


def _same_as_full_read(progress: LinkProgress, tables: LinkTables) -> None:
    full = read_link_progress(tables)
    assert progress.replicated_next == full.replicated_next == tables.latest_offsets()
    progress_translator, full_translator = progress.translator, full.translator
    assert progress_translator.sources() == full_translator.sources()
    for q in full_translator.sources():
        assert progress_translator.runs(q) == full_translator.runs(q), q


def test_incremental_progress_equals_a_full_read(tmp_path: Path) -> None:
    """Each round reads only the commits since the last; the translator equals a full read's, also after a
    range already mapped is replicated again (a new query after the Spark checkpoint was lost: new rows for
    old source offsets), after a batch re-run (its txn is there: nothing written), and across compaction."""
    clock = iter(range(1_000, 10_000_000, 1_000))
    tables = LinkTables(tmp_path / "l", source_cluster="src", clock=ReadingClock(lambda: next(clock)),
                        history=HistorySettings(maintenance_interval=3600), background_maintenance=False)
    reader = LinkProgressReader(tables)
    assert reader.read().runs == 0
    for batch in range(5):
        tables.commit_batch("q1", batch, {A0: 10 * batch + 10},
                            [_mapping(10 * batch, 10 * batch + 9, 10 * batch, 10)], [], BatchMetrics(10, 10))
        progress = reader.read()
        assert progress.runs == 1 and progress.full_read == (batch == 0)
        _same_as_full_read(progress, tables)
    assert progress.translator.runs(A0) == (Run(0, 49, T0, 0, 49, 10 * 5),)  # continuations merged
    tables.commit_batch("q1", 4, {A0: 50}, [_mapping(40, 49, 999, 10)], [], BatchMetrics(10, 10))  # re-run
    assert reader.read().runs == 0
    # the Spark checkpoint lost, a resume point set back (jobs.reset_offsets): a new query re-sends 30..49
    tables.append_resume_point({A0: 30, A1: 0})
    assert reader.read().replicated_next == {A0: 30, A1: 0}
    tables.commit_batch("q2", 0, {A0: 50}, [_mapping(30, 39, 50, 10)], [], BatchMetrics(10, 10))
    tables.commit_batch("q2", 1, {A0: 60}, [_mapping(40, 49, 60, 10), _mapping(50, 59, 70, 10)], [],
                        BatchMetrics(20, 20))
    progress = reader.read()
    assert (progress.runs, progress.full_read) == (3, False)
    _same_as_full_read(progress, tables)
    assert progress.translator.translate(A0, 35, 60).target_offset == 55  # the newest copy
    assert progress.translator.translate(A0, 25, 60).target_offset == 25
    # a maintenance round (compaction: the same rows rewritten, dataChange false; checkpoint; vacuum of the
    # files compacted away): still incremental
    assert tables.maintenance is not None
    tables.maintenance.run_round(10_000_000)
    tables.commit_batch("q2", 2, {A0: 70}, [_mapping(60, 69, 80, 10)], [], BatchMetrics(10, 10))
    progress = reader.read()
    assert (progress.runs, progress.full_read) == (1, False)
    _same_as_full_read(progress, tables)


def test_incremental_progress_falls_back_to_a_full_read(tmp_path: Path) -> None:
    """A commit file gone (log clean-up), rows rewritten (a delete), rows older than those read (a driver
    clock behind): the reader reads the table whole and still equals a full read."""
    times = iter([1_000, 2_000, 3_000, 500, 4_000, 5_000, 6_000])
    tables = LinkTables(tmp_path / "l", source_cluster="src", clock=ReadingClock(lambda: next(times)))
    reader = LinkProgressReader(tables)
    tables.commit_batch("q1", 0, {A0: 10}, [_mapping(0, 9, 0, 10)], [], BatchMetrics(10, 10))
    assert reader.read().full_read
    tables.commit_batch("q1", 1, {A0: 20}, [_mapping(10, 19, 10, 10)], [], BatchMetrics(10, 10))
    tables.commit_batch("q1", 2, {A0: 30}, [_mapping(20, 29, 20, 10)], [], BatchMetrics(10, 10))
    dt = tables.open("offset_map")
    assert dt is not None
    dt.create_checkpoint()  # at version 2; the log before it may then be cleaned up
    (Path(tables.path("offset_map")) / "_delta_log" / f"{1:020d}.json").unlink()
    progress = reader.read()
    assert progress.full_read and progress.runs == 3
    _same_as_full_read(progress, tables)
    tables.commit_batch("q1", 3, {A0: 40}, [_mapping(30, 39, 30, 10)], [], BatchMetrics(10, 10))  # at 500 ms
    progress = reader.read()
    assert progress.full_read and progress.runs == 4
    _same_as_full_read(progress, tables)
    dt = tables.open("offset_map")
    assert dt is not None
    dt.delete("source_first_offset = 30")
    progress = reader.read()
    assert progress.full_read and progress.runs == 3
    _same_as_full_read(progress, tables)
    assert progress.translator.translate(A0, 35, 40).target_offset == 30  # past the last run, replicated


def test_recovery_point_counts_only_complete_checkpoints(tmp_path: Path) -> None:
    tables = CheckpointTables(tmp_path / "l", clock=MillisClock(50_000))
    assert checkpoint_age_ms(tables, 60_000) is None
    tables.commit_checkpoint("q", 0, [CheckpointRow("g", CheckpointOutcome.COMMITTED, 10_000)])
    tables.commit_checkpoint("q", 1, [CheckpointRow("g", CheckpointOutcome.CURRENT, 20_000),
                                      CheckpointRow("g", CheckpointOutcome.PENDING, 20_000)])
    tables.commit_checkpoint("q", 1, [CheckpointRow("g", CheckpointOutcome.COMMITTED, 99_000)])  # replayed: skipped
    tables.commit_checkpoint("q", 2, [CheckpointRow("h", CheckpointOutcome.CURRENT, 30_000)])
    assert checkpoint_age_ms(tables, 60_000, "g") == 50_000
    assert checkpoint_age_ms(tables, 60_000) == 30_000


def test_a_partial_checkpoint_counts_for_a_failover_not_for_the_recovery_point_metric(tmp_path: Path) -> None:
    tables = CheckpointTables(tmp_path / "l", clock=MillisClock(50_000))
    tables.commit_checkpoint("q", 0, [CheckpointRow("g", CheckpointOutcome.COMMITTED, 10_000)])
    tables.commit_checkpoint("q", 1, [CheckpointRow("g", CheckpointOutcome.CURRENT, 20_000),
                                      CheckpointRow("g", CheckpointOutcome.PARTIAL, 20_000, target_offset=7)])
    tables.commit_checkpoint("q", 2, [CheckpointRow("g", CheckpointOutcome.PENDING, 30_000)])  # nothing crossed
    rows = tables.read(CHECKPOINTS, columns=["group", "outcome", "snapshot_at"])
    assert newest_complete_snapshot_ms(rows) == 10_000 == tables.newest_translated_ms("g")
    assert newest_complete_snapshot_ms(rows, partial=True) == 20_000



def test_problems_name_each_condition_and_each_distinct_target_error_once() -> None:
    report = CheckpointReport(1)
    failed = outcome_rows("g", 1, [OffsetTranslator([(A0, Run(0, 9, T0, 0, 9, 10)), (A1, Run(0, 9, T1, 0, 9, 10))])
                                   .translate(q, 5, 10) for q in (A0, A1)], {}, {}, {T0: "down", T1: "down"})
    report.groups.append(GroupCheckpoint("g", {}, tuple(failed)))
    report.condition_rows.append(CheckpointRow("ghost", CheckpointOutcome.UNKNOWN_GROUP, 1, detail="no offsets"))
    report.topic_errors["g"] = "timeout"
    assert report.problems() == ["unknown_group ghost: no offsets", "target_error g: down",
                                 "not produced to rmq_sys_replicator_checkpoint: g: timeout"]
    assert CheckpointReport(1).problems() == []
