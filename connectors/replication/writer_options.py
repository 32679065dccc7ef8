"""The replication writer's options (``format("rocketmq")`` on ``writeStream``).

Validated once on the driver by ``RocketMQStreamWriter.__init__`` (``SinkOptions.from_options``); the
result is pickled to executors with the writer. Each field's docstring is its option's meaning in docs/configuration.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, model_validator

from broker_store.client import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from connectors.core.config import (
    DEFAULT_CONSUMER_GROUP_PREFIX,
    DEFAULT_PRODUCER_GROUP_PREFIX,
    FailurePolicy,
    WriteSettings,
    field_error,
    load_replicator_config,
    read_credentials_file,
    resolve_credentials,
)
from connectors.core.errors import ReplicatorConfigError
from connectors.core.history_settings import HistorySettings
from connectors.core.options import given_options, lowered, validate_options
from connectors.core.topic_settings import TopicMappingConfig

DEFAULT_BATCH_MAX_MESSAGES = 256
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024
DEFAULT_SEND_TIMEOUT_MS = 3000
DEFAULT_TARGET_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""The bundled brokers' (and RocketMQ's) default ``max_message_size``."""


class SinkOptions(WriteSettings):
    """The writer's options (docs/configuration.md's table lists them: ``options_doc``), validated on the driver;
    pickled to executors with the writer. The link's writer settings are ``WriteSettings`` fields, so
    the options and the link YAML share their definitions; the rest are writer-only options."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    namesrv: str = Field(min_length=1)
    """Target name servers ``host:port[;host:port]`` (config+link: the target cluster's)."""
    target_cluster: str = Field(min_length=1)
    """Target cluster name (loop guard)."""
    source_cluster: str | None = None
    """Source cluster of the rows (none: each row's ``sourceCluster``); needed with ``deltaLocation``."""
    source_namesrv: str | None = None
    """Source name servers: the source topics' queue counts (queue placement) and the group mirror."""
    topic: str | None = None
    """One fixed target topic; else a non-null ``targetTopic`` column; else the link's topic mapping
    (config+link); else ``topicMapping``; else the source topic's name."""
    mapping: TopicMappingConfig | None = None
    """The link's topic mapping (config + link)."""
    topic_map: dict[str, str] | None = Field(default=None, alias="topicMapping")
    """``topicMapping`` JSON {"source topic": "target topic"}."""
    send_timeout_ms: int = Field(default=DEFAULT_SEND_TIMEOUT_MS, gt=0)
    """Timeout of one send attempt."""
    batch_max_messages: int = Field(default=DEFAULT_BATCH_MAX_MESSAGES, gt=0)
    """Messages per SEND_BATCH_MESSAGE."""
    batch_max_bytes: int = Field(default=DEFAULT_BATCH_MAX_BYTES, gt=0)
    """Encoded bytes per SEND_BATCH_MESSAGE (entry headers and properties included)."""
    target_max_message_size: int = Field(default=DEFAULT_TARGET_MAX_MESSAGE_SIZE, gt=0)
    """The target brokers' ``max_message_size``: bounds a batch's encoded size; a message whose entry
    alone exceeds it is sent as a single SEND_MESSAGE_V2, where the broker checks its body only, so every
    message the target takes alone is sent (``connectors.replication.sending``)."""
    delta_location: str | None = None
    """Root of the link tables (``<deltaLocation>/<link>``) the driver commits each batch to; needs ``link``,
    ``sourceCluster`` and ``checkpointLocation``. Without it nothing is recorded."""
    link: str | None = None
    """The link's name: with ``config``, the link of replicator.yaml that fills every option (explicit options
    win); with ``deltaLocation``, the folder of its tables."""
    checkpoint_location: str | None = None
    """The query's checkpoint location (writeStream's): the Delta commits are idempotent per its query id."""
    producer_group: str = f"{DEFAULT_PRODUCER_GROUP_PREFIX}spark"
    """Producer group of the sends (default ``PID_RMQ_SYS_REPLICATOR_<link>``)."""
    auto_create_topic: bool = True
    """Send to a target topic the target lacks through its TBW102 route, so the broker creates it."""
    credentials: SessionCredentials | None = None
    """ACL identity for the target cluster; None = no ACL."""
    source_group: str | None = None
    """The replicator's consumer group on the source (default ``CID_RMQ_SYS_REPLICATOR_<link>``, or the link's
    ``consumer_group``), whose offsets the driver commit mirrors (``commit_offsets_to_source``)."""
    commit_offsets_to_source: bool = True
    """Mirror each committed batch's end offsets to ``source_group`` on the source (needs
    ``sourceNamesrv`` and a group: ``connectors.replication.group_mirror``)."""
    config_path: str | None = None
    """The ``config`` option (replicator.yaml), named in the replay advice of dismissed failures."""
    source_credentials: SessionCredentials | None = None
    """ACL identity for ``source_namesrv`` (queue-count look-ups); None = no ACL."""
    tls: TlsClientSettings | None = None
    """TLS to the target cluster (its ``tls`` in the config); None: plain."""
    source_tls: TlsClientSettings | None = None
    """TLS to ``source_namesrv``; None: plain."""
    history: HistorySettings = HistorySettings()
    """The link's table retention and maintenance (config + link: its ``history``; else the defaults)."""
    checkpoints_enabled: bool = True
    """The link checkpoints consumer groups (config + link: ``checkpoints.enabled``): the offset map's
    retention then keeps the runs their positions need (``connectors.replication.retention``)."""

    DERIVED: ClassVar[frozenset[str]] = frozenset({"mapping", "topic_map", "link", "producer_group", "credentials",
                                                   "source_credentials", "tls", "source_tls", "config_path", "history",
                                                   "checkpoints_enabled"})
    """Fields computed by ``from_options``, not taken from an option of their name."""
    OPTIONLESS: ClassVar[frozenset[str]] = frozenset({"mapping", "credentials", "source_credentials", "config_path",
                                                      "history", "checkpoints_enabled"})
    """Fields no option of their name sets (the options below and config+link make them)."""
    OTHER_OPTIONS: ClassVar[Mapping[str, str]] = {
        "config": "A replicator.yaml (with ``link``): the link's clusters, topic mapping, tables and writer settings "
                  "fill the options (explicit options win); named in the replay advice of dismissed failures.",
        "accessKeyEnv": "NAME of the environment variable holding the target cluster's ACL access key (config+link: "
                        "the cluster's ``access_key_env``); read on the driver, the keys reach executors inside the "
                        "pickled writer, never as Spark options.",
        "secretKeyEnv": "NAME of the environment variable holding the target's secret key.",
        "sourceAccessKeyEnv": "The same as ``accessKeyEnv`` for ``sourceNamesrv`` (config+link: the source "
                              "cluster's).",
        "sourceSecretKeyEnv": "The same as ``secretKeyEnv`` for ``sourceNamesrv``.",
        "credentialsFile": "Instead of ``accessKeyEnv`` / ``secretKeyEnv``: a file with ``accessKey:`` and "
                           "``secretKey:`` (RocketMQ's tools.yml layout), read on the driver.",
        "sourceCredentialsFile": "The same as ``credentialsFile`` for ``sourceNamesrv``.",
    }
    """Options that are not a field of their name (``from_options`` reads them)."""

    @property
    def label(self) -> str:
        return self.link or "rocketmq-sink"

    @property
    def mirrored_group(self) -> str | None:
        """The source group the driver commit mirrors offsets to, or None when it does not."""
        if not self.commit_offsets_to_source or not self.source_namesrv:
            return None
        return self.source_group or (f"{DEFAULT_CONSUMER_GROUP_PREFIX}{self.link}" if self.link else None)

    @model_validator(mode="after")
    def _check_requirements(self) -> SinkOptions:
        if self.failure_policy is FailurePolicy.CUSTOM and not self.failure_hook:
            raise field_error("failure_hook", "failurePolicy custom needs failureHook \"module:function\"")
        if self.delta_location and not self.link:
            raise field_error("link", "deltaLocation needs link (tables live in <deltaLocation>/<link>)")
        if self.delta_location and not self.source_cluster:
            raise field_error("source_cluster",
                              "deltaLocation needs sourceCluster (the offsets table is per source cluster)")
        if self.delta_location and not self.checkpoint_location:
            raise field_error("checkpoint_location", "deltaLocation needs the query's checkpointLocation (the Delta "
                                                     "commits are idempotent per Spark query id, read from the "
                                                     "checkpoint)")
        return self

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = lowered(raw)
        values: dict[str, Any] = {}
        link_name = opts.get("link")
        if "config" in opts:
            if not link_name:
                raise ReplicatorConfigError("option 'config' needs option 'link'", field="link")
            replicator = load_replicator_config(opts["config"])
            link = replicator.link(link_name)
            values.update(
                {name: getattr(link, name) for name in WriteSettings.model_fields},
                namesrv=";".join(replicator.cluster(link.target).namesrv), target_cluster=link.target,
                source_cluster=link.source, source_namesrv=";".join(replicator.cluster(link.source).namesrv),
                mapping=link.topics, delta_location=link.delta_location, source_group=link.group,
                checkpoint_location=link.checkpoint_location,
                credentials=replicator.cluster(link.target).credentials(),
                source_credentials=replicator.cluster(link.source).credentials(), config_path=opts["config"],
                tls=replicator.cluster(link.target).tls, source_tls=replicator.cluster(link.source).tls,
                history=link.history, checkpoints_enabled=link.checkpoints.enabled)
        values.update(given_options(cls, opts, derived=cls.DERIVED))
        if "topicmapping" in opts:
            try:
                mapping = json.loads(opts["topicmapping"])
            except json.JSONDecodeError as exc:
                raise ReplicatorConfigError(f"not JSON: {exc}", field="topicMapping") from exc
            if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in mapping.items()):
                raise ReplicatorConfigError('must be a JSON object {"source topic": "target topic"}',
                                            field="topicMapping")
            values["topic_map"] = mapping
        if "failure_policy" in values:
            values["failure_policy"] = values["failure_policy"].strip().lower()
        for ak_option, sk_option, file_option, name in (
                ("accessKeyEnv", "secretKeyEnv", "credentialsFile", "credentials"),
                ("sourceAccessKeyEnv", "sourceSecretKeyEnv", "sourceCredentialsFile", "source_credentials")):
            ak, sk, file = (opts.get(o.lower()) for o in (ak_option, sk_option, file_option))
            if file is not None:
                if ak is not None or sk is not None:
                    raise ReplicatorConfigError(f"give either {file_option} or {ak_option} / {sk_option}, not both",
                                                field=file_option)
                values[name] = read_credentials_file(file, field=file_option)
            elif ak is not None or sk is not None:
                values[name] = resolve_credentials(ak, sk, fields=(ak_option, sk_option))
        if link_name:
            values["link"] = link_name
        values["producer_group"] = opts.get("producergroup") or (
            f"{DEFAULT_PRODUCER_GROUP_PREFIX}{link_name or 'spark'}")
        return validate_options(cls, values)
