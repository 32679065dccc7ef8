"""A way past data loss, without a broker: the link keys ``fail_on_data_loss`` / ``starting_offsets`` (one
definition for YAML and the reader's Spark options), the offset forms (``OffsetSpec``), the data-loss
error's advice, the reset command's plan, table and checkpoint advice, and its Delta append (the newest
row per queue wins, history kept). The real-process counterpart is
tests/spark/test_source_robustness.py::test_data_loss_error_reset_and_skip."""

from __future__ import annotations

import copy
import json
import logging
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from broker_store.client import MessageQueue, PullResult, PullStatus
from connectors.core.config import parse_replicator_config
from connectors.core.errors import DataLossError, OffsetFormatError, ReplicatorConfigError
from connectors.core.offsets import OffsetSpec, SourceOffset, parse_queue_offsets
from connectors.replication.planning import QueueRange
from connectors.replication.pulling import PullSettings, pull_range_raw
from connectors.replication.reader_options import SourceOptions
from connectors.replication.tables import LinkTables
from jobs import reset_offsets

BASE: dict[str, Any] = {
    "clusters": [{"name": "A", "namesrv": ["127.0.0.1:9876"]}, {"name": "B", "namesrv": ["127.0.0.1:9886"]}],
    "links": [{"name": "a-to-b", "source": "A", "target": "B", "topics": {"explicit": [{"source": "Orders"}]},
               "checkpoint_location": "run/cp/a-to-b", "delta_location": "run/delta"}],
}
Q0 = MessageQueue("Orders", "src-a", 0)
Q1 = MessageQueue("Orders", "src-a", 1)


def _link(**changes: Any) -> Any:
    doc = copy.deepcopy(BASE)
    doc["links"][0].update(changes)
    return parse_replicator_config(doc, file="r.yaml").link("a-to-b")


def test_link_keys_have_defaults_and_are_validated_where_the_options_are() -> None:
    link = _link()
    assert link.fail_on_data_loss is True and link.starting_offsets == "earliest"
    link = _link(fail_on_data_loss=False, starting_offsets="timestamp:1700000000000")
    assert link.fail_on_data_loss is False and OffsetSpec.parse(link.starting_offsets).timestamp_ms == 1700000000000
    assert _link(starting_offsets='{"Orders/src-a/0": 5}').starting_offsets == '{"Orders/src-a/0": 5}'
    with pytest.raises(ReplicatorConfigError) as err:
        _link(starting_offsets="newest")
    assert err.value.field == "links[0].starting_offsets" and "earliest | latest" in str(err.value)
    with pytest.raises(ReplicatorConfigError, match="failOnDataLoss"):  # camelCase is the Spark option, not a YAML key
        _link(failOnDataLoss=False)
    # the reader's Spark options are the same fields (camelCase names, same check)
    opts = SourceOptions.from_options({"namesrv": "h:1", "topics": "T", "cluster": "A",
                                       "startingOffsets": " latest ", "failOnDataLoss": "false"})
    assert opts.starting_offsets == "latest" and opts.fail_on_data_loss is False
    with pytest.raises(ReplicatorConfigError) as err:
        SourceOptions.from_options({"namesrv": "h:1", "topics": "T", "cluster": "A", "startingOffsets": "x"})
    assert err.value.field == "startingOffsets"


def test_link_settings_reach_the_reader_through_config_and_link(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["links"][0].update(fail_on_data_loss=False, starting_offsets="latest", retry_timeout_ms=1234)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(doc))
    opts = SourceOptions.from_options({"config": str(path), "link": "a-to-b"})
    assert (opts.fail_on_data_loss, opts.starting_offsets, opts.retry_timeout_ms) == (False, "latest", 1234)
    assert opts.config == str(path)


def test_offset_spec_forms() -> None:
    assert OffsetSpec.parse(" Earliest ").kind == "earliest" and str(OffsetSpec.parse("latest")) == "latest"
    assert OffsetSpec.parse("timestamp:42") == OffsetSpec("timestamp", timestamp_ms=42)
    bare = OffsetSpec.parse('{"Orders/src-a/0": 5}')
    assert bare.offsets == SourceOffset.of({Q0: 5})
    assert parse_queue_offsets(SourceOffset.of({Q1: 7}).to_json()) == SourceOffset.of({Q1: 7})
    for bad in ("timestamp:soon", "newest", '{"Orders/src-a/x": 1}', '{"Orders/src-a/0": -1}'):
        with pytest.raises(OffsetFormatError):
            OffsetSpec.parse(bad)


class _Moved:
    """A consumer whose queue lost offsets below 10 (retention)."""

    def pull_wait_budget(self) -> float:
        return 1.0

    def pull_async(self, mq: object, at: int, n: int, *, expression: str, decode: bool) -> Future[PullResult]:
        future: Future[PullResult] = Future()
        if at < 10:
            future.set_result(PullResult(PullStatus.OFFSET_ILLEGAL, 10, 10, 20, [], 0, raw=b""))
        else:
            future.set_result(PullResult(PullStatus.NO_MATCHED_MSG, at + n, 10, 20, [], 0, raw=b""))
        return future


