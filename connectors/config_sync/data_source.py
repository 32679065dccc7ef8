"""The ``rocketmq_config`` Spark data source: a thin reader / writer pair around ``ConfigPoller`` (source
snapshot) and ``ConfigApplier`` (plan, apply on the target, record).

Registered by ``jobs/config_sync.py`` and tests. Options of both halves: ``config`` (the replicator YAML),
``link``, ``deltaLocation`` (optional absolute override of the link's ``delta_location``); the writer also
needs ``checkpointLocation``.

What runs where: the reader is a ``SimpleDataSourceStreamReader`` whose ``read`` runs on the driver and
returns one row per trigger: the source's ``ClusterState`` and what it proves (``evidence.judge``: deleted,
unknown, target broker groups missing) as JSON. Its offset is the resume state, explicit: the reader's
``evidence.Memory`` (the source topics and groups with the broker groups holding them, those absent once, the
target broker groups seen), so a deletion needs two snapshots and is noticed across restarts (Spark keeps the
offset in its checkpoint; an offset of the first version, names without holders, is still read). The reader
lists the target's broker groups too (one name-server request per trigger), so that one that expires later is
known to be missing. The writer's ``write`` (executors) passes the row on; ``commit`` (driver) applies it.
"""

from __future__ import annotations

import json
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

from broker_store.client import Admin
from connectors.config_sync.acl_sync import AclSync
from connectors.config_sync.applier import ConfigApplier, ConfigTables, sync_round
from connectors.config_sync.evidence import Evidence, Judgement, Memory, judge
from connectors.config_sync.state import ClusterState, ConfigPoller, registered_groups
from connectors.core.delta import shared_table_set
from connectors.core.driver_log import driver_logging
from connectors.core.errors import ReplicatorConfigError, ReplicatorError
from connectors.core.executor import executor_admin
from connectors.core.link_options import LinkOptions
from connectors.core.spark_checkpoint import checkpoint_dir, query_id_from_checkpoint
from connectors.core.topic_mapping import TopicMapper

DATA_SOURCE_NAME = "rocketmq_config"
SCHEMA_DDL = "takenMs long, snapshot string, evidence string"


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
    """One snapshot of the source configuration per trigger, judged against the offset's memory (driver)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = dict(options)
        self._poller: ConfigPoller | None = None
        self._target: Admin | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_raw": self._raw, "_poller": None, "_target": None}

    def _judge(self, start: Mapping[str, Any]) -> Judgement:
        driver_logging()
        if self._poller is None or self._target is None:
            o = LinkOptions.from_options(self._raw)
            source = o.config.cluster(o.link.source)
            target = o.config.cluster(o.link.target)
            source_admin = executor_admin(";".join(source.namesrv), source.credentials(), source.tls)
            self._poller = ConfigPoller(source_admin, source.name,
                                        interval=o.link.config_sync.interval,
                                        subscription_groups=o.link.config_sync.subscription_groups)
            self._target = executor_admin(";".join(target.namesrv), target.credentials(), target.tls)
        state = self._poller.next_item()
        return judge(Memory.from_offset(start), state, registered_groups(self._target))

    def initialOffset(self) -> dict[str, Any]:
        """Driver, once, when the query starts without a Spark checkpoint: an empty memory of earlier rounds
        (nothing seen missing yet, so nothing is deleted on the first round's evidence)."""
        return Memory().to_offset()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        """Driver, each trigger (a simple reader runs on the driver): one snapshot of the source and target
        configuration judged against ``start``'s memory; the row, and the memory it leaves as the next offset."""
        judged = self._judge(start)
        return iter([_row(judged)]), judged.memory.to_offset()

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        """Driver, on recovery: a batch planned before a restart but not committed is read again. The clusters'
        configuration is live state, so this judges a fresh snapshot against ``start`` (not the one seen then);
        the writer's commit is idempotent per batch id, and deletions still need the same evidence twice."""
        return iter([_row(self._judge(start))])

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: a snapshot only reads."""


def _row(judged: Judgement) -> tuple[Any, ...]:
    return (judged.state.taken_ms, json.dumps(judged.state.to_json()), json.dumps(judged.evidence.to_json()))


@dataclass(frozen=True)
class ConfigRows(WriterCommitMessage):
    rows: tuple[tuple[Any, ...], ...]


class ConfigStreamWriter(DataSourceStreamWriter):
    """Applies each batch's snapshot on the driver (``commit``)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = dict(options)
        LinkOptions.from_options(options)

    def write(self, iterator: Iterator[Any]) -> ConfigRows:
        """Executor task: hands the batch's snapshot row to the driver; nothing is applied here."""
        return ConfigRows(tuple(tuple(row) for row in iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver, after every write task of batch ``batchId`` succeeded: plans and applies the changes on the
        target and records them in the link's ``config_changes`` table, once per (query, batch)."""
        driver_logging()
        o = LinkOptions.from_options(self._raw)
        if any(not isinstance(m, ConfigRows) for m in messages):
            raise ReplicatorError(f"link {o.link.name} config sync {batchId}: a write task returned no rows")
        if not o.checkpoint_location:
            raise ReplicatorConfigError("the config writer needs option 'checkpointLocation'",
                                        field="checkpointLocation")
        rows = sorted(r for m in messages if isinstance(m, ConfigRows) for r in m.rows)[-1:]  # one per trigger
        target = o.config.cluster(o.link.target)
        source = o.config.cluster(o.link.source)
        tables = shared_table_set((o.tables_location,), ConfigTables, lambda: ConfigTables(o.tables_location))
        query_id = query_id_from_checkpoint(checkpoint_dir(o.checkpoint_location) or Path(o.checkpoint_location))
        for _taken, snapshot, evidence in rows:
            state = ClusterState.from_json(json.loads(snapshot))
            mapper = TopicMapper(o.link.topics, reserved_names=[source.name, *state.brokers])
            target_admin = executor_admin(";".join(target.namesrv), target.credentials(), target.tls)
            acl = AclSync(source_admin=executor_admin(";".join(source.namesrv), source.credentials(), source.tls),
                          source_cluster=source.name, target_admin=target_admin, mapper=mapper,
                          settings=o.link.config_sync.acl) if o.link.config_sync.acl.enabled else None
            applier = ConfigApplier(target_admin=target_admin, mapper=mapper, settings=o.link.config_sync, acl=acl)
            sync_round(tables, applier, state, Evidence.from_json(json.loads(evidence)), link=o.link.name,
                       query_id=query_id, batch_id=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing was applied (``commit`` does the work)."""

