"""The ``rocketmq_config`` Spark data source: a thin reader / writer pair around ``ConfigPoller`` (source
snapshot) and ``ConfigApplier`` (plan, apply on the target, record).

Registered by ``jobs/config_sync.py`` and tests. Options of both halves: ``config`` (the replicator YAML),
``link``, ``deltaLocation`` (optional absolute override of the link's ``delta_location``); the writer also
needs ``checkpointLocation``.

What runs where: the reader is a ``SimpleDataSourceStreamReader`` whose ``read`` runs on the driver and
returns one row per trigger: the source's ``ClusterState`` as JSON and the source topics and subscription
groups of the previous snapshot. Its offset is the resume state, explicit: ``{"tick": n, "topics": [source
topics seen], "groups": [source groups seen]}``, so a deletion is noticed across restarts (Spark keeps the
offset in its checkpoint; an offset without ``groups``, written before groups were tracked, deletes no
group). The writer's ``write`` (executors) passes the row on; ``commit`` (driver) applies it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.config_sync.applier import ConfigApplier, ConfigTables, summary
from connectors.config_sync.plan import ChangeStatus
from connectors.config_sync.standing import NOT_APPLIED, unfinished_deletions
from connectors.config_sync.state import ClusterState, ConfigPoller
from connectors.core.delta import shared_table_set
from connectors.core.driver_log import driver_logging
from connectors.core.errors import ConfigError, ReplicatorError
from connectors.core.executor import executor_admin
from connectors.core.link_options import LinkOptions
from connectors.core.spark_checkpoint import checkpoint_dir, query_id_from_checkpoint
from connectors.core.topic_mapping import TopicMapper

log = logging.getLogger(__name__)

DATA_SOURCE_NAME = "rocketmq_config"
SCHEMA_DDL = "takenMs long, snapshot string, previousTopics string, previousGroups string"


class ConfigDataSource(DataSource):
    """``format("rocketmq_config")``. Pickled to Spark's Python workers; holds only the options."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return ConfigStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return ConfigStreamWriter(self.options)


class ConfigStreamReader(SimpleDataSourceStreamReader):
    """One snapshot of the source configuration per trigger (driver)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = dict(options)
        self._poller: ConfigPoller | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_raw": self._raw, "_poller": None}

    def _snapshot(self) -> ClusterState:
        driver_logging()
        if self._poller is None:
            o = LinkOptions.from_options(self._raw)
            source = o.config.cluster(o.link.source)
            self._poller = ConfigPoller(executor_admin(";".join(source.namesrv), source.credentials()), source.name,
                                        interval=o.link.config_sync.interval,
                                        subscription_groups=o.link.config_sync.subscription_groups)
        return self._poller.next_item()

    def initialOffset(self) -> dict[str, Any]:
        return {"tick": 0, "topics": [], "groups": []}

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        state = self._snapshot()
        topics, groups = set(state.topics), set(state.groups)
        if state.unreachable:  # a partial view: keep what was seen before, or a deletion would be missed
            topics |= set(start.get("topics", []))
            groups |= set(start.get("groups", []))
        return iter([_row(state, start)]), {"tick": int(start.get("tick", 0)) + 1, "topics": sorted(topics),
                                            "groups": sorted(groups)}

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        return iter([_row(self._snapshot(), start)])

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: a snapshot only reads."""


def _row(state: ClusterState, start: Mapping[str, Any]) -> tuple[Any, ...]:
    return (state.taken_ms, json.dumps(state.to_json()), json.dumps(list(start.get("topics", []))),
            json.dumps(list(start.get("groups", []))))


@dataclass(frozen=True)
class ConfigRows(WriterCommitMessage):
    rows: tuple[tuple[Any, ...], ...]


class ConfigStreamWriter(DataSourceStreamWriter):
    """Applies each batch's snapshot on the driver (``commit``)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = dict(options)
        LinkOptions.from_options(options)

    def write(self, iterator: Iterator[Any]) -> ConfigRows:
        return ConfigRows(tuple(tuple(row) for row in iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        driver_logging()
        o = LinkOptions.from_options(self._raw)
        if any(not isinstance(m, ConfigRows) for m in messages):
            raise ReplicatorError(f"link {o.link.name} config sync {batchId}: a write task returned no rows")
        if not o.checkpoint_location:
            raise ConfigError("the config writer needs option 'checkpointLocation'", field="checkpointLocation")
        rows = sorted(r for m in messages if isinstance(m, ConfigRows) for r in m.rows)[-1:]  # one per trigger
        target = o.config.cluster(o.link.target)
        source = o.config.cluster(o.link.source)
        tables = shared_table_set((o.tables_location,), ConfigTables, lambda: ConfigTables(o.tables_location))
        query_id = query_id_from_checkpoint(checkpoint_dir(o.checkpoint_location) or Path(o.checkpoint_location))
        for _taken, snapshot, previous_topics, previous_groups in rows:
            state = ClusterState.from_json(json.loads(snapshot))
            mapper = TopicMapper(o.link.topics, reserved_names=[source.name, *state.brokers])
            applier = ConfigApplier(target_admin=executor_admin(";".join(target.namesrv), target.credentials()),
                                    mapper=mapper, settings=o.link.config_sync)
            topics_again, groups_again = unfinished_deletions(tables.standing())
            round_ = applier.apply(state, [*json.loads(previous_topics), *topics_again],
                                   [*json.loads(previous_groups or "[]"), *groups_again])
            recorded = tables.commit_round(query_id, batchId, state.taken_ms, round_)
            # a standing refusal is logged (and recorded) when it appears or changes, not every round
            new = [c for c in recorded if c.status is not ChangeStatus.APPLIED]
            still = sum(1 for c in round_.changes if c.status is not ChangeStatus.APPLIED) - sum(
                1 for c in new if c.status is not ChangeStatus.CLEARED)
            level = logging.WARNING if any(c.status in NOT_APPLIED for c in new) else logging.INFO
            log.log(level, "link %s config sync %d: %s%s%s", o.link.name, batchId,
                    summary(round_.changes), f" ({still} not applied as recorded before)" if still > 0 else "",
                    "".join(f"; {c.status.value} {c.kind.value} {c.subject}: {c.detail}" for c in new))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing was applied (``commit`` does the work)."""
