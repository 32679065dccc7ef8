"""Typed replicator configuration: clusters, replication links and their topic mappings.

Loaded once on the driver by the ``jobs/`` entry points with ``load_replicator_config(path)``; the
link objects (frozen, picklable) are then handed to the Spark source and sink options and to
``TopicMapper`` / ``LinkTables`` / ``FailurePolicyRunner``. Every check happens at load time and fails
with ``ReplicatorConfigError("<file>: <field.path>: <reason>")``; only credentials are resolved later, at use
time, from the environment (``ClusterConfig.credentials``).

File layout (``conf/replicator.yaml`` is the commented example)::

    version: 1                                  # optional; the only version is 1
    clusters:
      - name: source                            # [A-Za-z0-9][A-Za-z0-9_.-]*, unique
        namesrv: [127.0.0.1:9876]               # list, or one "a:9876;b:9876" string
        access_key_env: RMQ_SRC_AK              # optional, both or neither; NAMES of env variables
        secret_key_env: RMQ_SRC_SK
    links:
      - name: source-to-target                  # [A-Za-z0-9][A-Za-z0-9_-]*, unique; a directory name
        source: source                          # defined clusters, source != target
        target: target
        topics:
          explicit: [{source: Orders}, {source: Pay, target: PayDR}, {source: [EU, US], target: All}]
          include: ["Metrics_.*", {pattern: "Audit_.*", target: "DR_{topic}"}]
          exclude: [".*_debug"]
          all_topics: false                     # every non-system topic of the source cluster
        checkpoint_location: run/checkpoints/source-to-target
        delta_location: run/delta               # tables live in <delta_location>/<link name>/
        history: {offsets_retention: 7 days}    # optional: connectors.core.history_settings.HistorySettings
        ...                                     # optional knobs with defaults: see LinkConfig
    heartbeat: {interval: 10 seconds}           # optional: connectors.core.monitoring.HeartbeatSettings
    metrics: {port: 9464}                       # optional: connectors.core.monitoring.MetricsSettings

Relative paths are kept as written and resolve against the job's working directory, like
``store_dir`` in ``conf/cluster-local.yaml``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from broker_store.client import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.message import PROPERTY_REPLICATOR_SOURCE
from connectors.core.credentials import INLINE_SECRET_KEYS as INLINE_SECRET_KEYS  # re-exported
from connectors.core.credentials import read_credentials_file as read_credentials_file  # re-exported
from connectors.core.credentials import resolve_credentials as resolve_credentials  # re-exported
from connectors.core.errors import OffsetFormatError, ReplicatorConfigError
from connectors.core.history_settings import HistorySettings
from connectors.core.monitoring import HeartbeatSettings, MetricsSettings
from connectors.core.offsets import OffsetSpec
from connectors.core.settings_base import SettingsModel as _Model
from connectors.core.settings_base import check_topic as _check_topic
from connectors.core.settings_base import combine_errors, error_reason
from connectors.core.settings_base import field_error as field_error  # re-exported: reader/writer options use it
from connectors.core.settings_base import parse_duration as _parse_trigger
from connectors.core.sync_settings import CheckpointSettings, ConfigSyncSettings
from connectors.core.topic_settings import TopicMappingConfig

CLUSTER_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""Full-match pattern of every cluster name. Names are written into message properties as lists joined
with ``CLUSTER_NAME_SEPARATOR`` (the replication loop guard's chain, ``connectors.replication.loop_guard``),
so a name never contains the separator and needs no escaping."""
CLUSTER_NAME_SEPARATOR = ","
LINK_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
"""Link names become directory names and part of the default consumer group, hence no dots."""
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HOST_PORT_PATTERN = re.compile(r"[A-Za-z0-9_.-]+:(\d{1,5})")
DEFAULT_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_REPLICATOR_"
DEFAULT_PRODUCER_GROUP_PREFIX = "PID_RMQ_SYS_REPLICATOR_"
HOOK_PATTERN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
"""``package.module:function`` (the attribute part may be dotted: ``module:Class.method``)."""

