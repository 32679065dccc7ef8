"""The replication reader's options (``format("rocketmq")`` on ``readStream``) and its topic selection.

Validated once on the driver by ``RocketMQStreamReader.__init__`` (``SourceOptions.from_options``); the
result is pickled to executors with the reader. The options are listed in ``connectors.replication.reader``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker_store.protocol.acl import SessionCredentials
from connectors.core.config import (
    DEFAULT_CONSUMER_GROUP_PREFIX,
    TopicMappingConfig,
    load_replicator_config,
    resolve_credentials,
)
from connectors.core.errors import ConfigError, OffsetFormatError
from connectors.core.offsets import SourceOffset
from connectors.core.options import lowered, parse_bool, parse_int
from connectors.core.rows import ROW_FORMATS
from connectors.core.topic_mapping import TopicMapper, is_system_topic

DEFAULT_PULL_BATCH_SIZE = 256
"""Messages per PULL_MESSAGE (the broker caps one pull at max_pull_msg_nums = 1024 and 4 MiB). Each pull
becomes one Arrow batch handed to Spark, and smaller batches let the sink start sending sooner: in
benchmarks/replicator.py 1024 was ~35 % slower end to end than 256 on local[2]."""
RANGES_PULL_BATCH_SIZE = 1024
"""The default with ``rowFormat=ranges``, where no row carries the pulled messages: fewer, larger pulls cost
the sink's task and the source broker less per message (a task had ~8 % less CPU per message at 1024 than
at 256 in an in-process measurement of the sink's pull-and-send path)."""
DEFAULT_PULL_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class TopicSelection:
    """How the reader picks source topics; re-evaluated on every trigger (driver only)."""

    topics: tuple[str, ...] = ()
    """Fixed topic names (``topics`` option)."""
    pattern: str | None = None
    """``topicPattern``: full-match regex over the source's non-system topics."""
    exclude: str | None = None
    """``topicExclude``: full-match regex removed from the pattern's matches."""
    mapping: TopicMappingConfig | None = None
    """A link's topic mapping (``config`` + ``link``); ``TopicMapper.select`` decides."""

    def describe(self) -> str:
        if self.topics:
            return "topics=" + ",".join(self.topics)
        if self.pattern is not None:
            return f"topicPattern={self.pattern} topicExclude={self.exclude}"
        return "link mapping"

    def select(self, all_topics: Callable[[], Sequence[str]], reserved: Callable[[], Iterable[str]]) -> list[str]:
        """The topics to read now. ``all_topics`` / ``reserved`` are only called when needed."""
        if self.topics:
            return list(self.topics)
        listed = all_topics()
        names = frozenset(reserved())
        if self.mapping is not None:
            # the cluster's and brokers' own topics are system topics, known only at run time
            return sorted(TopicMapper(self.mapping, reserved_names=names).select(listed))
        assert self.pattern is not None
        include = re.compile(self.pattern)
        exclude = re.compile(self.exclude) if self.exclude else None
        return sorted(t for t in listed if include.fullmatch(t) and not is_system_topic(t, names)
                      and not (exclude and exclude.fullmatch(t)))