def _settings(**changes: Any) -> PullSettings:
    base: dict[str, Any] = dict(namesrv="h:1", group="g", cluster="A", tags="*", pull_batch_size=4,
                                fail_on_data_loss=True, pull_timeout_ms=1000, row_format="raw", link="a-to-b",
                                config_path="/etc/replicator.yaml")
    return PullSettings(**{**base, **changes})


def test_data_loss_error_names_the_reset_command_and_the_key() -> None:
    with pytest.raises(DataLossError) as err:
        list(pull_range_raw(_settings(), QueueRange("Orders", "src-a", 0, 3, 15), _Moved()))  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith("link a-to-b: data loss on Orders/src-a/0 of source cluster A while reading [3, 15): "
                              "offsets [3, 10) were deleted")
    assert ("`python -m jobs.reset_offsets --config /etc/replicator.yaml --link a-to-b --to earliest`" in message
            and "`fail_on_data_loss: false` on link a-to-b" in message and "\n" not in message)
    without_link = pytest.raises(DataLossError, match="failOnDataLoss=false")
    with without_link:
        list(pull_range_raw(_settings(link=""), QueueRange("Orders", "src-a", 0, 3, 15), _Moved()))  # type: ignore[arg-type]


def test_without_fail_on_data_loss_the_lost_range_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="connectors.replication.pulling"):
        got = list(pull_range_raw(_settings(fail_on_data_loss=False), QueueRange("Orders", "src-a", 0, 3, 15),
                                  _Moved()))  # type: ignore[arg-type]
    assert got == []
    assert any("data loss on Orders/src-a/0" in r.message and "offsets [3, 10) were deleted" in r.message
               and "skipped" in r.message and r.levelno == logging.WARNING for r in caplog.records)


def test_reset_plan_checks_named_queues_and_their_ranges() -> None:
    queues = [Q0, Q1]
    mins, maxes = {Q0: 10, Q1: 0}, {Q0: 20, Q1: 5}
    latest = OffsetSpec("latest")
    rows = reset_offsets.plan(latest, queues, maxes, {Q0: 3}, mins, maxes, "L")
    assert [(r.queue, r.current, r.new) for r in rows] == [(Q0, 3, 20), (Q1, None, 5)]
    table = reset_offsets.format_plan(rows)
    assert table.splitlines()[0].split() == ["queue", "current", "(Delta)", "new", "min", "max"]
    assert table.splitlines()[2].split() == ["Orders/src-a/1", "-", "5", "0", "5"]
    only_q1 = OffsetSpec("offsets", offsets=SourceOffset.of({Q1: 4}))
    assert [(r.queue, r.new) for r in reset_offsets.plan(only_q1, queues, {Q1: 4}, {}, mins, maxes, "L")] == [(Q1, 4)]
    with pytest.raises(ReplicatorConfigError,
                       match=r"queue Orders/src-a/0: offset 9 is outside the queue's \[10, 20\]"):
        reset_offsets.plan(OffsetSpec("offsets", offsets=SourceOffset.of({Q0: 9})), queues, {}, {}, mins, maxes, "L")
    unknown = MessageQueue("Orderz", "src-a", 0)
    with pytest.raises(ReplicatorConfigError, match="queue Orderz/src-a/0 is not a source queue of link L now"):
        reset_offsets.plan(OffsetSpec("offsets", offsets=SourceOffset.of({unknown: 1})), queues, {}, {}, mins,
                           maxes, "L")


def test_reset_target_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps({"Orders/src-a/1": 4}))
    assert reset_offsets.parse_target(str(path)).offsets == SourceOffset.of({Q1: 4})
    assert reset_offsets.parse_target("timestamp:5").timestamp_ms == 5
    with pytest.raises(ReplicatorConfigError, match="reading it as a file failed"):
        reset_offsets.parse_target(str(tmp_path / "missing.json"))
    path.write_text("{not json")
    with pytest.raises(ReplicatorConfigError) as err:
        reset_offsets.parse_target(str(path))
    assert err.value.file == str(path)


def test_checkpoint_advice_names_the_directory_to_move(tmp_path: Path) -> None:
    checkpoint = tmp_path / "cp"
    link = _link(checkpoint_location=str(checkpoint))
    assert "has no Spark checkpoint" in reset_offsets.checkpoint_advice(link, "r.yaml")
    (checkpoint / "offsets").mkdir(parents=True)
    advice = reset_offsets.checkpoint_advice(link, "r.yaml", now=datetime(2026, 11, 24, 1, 2, 3, tzinfo=UTC))
    assert f"mv {checkpoint} {checkpoint}.before-reset-20261124T010203Z" in advice
    assert "stop the job of link a-to-b" in advice and "--config r.yaml --link a-to-b" in advice


def test_appended_resume_point_wins_and_history_is_kept(tmp_path: Path) -> None:
    tables = LinkTables(tmp_path / "a-to-b", source_cluster="A")
    tables.append_resume_point({Q0: 5, Q1: 6})
    version = tables.append_resume_point({Q0: 50})
    assert tables.latest_offsets() == {Q0: 50, Q1: 6}
    assert version == 1
    assert tables.read("offsets").num_rows == 3