class ClusterConfig(_Model):
    """One RocketMQ cluster, reached through its name servers."""

    name: str
    """Cluster name; used in the loop-guard chain, so it must match ``CLUSTER_NAME_PATTERN``."""
    namesrv: tuple[str, ...]
    """Name-server addresses ``host:port``; a single ``"a:9876;b:9876"`` string is split on ``;``."""
    access_key_env: str | None = None
    """Name of the environment variable holding the access key (ACL); ``None`` = no ACL."""
    secret_key_env: str | None = None
    """Name of the environment variable holding the secret key; set iff ``access_key_env`` is."""
    credentials_file: str | None = None
    """Instead of the two variables: a file of RocketMQ's tools.yml layout (``accessKey:``, ``secretKey:``,
    optional ``securityToken:``), read when the job starts; a relative path is taken from where the job runs.
    Mode 0600 expected (a WARNING otherwise)."""
    tls: TlsClientSettings | None = None
    """Connect to this cluster with TLS (RocketMQ's tls.enable with its tls.client.* keys): ``trustCertPath``,
    ``certPath``, ``keyPath`` name PEM files (checked at load; inline PEM is refused), ``authServer`` (true:
    verify the servers' certificates). None: plain connections. Executors read the same paths."""

    @model_validator(mode="before")
    @classmethod
    def _reject_inline_secrets(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key in sorted(INLINE_SECRET_KEYS.intersection(data)):
                raise field_error(key, "inline credentials are not allowed; put the value in an environment "
                                        "variable and name it with access_key_env / secret_key_env")
        return data

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if CLUSTER_NAME_SEPARATOR in value:
            raise ValueError(f"cluster name {value!r} contains {CLUSTER_NAME_SEPARATOR!r}, the separator of the "
                             f"{PROPERTY_REPLICATOR_SOURCE} chain")
        if not CLUSTER_NAME_PATTERN.fullmatch(value):
            raise ValueError(f"cluster name {value!r} must match {CLUSTER_NAME_PATTERN.pattern}")
        return value

    @field_validator("namesrv", mode="before")
    @classmethod
    def _split_namesrv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(";") if part.strip())
        return value

    @field_validator("namesrv")
    @classmethod
    def _check_namesrv(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one name-server address is required")
        for addr in value:
            match = HOST_PORT_PATTERN.fullmatch(addr)
            if not match or not 0 < int(match.group(1)) < 65536:
                raise ValueError(f"{addr!r} is not host:port with a port in 1..65535")
        return value

    @field_validator("access_key_env", "secret_key_env")
    @classmethod
    def _check_env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME_PATTERN.fullmatch(value):
            raise ValueError(f"must be the NAME of an environment variable (e.g. RMQ_SRC_SK), matching "
                             f"{ENV_NAME_PATTERN.pattern}; the value given looks like an inline secret")
        return value

    @model_validator(mode="after")
    def _both_or_neither(self) -> ClusterConfig:
        if (self.access_key_env is None) != (self.secret_key_env is None):
            missing = "secret_key_env" if self.secret_key_env is None else "access_key_env"
            raise field_error(missing, "access_key_env and secret_key_env must be set together")
        if self.credentials_file is not None and self.access_key_env is not None:
            raise field_error("credentials_file", "give either credentials_file or access_key_env / "
                                                  "secret_key_env, not both")
        return self

    def credentials(self, environ: Mapping[str, str] | None = None) -> SessionCredentials | None:
        """The cluster's credentials read from ``environ`` (default ``os.environ``) or its ``credentials_file``;
        ``None`` without ACL.
        Every client the jobs open on this cluster signs its requests with them (``protocol.acl``).

        Raises ``CredentialError`` naming the variable when it is unset or empty, or the file when it is
        missing or malformed.
        """
        where = f"clusters[{self.name}]."
        if self.credentials_file is not None:
            return read_credentials_file(self.credentials_file, field=where + "credentials_file")
        return resolve_credentials(self.access_key_env, self.secret_key_env, environ=environ,
                                   fields=(where + "access_key_env", where + "secret_key_env"))


class FailurePolicy(StrEnum):
    """What happens to a message that still fails after ``max_retries``."""

    DISMISS = "dismiss"
    """Record it in the failures table and move on (the batch commits)."""
    CUSTOM = "custom"
    """Hand the batch's failures to ``failure_hook``; it returns True (dismiss) or False (fail the batch)."""



class RetrySettings(_Model):
    """How a link rides out an unavailable cluster, at either end (``connectors.core.outage``): shared by
    ``ReadSettings`` (the source: pulls and the reader's admin calls) and ``WriteSettings`` (the target)."""

    retry_backoff_ms: int = Field(default=1000, ge=0)
    """Wait before the first retry (of a failed send, or of a call to an unavailable cluster); doubled
    on each further retry."""
    retry_timeout_ms: int = Field(default=600_000, ge=0)
    """How long a call keeps retrying while the source or target cluster is unavailable (connection
    refused or lost, timeouts, busy / not-available answers, a broker missing from the route, no broker
    registered): the batch blocks and retries with backoff; for sends ``max_retries`` does not apply and
    nothing is recorded as failed. Past this budget the task or the driver call fails
    (``TargetUnavailableError`` / ``SourceUnavailableError``) and the batch is re-run on restart."""
    retry_backoff_max_ms: int = Field(default=10_000, ge=0)
    """Cap on the doubling backoff while a cluster is unavailable."""


STARTING_OFFSETS_FORMS = "earliest | latest | timestamp:<ms> | per-queue offsets JSON"


class ReadSettings(RetrySettings):
    """A link's settings of the replication reader. One definition per setting: the link YAML takes them
    by field name, the reader's Spark options by the camelCase alias (``tags`` for ``tag_filter``), both
    validated here (``connectors.replication.reader_options.SourceOptions`` derives from this model)."""

    tag_filter: str = Field(default="*", alias="tags")
    """RocketMQ tag expression: ``*`` (every message) or ``TagA || TagB``."""
    max_messages_per_trigger: int | None = Field(default=None, gt=0)
    """Upper bound on messages per micro-batch, across all queues read; None: no bound (a reader given
    no link; a link always has one, see ``LinkConfig``)."""
    min_messages_per_queue: int | None = Field(default=None, gt=0)
    """When ``max_messages_per_trigger`` cannot give every queue with a backlog this many messages, queues
    take turns (in order of queue key, continuing where the previous batch stopped), each reading this
    many (or its whole backlog) per turn, instead of every queue reading a sliver per batch: a queue waits
    at most ceil(queues x this / max_messages_per_trigger) batches, and each pull is a full one. None: the
    pull batch size (``pull_batch_size``). Set 1 to let every queue advance in every batch."""
    max_partitions: int | None = Field(default=None, gt=0)
    """Spark partitions per micro-batch at most (queues grouped into them); ``None`` = the Spark
    application's default parallelism (its cores), which keeps per-task overhead off many small queues."""
    starting_offsets: str = "latest"
    """Where a NEW link starts reading (no Spark checkpoint and no row in its Delta offsets table):
    ``earliest`` | ``latest`` | ``timestamp:<ms>`` | per-queue offsets JSON (``{"<topic>/<broker>/<queueId>":
    n}``; a queue it does not name starts at earliest). See ``connectors.core.offsets.OffsetSpec``. An
    existing link resumes where it stopped; move it with ``python -m jobs.reset_offsets``."""
    fail_on_data_loss: bool = True
    """True: a batch whose unread offsets are gone from a source queue (retention deleted them) fails
    with ``DataLossError``; false: the lost range is logged as a WARNING and skipped."""

    @field_validator("tag_filter")
    @classmethod
    def _check_tags(cls, value: str) -> str:
        if value.strip() == "*":
            return "*"
        tags = [tag.strip() for tag in value.split("||")]
        if not tags or any(not tag or "*" in tag for tag in tags):
            raise ValueError(f"{value!r} is not a tag expression: '*' or 'TagA || TagB'")
        return " || ".join(tags)

    @field_validator("starting_offsets")
    @classmethod
    def _check_starting_offsets(cls, value: str) -> str:
        try:
            OffsetSpec.parse(value)
        except OffsetFormatError as exc:
            raise ValueError(f"{exc} (allowed: {STARTING_OFFSETS_FORMS})") from exc
        return value.strip()


class WriteSettings(RetrySettings):
    """A link's settings of the replication writer; shared with its Spark options as ``ReadSettings`` is
    with the reader's (``connectors.replication.writer_options.SinkOptions`` derives from this model)."""

    preserve_queues: bool = True
    """True: the n-th queue (by broker name, queue id) of the source topic goes to the n-th queue of the target
    topic when both have as many queues; otherwise to the target queue with the fewest source queues, each
    decision recorded in the link's ``placements`` table and kept while the link lives (without the link's
    tables: a hash of the source broker and queue id)."""
    failure_policy: FailurePolicy = FailurePolicy.DISMISS
    """A message that still fails after ``max_retries``: ``dismiss`` records it in the failures table and the
    batch commits; ``custom`` hands the batch's failures to ``failure_hook``."""
    failure_hook: str | None = None
    """``"package.module:function"``; required iff ``failure_policy`` is ``custom``."""
    max_retries: int = Field(default=3, ge=0)
    """Retries of a failed send (after the first attempt) before the failure policy applies."""
    max_in_flight: int = Field(default=4, gt=0)
    """Concurrent batch sends per Spark task (1 keeps strict order under retries)."""


class LinkConfig(ReadSettings, WriteSettings):
    """One replication link: a source cluster, a target cluster and how topics map between them, with
    the reader's and writer's settings (``ReadSettings``, ``WriteSettings``)."""

    name: str
    """Unique; names the per-link Delta directory and the default consumer group."""
    source: str
    """Name of the cluster messages are read from."""
    target: str
    """Name of the cluster messages are written to; differs from ``source``."""
    topics: TopicMappingConfig
    """Which source topics the link replicates, and under which target names."""
    trigger_interval: float = 5.0
    """Seconds between micro-batches; YAML takes a number or ``"5 seconds"`` / ``"500 milliseconds"``."""
    max_messages_per_trigger: int = Field(default=10_000, gt=0)
    """``ReadSettings.max_messages_per_trigger`` with the link's default: a link is always bounded."""
    checkpoint_location: str
    """Spark checkpoint directory of this link's query; unique across links."""
    delta_location: str
    """Root of the Delta tables; this link's tables are under ``<delta_location>/<name>/``."""
    consumer_group: str | None = None
    """Source consumer group; ``None`` means ``CID_RMQ_SYS_REPLICATOR_<name>`` (see ``group``)."""
    starting_offsets: str = "earliest"
    """``ReadSettings.starting_offsets`` with the link's default: a new link copies what the source
    holds already."""
    checkpoints: CheckpointSettings = CheckpointSettings()
    """Consumer-group checkpoints source -> target (``jobs/checkpoint.py``; ``connectors.core.sync_settings``)."""
    config_sync: ConfigSyncSettings = ConfigSyncSettings()
    """Topic configuration and subscription groups source -> target (``jobs/config_sync.py``)."""
    history: HistorySettings = HistorySettings()
    """Retention of the link's Delta tables and their maintenance (``connectors.core.history_settings``)."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not LINK_NAME_PATTERN.fullmatch(value):
            raise ValueError(f"link name {value!r} must match {LINK_NAME_PATTERN.pattern}")
        return value

    @field_validator("trigger_interval", mode="before")
    @classmethod
    def _check_trigger(cls, value: Any) -> float:
        return _parse_trigger(value)

    @field_validator("checkpoint_location", "delta_location")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty path")
        return value

    @field_validator("consumer_group")
    @classmethod
    def _check_group(cls, value: str | None) -> str | None:
        return None if value is None else _check_topic(value)

    @model_validator(mode="after")
    def _check_policy(self) -> LinkConfig:
        if self.source == self.target:
            raise field_error("target", f"source and target are both {self.source!r}")
        if self.failure_policy is FailurePolicy.CUSTOM and not self.failure_hook:
            raise field_error("failure_hook", "required when failure_policy is custom "
                                               "(\"package.module:function\")")
        if self.failure_policy is FailurePolicy.DISMISS and self.failure_hook:
            raise field_error("failure_hook", "only used with failure_policy: custom; remove it or "
                                               "set failure_policy: custom")
        if self.failure_hook is not None and not HOOK_PATTERN.fullmatch(self.failure_hook):
            raise field_error("failure_hook", f"{self.failure_hook!r} is not \"package.module:function\"")
        self.topics._groups = self.checkpoints.groups if self.checkpoints.enabled else None
        return self

    @property
    def group(self) -> str:
        """The consumer group actually used: ``consumer_group`` or ``CID_RMQ_SYS_REPLICATOR_<name>``."""
        return self.consumer_group or f"{DEFAULT_CONSUMER_GROUP_PREFIX}{self.name}"

    @property
    def tables_location(self) -> Path:
        """``<delta_location>/<name>``: the directory of this link's four Delta tables."""
        return Path(self.delta_location) / self.name

    @property
    def spark_trigger(self) -> str:
        """``trigger_interval`` as Spark's ``processingTime`` string (milliseconds, exact)."""
        return f"{round(self.trigger_interval * 1000)} milliseconds"

    @property
    def tags(self) -> frozenset[str] | None:
        """The tag filter as a set; ``None`` means every message (``*``)."""
        if self.tag_filter == "*":
            return None
        return frozenset(tag.strip() for tag in self.tag_filter.split("||"))


class ReplicatorConfig(_Model):
    """The whole ``replicator.yaml``: clusters and the links between them."""

    version: Literal[1] = 1
    """Format version of this file."""
    clusters: tuple[ClusterConfig, ...]
    """The clusters the links name."""
    links: tuple[LinkConfig, ...]
    """Replication links, each from one cluster to another."""
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    """Every link's heartbeat (``connectors.core.monitoring``; produced by ``jobs/heartbeat.py``)."""
    metrics: MetricsSettings = MetricsSettings()
    """The jobs' Prometheus endpoint (``connectors.core.monitoring``)."""

    @model_validator(mode="after")
    def _cross_references(self) -> ReplicatorConfig:
        names = [c.name for c in self.clusters]
        for index, cluster in enumerate(self.clusters):
            if names.index(cluster.name) != index:
                raise field_error(f"clusters[{index}].name", f"cluster {cluster.name!r} is defined twice")
        if not self.links:
            raise field_error("links", "at least one link is required")
        link_names: set[str] = set()
        checkpoints: dict[str, str] = {}
        groups: dict[tuple[str, str], str] = {}
        for index, link in enumerate(self.links):
            where = f"links[{index}]"
            if link.name in link_names:
                raise field_error(f"{where}.name", f"link {link.name!r} is defined twice")
            link_names.add(link.name)
            for end in ("source", "target"):
                cluster = getattr(link, end)
                if cluster not in names:
                    raise field_error(f"{where}.{end}", f"cluster {cluster!r} is not defined; "
                                                         f"defined clusters: {names}")
            checkpoint = os.path.normpath(link.checkpoint_location)
            if checkpoint in checkpoints:
                raise field_error(f"{where}.checkpoint_location",
                                   f"already used by link {checkpoints[checkpoint]!r}; each query needs "
                                   f"its own checkpoint")
            checkpoints[checkpoint] = link.name
            key = (link.source, link.group)
            if key in groups:
                raise field_error(f"{where}.consumer_group",
                                   f"group {link.group!r} on cluster {link.source!r} is already used by "
                                   f"link {groups[key]!r}")
            groups[key] = link.name
        return self

    def cluster(self, name: str) -> ClusterConfig:
        """The cluster called ``name``; ``ReplicatorConfigError`` listing the defined names otherwise."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        defined = [c.name for c in self.clusters]
        raise ReplicatorConfigError(f"no cluster {name!r}; defined: {defined}", field="clusters")

    def link(self, name: str) -> LinkConfig:
        """The link called ``name``; ``ReplicatorConfigError`` listing the defined names otherwise."""
        for link in self.links:
            if link.name == name:
                return link
        raise ReplicatorConfigError(f"no link {name!r}; defined: {[link.name for link in self.links]}", field="links")


def _render_location(loc: tuple[int | str, ...], extra: str | None) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    if extra:
        path += extra if extra.startswith("[") else (f".{extra}" if path else extra)
    return path or "<root>"


def config_error_from_validation(exc: ValidationError, *, file: str | None) -> ReplicatorConfigError:
    """Translate pydantic's errors into one ``ReplicatorConfigError`` (first field named; every error listed)."""
    entries: list[tuple[str, str]] = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        extra = ctx.get("field") if error["type"] == "replicator_field" else None
        # drop the pseudo-locations pydantic adds for before/after validators
        loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        reason = ("unknown key (not allowed here; check the spelling)" if error["type"] == "extra_forbidden"
                  else error_reason(error))
        entries.append((_render_location(loc, extra), reason))
    field, reason = combine_errors(entries)
    return ReplicatorConfigError(reason, file=file, field=field)


def parse_replicator_config(data: Any, *, file: str | None = None) -> ReplicatorConfig:
    """Validate an already-parsed YAML document; ``file`` only labels errors."""
    if not isinstance(data, Mapping):
        raise ReplicatorConfigError(f"expected a mapping with 'clusters' and 'links', got {type(data).__name__}",
                                    file=file)
    try:
        return ReplicatorConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error_from_validation(exc, file=file) from exc


def load_replicator_config(path: str | os.PathLike[str]) -> ReplicatorConfig:
    """Read and validate a replicator YAML file; every problem raises ``ReplicatorConfigError`` naming the file."""
    file = os.fspath(path)
    try:
        with open(file, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ReplicatorConfigError(f"cannot read: {exc.strerror or exc}", file=file) from exc
    except UnicodeDecodeError as exc:  # raised from inside safe_load as it reads the file
        raise ReplicatorConfigError(f"not UTF-8: {exc}", file=file) from exc
    except yaml.YAMLError as exc:
        raise ReplicatorConfigError(f"not valid YAML: {exc}", file=file) from exc
    return parse_replicator_config(data, file=file)
