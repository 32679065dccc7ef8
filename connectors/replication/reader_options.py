"""The replication reader's options (``format("rocketmq")`` on ``readStream``) and its topic selection.

Validated once on the driver by ``RocketMQStreamReader.__init__`` (``SourceOptions.from_options``); the
result is pickled to executors with the reader. Each field's docstring is its option's meaning in docs/configuration.md.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, model_validator

from broker_store.client import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from connectors.core.config import (
    DEFAULT_CONSUMER_GROUP_PREFIX,
    ReadSettings,
    field_error,
    load_replicator_config,
    read_credentials_file,
    resolve_credentials,
)
from connectors.core.errors import ReplicatorConfigError
from connectors.core.options import given_options, lowered, validate_options
from connectors.core.rows import RowFormat
from connectors.core.topic_mapping import TopicMapper, is_system_topic
from connectors.core.topic_settings import TopicMappingConfig

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

    def explicit_topics(self) -> frozenset[str]:
        """Topics named one by one (``topics`` option, or a link's ``explicit`` entries): a missing one is
        worth a warning, unlike a pattern that matches nothing yet."""
        if self.mapping is not None:
            return frozenset(self.topics) | TopicMapper(self.mapping).explicit_topics
        return frozenset(self.topics)

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


class SourceOptions(ReadSettings):
    """The reader's options (docs/configuration.md's generated table lists them: ``options_doc``),
    validated once on the driver (``from_options``). The link's reader settings are ``ReadSettings``
    fields, so the options and the link YAML share their definitions; the rest are reader-only options."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    namesrv: str = Field(min_length=1)
    """Source name servers ``host:port[;host:port]`` (config+link: the source cluster's)."""
    selection: TopicSelection
    """Derived from topics / topicPattern / topicExclude / config+link."""
    cluster: str = Field(min_length=1)
    """Source cluster name, written to every row and the Delta rows."""
    pull_batch_size: int = Field(default=DEFAULT_PULL_BATCH_SIZE, gt=0)
    """Messages per PULL_MESSAGE (the broker caps a pull at 1024); with ``rowFormat=ranges`` 1024 when not given."""
    min_partitions: int | None = Field(default=None, gt=0)
    """Split queue ranges until a micro-batch has at least this many partitions; none: one per queue."""
    report_latest_offset: bool = True
    """Report the queues' max offsets in the query progress."""
    group: str = ""
    """Consumer group committed on the source in commit(end); default ``CID_RMQ_SYS_REPLICATOR_<link>`` (config+link:
    the link's ``consumer_group``), without a link ``CID_RMQ_SYS_REPLICATOR_<hash of the topic selection>``."""
    commit_offsets_to_source: bool = True
    """UPDATE_CONSUMER_OFFSET for ``group`` on the source on every commit(end)."""
    delta_location: str | None = None
    """Root of the link tables (``<deltaLocation>/<link>``): a new checkpoint resumes from them
    (``LinkTables.latest_offsets()``). Needs ``link``."""
    link: str | None = None
    """The link's name: with ``config``, the link of replicator.yaml that fills every option (explicit options
    win); with ``deltaLocation``, the folder of its tables."""
    config: str | None = None
    """A replicator.yaml (with ``link``): the link's source cluster, topics and reader settings fill the options
    (explicit options win); named in the data-loss advice."""
    pull_timeout_ms: int = Field(default=DEFAULT_PULL_TIMEOUT_MS, gt=0)
    """Timeout of one pull."""
    row_format: RowFormat = "arrow"
    """``arrow`` / ``tuples``: one row per message, handed to Spark as Arrow batches or as tuples (slower);
    ``raw``: one row per pull, the records undecoded, for the rocketmq sink; ``ranges``: one row per planned
    queue range and no data, the rocketmq sink pulls the ranges itself (``connectors.core.rows``)."""
    create_topics_like_source: bool = False
    """With ``rowFormat=ranges`` and config+link: the driver creates a target topic the target lacks like its
    source topic(s), by config sync's rule, before placing its first batch (``connectors.config_sync.creation``).
    Set by ``jobs/run_all.py`` for a link whose config sync it runs; false: the sink's auto-create (the target's
    default queue count) as before."""
    credentials: SessionCredentials | None = None
    """ACL identity for the source cluster (from the link's cluster or accessKeyEnv / secretKeyEnv),
    resolved on the driver; reaches executors inside the pickled reader, never as a Spark option."""

    tls: TlsClientSettings | None = None
    """TLS to the source cluster (the link's cluster's ``tls``), like ``credentials`` resolved on the driver."""

    DERIVED: ClassVar[frozenset[str]] = frozenset({"selection", "group", "credentials", "tls", "link", "config"})
    """Fields computed by ``from_options``, not taken from an option of their name."""
    OPTIONLESS: ClassVar[frozenset[str]] = frozenset({"selection", "credentials"})
    """Fields no option of their name sets (the options below and config+link make them)."""
    OTHER_OPTIONS: ClassVar[Mapping[str, str]] = {
        "topics": "``A,B,C``: fixed topics. Exactly one of ``topics``, ``topicPattern`` or ``config`` + ``link`` "
                  "selects the topics, again for every trigger (found while the previous batch runs: a new topic "
                  "or queue is read from the trigger after the one it appeared in).",
        "topicPattern": "Full-match regex over the source's non-system topics.",
        "topicExclude": "With ``topicPattern``: full-match regex of topics left out.",
        "accessKeyEnv": "NAME of the environment variable holding the source cluster's ACL access key (config+link: "
                        "the cluster's ``access_key_env``); read on the driver, every request is signed.",
        "secretKeyEnv": "NAME of the environment variable holding the secret key (config+link: the cluster's "
                        "``secret_key_env``).",
        "credentialsFile": "Instead of the two variables: a file with ``accessKey:`` and ``secretKey:`` (RocketMQ's "
                           "tools.yml layout; config+link: the cluster's ``credentials_file``), read on the driver.",
    }
    """Options that are not a field of their name (``from_options`` reads them)."""

    @model_validator(mode="before")
    @classmethod
    def _row_format_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and "pull_batch_size" not in data and data.get("row_format") == "ranges":
            return {**data, "pull_batch_size": RANGES_PULL_BATCH_SIZE}
        return data

    @model_validator(mode="after")
    def _check_partitions(self) -> SourceOptions:
        if self.min_partitions and self.max_partitions and self.min_partitions > self.max_partitions:
            raise field_error("max_partitions",
                              f"minPartitions {self.min_partitions} exceeds maxPartitions {self.max_partitions}")
        if self.delta_location is not None and not self.link:
            raise field_error("link", "option 'deltaLocation' needs option 'link' (tables live in "
                                      "<deltaLocation>/<link>)")
        return self

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> SourceOptions:
        opts = lowered(raw)
        values: dict[str, Any] = {}
        link_cfg = None
        link_name = opts.get("link")
        if opts.get("config") is not None:
            if not link_name:
                raise ReplicatorConfigError("option 'config' needs option 'link' (which link of the file to read)",
                                            field="link")
            replicator = load_replicator_config(opts["config"])
            link_cfg = replicator.link(link_name)
            cluster_cfg = replicator.cluster(link_cfg.source)
            values.update({name: getattr(link_cfg, name) for name in ReadSettings.model_fields},
                          namesrv=";".join(cluster_cfg.namesrv), cluster=link_cfg.source,
                          delta_location=link_cfg.delta_location)
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        pattern = opts.get("topicpattern")
        given = [name for name, value in (("topics", topics), ("topicPattern", pattern),
                                          ("config", link_cfg)) if value]
        if len(given) != 1:
            raise ReplicatorConfigError(
                f"give exactly one of topics, topicPattern or config+link (got {given or 'none'})", field="topics")
        if pattern is not None:
            try:
                re.compile(pattern)
                if opts.get("topicexclude"):
                    re.compile(opts["topicexclude"])
            except re.error as exc:
                raise ReplicatorConfigError(f"invalid regular expression: {exc}", field="topicPattern") from exc
        selection = TopicSelection(
            topics=topics, pattern=pattern, exclude=opts.get("topicexclude"),
            mapping=link_cfg.topics if link_cfg is not None else None)
        values.update(given_options(cls, opts, derived=cls.DERIVED))
        if "row_format" in values:
            values["row_format"] = values["row_format"].strip().lower()
        group = opts.get("group")
        if not group:
            if link_cfg is not None:
                group = link_cfg.group
            elif link_name:
                group = f"{DEFAULT_CONSUMER_GROUP_PREFIX}{link_name}"
            else:
                digest = hashlib.sha1(selection.describe().encode()).hexdigest()[:12]
                group = f"{DEFAULT_CONSUMER_GROUP_PREFIX}{digest}"
        credentials: SessionCredentials | None
        if "credentialsfile" in opts:
            if "accesskeyenv" in opts or "secretkeyenv" in opts:
                raise ReplicatorConfigError("give either credentialsFile or accessKeyEnv / secretKeyEnv, not both",
                                            field="credentialsFile")
            credentials = read_credentials_file(opts["credentialsfile"], field="credentialsFile")
        elif "accesskeyenv" in opts or "secretkeyenv" in opts:
            credentials = resolve_credentials(opts.get("accesskeyenv"), opts.get("secretkeyenv"),
                                              fields=("accessKeyEnv", "secretKeyEnv"))
        else:
            credentials = cluster_cfg.credentials() if link_cfg is not None else None
        return validate_options(cls, {**values, "selection": selection, "group": group, "link": link_name,
                                      "credentials": credentials, "config": opts.get("config"),
                                      "tls": cluster_cfg.tls if link_cfg is not None else None})
