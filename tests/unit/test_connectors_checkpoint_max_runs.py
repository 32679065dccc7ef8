"""A link's ``checkpoints.max_runs_per_queue``: parsed and validated from the YAML (default 10 000, at least 2),
handed by the checkpoint writer to its committer, and applied by the committer to the translator (the oldest
runs beyond it are folded into a summary; a group older than the oldest run kept re-reads, marked inexact).
No broker: the clusters are tests/unit/test_connectors_checkpoint_problems.py's fakes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from broker_store.client import Admin
from connectors.checkpoint.committer import CheckpointCommitter
from connectors.checkpoint.data_source import CheckpointStreamWriter
from connectors.checkpoint.link_state import LinkProgress
from connectors.checkpoint.snapshot import GroupOffset, GroupOffsetSnapshot
from connectors.checkpoint.translation import DEFAULT_MAX_RUNS, OffsetTranslator, Run
from connectors.core.config import parse_replicator_config
from connectors.core.errors import ReplicatorConfigError
from connectors.core.link_options import LinkOptions
from tests.unit.test_connectors_checkpoint_problems import SOURCE_Q, TARGET_Q, FakeCluster

DOC: dict[str, Any] = {
    "clusters": [{"name": "a", "namesrv": ["127.0.0.1:1"]}, {"name": "b", "namesrv": ["127.0.0.1:2"]}],
    "links": [{"name": "l", "source": "a", "target": "b", "topics": {"all_topics": True},
               "checkpoint_location": "c", "delta_location": "d"}]}


def _doc(**checkpoints: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    doc["links"][0]["checkpoints"] = checkpoints
    return doc


def test_max_runs_per_queue_is_a_link_setting_with_the_translators_default() -> None:
    assert parse_replicator_config(DOC).links[0].checkpoints.max_runs_per_queue == DEFAULT_MAX_RUNS == 10_000
    assert parse_replicator_config(_doc(max_runs_per_queue=50)).links[0].checkpoints.max_runs_per_queue == 50


@pytest.mark.parametrize("value", [0, -1, 1])
def test_max_runs_per_queue_below_two_is_refused_naming_file_and_field(value: int) -> None:
    with pytest.raises(ReplicatorConfigError, match=r"^x\.yaml: links\[0\]\.checkpoints\.max_runs_per_queue: Input "
                                                    r"should be greater than or equal to 2$"):
        parse_replicator_config(_doc(max_runs_per_queue=value), file="x.yaml")


def test_the_writer_hands_the_setting_to_its_committer(tmp_path: Path) -> None:
    config = tmp_path / "replicator.yaml"
    config.write_text(yaml.safe_dump(_doc(max_runs_per_queue=7)))
    options = {"config": str(config), "link": "l", "deltaLocation": str(tmp_path / "delta")}
    committer, _ = CheckpointStreamWriter(options)._committer(LinkOptions.from_options(options))
    assert committer.max_runs_per_queue == 7


def test_the_committer_keeps_at_most_max_runs_per_queue_and_older_offsets_re_read() -> None:
    # 10 runs with gaps between them (not merged); the group is older than all of them, so only the cap folds
    translator = OffsetTranslator([(SOURCE_Q, Run(i * 10, i * 10 + 4, TARGET_Q, i * 5, i * 5 + 4, 5))
                                   for i in range(10)])
    progress = LinkProgress(translator, {SOURCE_Q: 100}, 10)
    committer = CheckpointCommitter(link="l", source_cluster="a", target_cluster="b",
                                    target_admin=cast(Admin, FakeCluster()), target_producer=None,
                                    progress=lambda: progress, max_runs_per_queue=3)
    committer.apply(GroupOffsetSnapshot(1, (GroupOffset("app", SOURCE_Q, 0),)))
    runs = translator.runs(SOURCE_Q)
    assert len(runs) == 3 and runs[0].summary and (runs[0].source_first, runs[0].source_last) == (0, 74)
    assert [r.source_first for r in runs[1:]] == [80, 90]
    older = translator.translate(SOURCE_Q, 12, 100)  # inside the folded runs: the summary's first target offset
    assert (older.target_offset, older.exact) == (0, False)
    kept = translator.translate(SOURCE_Q, 82, 100)  # inside a run kept: exact
    assert (kept.target_offset, kept.exact) == (42, True)