@dataclass(frozen=True)
class SourceOptions:
    """The reader's options, validated once on the driver (``from_options``)."""

    namesrv: str
    selection: TopicSelection
    cluster: str
    tags: str = "*"
    starting_offsets: str = "latest"
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    min_partitions: int | None = None
    max_partitions: int | None = None
    report_latest_offset: bool = True
    group: str = ""
    commit_offsets_to_source: bool = True
    delta_location: str | None = None
    """Root of the link tables; the link's tables are ``<deltaLocation>/<link>``."""
    link: str | None = None
    pull_timeout_ms: int = DEFAULT_PULL_TIMEOUT_MS
    row_format: str = "arrow"
    credentials: SessionCredentials | None = None
    """ACL identity for the source cluster (from the link's cluster or accessKeyEnv / secretKeyEnv),
    resolved on the driver; reaches executors inside the pickled reader, never as a Spark option."""

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> SourceOptions:
        opts = lowered(raw)
        link_cfg = None
        config_path = opts.get("config")
        link_name = opts.get("link")
        if config_path is not None:
            if not link_name:
                raise ConfigError("option 'config' needs option 'link' (which link of the file to read)",
                                  field="link")
            replicator = load_replicator_config(config_path)
            link_cfg = replicator.link(link_name)
            cluster_cfg = replicator.cluster(link_cfg.source)
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        pattern = opts.get("topicpattern")
        given = [name for name, value in (("topics", topics), ("topicPattern", pattern),
                                          ("config", link_cfg)) if value]
        if len(given) != 1:
            raise ConfigError(f"give exactly one of topics, topicPattern or config+link (got {given or 'none'})",
                              field="topics")
        if pattern is not None:
            try:
                re.compile(pattern)
                if opts.get("topicexclude"):
                    re.compile(opts["topicexclude"])
            except re.error as exc:
                raise ConfigError(f"invalid regular expression: {exc}", field="topicPattern") from exc
        selection = TopicSelection(
            topics=topics, pattern=pattern, exclude=opts.get("topicexclude"),
            mapping=link_cfg.topics if link_cfg is not None else None)
        namesrv = opts.get("namesrv") or (";".join(cluster_cfg.namesrv) if link_cfg is not None else None)
        if not namesrv:
            raise ConfigError("the source name servers are required ('host:port[;host:port]')", field="namesrv")
        cluster = opts.get("cluster") or (link_cfg.source if link_cfg is not None else None)
        if not cluster:
            raise ConfigError("the source cluster name is required (it is written to every row)", field="cluster")
        tags = opts.get("tags") or (link_cfg.tag_filter if link_cfg is not None else "*")
        default_max = link_cfg.max_messages_per_trigger if link_cfg is not None else None
        group = opts.get("group")
        if not group:
            if link_cfg is not None:
                group = link_cfg.group
            elif link_name:
                group = f"{DEFAULT_CONSUMER_GROUP_PREFIX}{link_name}"
            else:
                digest = hashlib.sha1(selection.describe().encode()).hexdigest()[:12]
                group = f"{DEFAULT_CONSUMER_GROUP_PREFIX}{digest}"
        delta = opts.get("deltalocation") or (link_cfg.delta_location if link_cfg is not None else None)
        if delta is not None and not link_name:
            raise ConfigError("option 'deltaLocation' needs option 'link' (tables live in "
                              "<deltaLocation>/<link>)", field="link")
        row_format = opts.get("rowformat", "arrow").strip().lower()
        if row_format not in ROW_FORMATS:
            raise ConfigError(f"must be one of {', '.join(ROW_FORMATS)}, got {row_format!r}", field="rowFormat")
        starting = opts.get("startingoffsets", "latest").strip()
        _check_starting_offsets(starting)
        min_partitions = parse_int(opts, "minPartitions", None, minimum=1)
        max_partitions = parse_int(opts, "maxPartitions", link_cfg.max_partitions if link_cfg is not None else None,
                                   minimum=1)
        if min_partitions and max_partitions and min_partitions > max_partitions:
            raise ConfigError(f"minPartitions {min_partitions} exceeds maxPartitions {max_partitions}",
                              field="maxPartitions")
        if "accesskeyenv" in opts or "secretkeyenv" in opts:
            credentials = resolve_credentials(opts.get("accesskeyenv"), opts.get("secretkeyenv"),
                                              fields=("accessKeyEnv", "secretKeyEnv"))
        else:
            credentials = cluster_cfg.credentials() if link_cfg is not None else None
        return cls(
            namesrv=namesrv, selection=selection, cluster=cluster, tags=tags, starting_offsets=starting,
            max_messages_per_trigger=parse_int(opts, "maxMessagesPerTrigger", default_max, minimum=1),
            fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
            pull_batch_size=parse_int(opts, "pullBatchSize", RANGES_PULL_BATCH_SIZE if row_format == "ranges"
                                      else DEFAULT_PULL_BATCH_SIZE, minimum=1) or 1,
            min_partitions=min_partitions, max_partitions=max_partitions,
            report_latest_offset=parse_bool(opts, "reportLatestOffset", True),
            group=group, commit_offsets_to_source=parse_bool(opts, "commitOffsetsToSource", True),
            delta_location=delta, link=link_name,
            pull_timeout_ms=parse_int(opts, "pullTimeoutMs", DEFAULT_PULL_TIMEOUT_MS, minimum=1)
            or DEFAULT_PULL_TIMEOUT_MS,
            row_format=row_format, credentials=credentials,
        )


def _check_starting_offsets(value: str) -> None:
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return
    if lowered.startswith("timestamp:"):
        if not value.split(":", 1)[1].strip().isdigit():
            raise ConfigError(f"{value!r}: expected timestamp:<ms since the epoch>", field="startingOffsets")
        return
    try:
        SourceOffset.from_json(value)
    except OffsetFormatError as exc:
        raise ConfigError(f"not earliest, latest, timestamp:<ms> or an offset document: {exc}",
                          field="startingOffsets") from exc
