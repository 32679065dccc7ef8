"""The replication writer's options (``format("rocketmq")`` on ``writeStream``).

Validated once on the driver by ``RocketMQStreamWriter.__init__`` (``SinkOptions.from_options``); the
result is pickled to executors with the writer. The options are listed in ``connectors.replication.writer``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_store.protocol.acl import SessionCredentials
from connectors.core.config import (
    DEFAULT_PRODUCER_GROUP_PREFIX,
    FailurePolicy,
    TopicMappingConfig,
    load_replicator_config,
    resolve_credentials,
)
from connectors.core.errors import ConfigError
from connectors.core.options import parse_bool, parse_int

DEFAULT_BATCH_MAX_MESSAGES = 256
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024
DEFAULT_SEND_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class SinkOptions:
    """The writer's options, validated on the driver; pickled to executors with the writer."""

    namesrv: str
    target_cluster: str
    source_cluster: str | None = None
    source_namesrv: str | None = None
    topic: str | None = None
    mapping: TopicMappingConfig | None = None
    topic_map: Mapping[str, str] | None = None
    preserve_queues: bool = True
    max_in_flight: int = 4
    max_retries: int = 3
    retry_backoff_ms: int = 1000
    retry_timeout_ms: int = 600_000
    retry_backoff_max_ms: int = 10_000
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    batch_max_messages: int = DEFAULT_BATCH_MAX_MESSAGES
    batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES
    failure_policy: FailurePolicy = FailurePolicy.DISMISS
    failure_hook: str | None = None
    delta_location: str | None = None
    link: str | None = None
    checkpoint_location: str | None = None
    producer_group: str = f"{DEFAULT_PRODUCER_GROUP_PREFIX}spark"
    auto_create_topic: bool = True
    credentials: SessionCredentials | None = None
    """ACL identity for the target cluster; None = no ACL."""
    source_credentials: SessionCredentials | None = None
    """ACL identity for ``source_namesrv`` (queue-count look-ups); None = no ACL."""

    @property
    def label(self) -> str:
        return self.link or "rocketmq-sink"

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
        values: dict[str, Any] = {}
        link_name = opts.get("link")
        if "config" in opts:
            if not link_name:
                raise ConfigError("option 'config' needs option 'link'", field="link")
            replicator = load_replicator_config(opts["config"])
            link = replicator.link(link_name)
            values.update(
                namesrv=";".join(replicator.cluster(link.target).namesrv), target_cluster=link.target,
                source_cluster=link.source, source_namesrv=";".join(replicator.cluster(link.source).namesrv),
                mapping=link.topics, preserve_queues=link.preserve_queues, max_in_flight=link.max_in_flight,
                max_retries=link.max_retries, retry_backoff_ms=link.retry_backoff_ms,
                retry_timeout_ms=link.retry_timeout_ms, retry_backoff_max_ms=link.retry_backoff_max_ms,
                failure_policy=link.failure_policy, failure_hook=link.failure_hook,
                delta_location=link.delta_location, checkpoint_location=link.checkpoint_location,
                credentials=replicator.cluster(link.target).credentials(),
                source_credentials=replicator.cluster(link.source).credentials())
        for key, name in (("namesrv", "namesrv"), ("targetcluster", "target_cluster"),
                          ("sourcecluster", "source_cluster"), ("sourcenamesrv", "source_namesrv"),
                          ("topic", "topic"), ("deltalocation", "delta_location"),
                          ("checkpointlocation", "checkpoint_location"), ("failurehook", "failure_hook")):
            if opts.get(key):
                values[name] = opts[key]
        if "topicmapping" in opts:
            try:
                mapping = json.loads(opts["topicmapping"])
            except json.JSONDecodeError as exc:
                raise ConfigError(f"not JSON: {exc}", field="topicMapping") from exc
            if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in mapping.items()):
                raise ConfigError('must be a JSON object {"source topic": "target topic"}', field="topicMapping")
            values["topic_map"] = mapping
        if "failurepolicy" in opts:
            try:
                values["failure_policy"] = FailurePolicy(opts["failurepolicy"].strip().lower())
            except ValueError as exc:
                raise ConfigError(f"{opts['failurepolicy']!r} is not one of {[p.value for p in FailurePolicy]}",
                                  field="failurePolicy") from exc
        for key, name, minimum in (("maxInFlight", "max_in_flight", 1), ("maxRetries", "max_retries", 0),
                                   ("retryBackoffMs", "retry_backoff_ms", 0),
                                   ("retryTimeoutMs", "retry_timeout_ms", 0),
                                   ("retryBackoffMaxMs", "retry_backoff_max_ms", 0),
                                   ("sendTimeoutMs", "send_timeout_ms", 1),
                                   ("batchMaxMessages", "batch_max_messages", 1),
                                   ("batchMaxBytes", "batch_max_bytes", 1)):
            parsed = parse_int(opts, key, None, minimum=minimum)
            if parsed is not None:
                values[name] = parsed
        for ak_option, sk_option, name in (("accessKeyEnv", "secretKeyEnv", "credentials"),
                                           ("sourceAccessKeyEnv", "sourceSecretKeyEnv", "source_credentials")):
            ak, sk = opts.get(ak_option.lower()), opts.get(sk_option.lower())
            if ak is not None or sk is not None:
                values[name] = resolve_credentials(ak, sk, fields=(ak_option, sk_option))
        values["preserve_queues"] = parse_bool(opts, "preserveQueues", values.get("preserve_queues", True))
        values["auto_create_topic"] = parse_bool(opts, "autoCreateTopic", True)
        if link_name:
            values["link"] = link_name
        values["producer_group"] = opts.get("producergroup") or (
            f"{DEFAULT_PRODUCER_GROUP_PREFIX}{link_name or 'spark'}")
        for required, option in (("namesrv", "namesrv"), ("target_cluster", "targetCluster")):
            if not values.get(required):
                raise ConfigError("required (or give config + link)", field=option)
        if values.get("failure_policy") is FailurePolicy.CUSTOM and not values.get("failure_hook"):
            raise ConfigError("failurePolicy custom needs failureHook \"module:function\"", field="failureHook")
        if values.get("delta_location") and not link_name:
            raise ConfigError("deltaLocation needs link (tables live in <deltaLocation>/<link>)", field="link")
        if values.get("delta_location") and not values.get("source_cluster"):
            raise ConfigError("deltaLocation needs sourceCluster (the offsets table is per source cluster)",
                              field="sourceCluster")
        if values.get("delta_location") and not values.get("checkpoint_location"):
            raise ConfigError("deltaLocation needs the query's checkpointLocation (the Delta commits are "
                              "idempotent per Spark query id, read from the checkpoint)", field="checkpointLocation")
        return cls(**values)
