"""The configuration reference (``docs/configuration.md``): one table per settings model, generated from the
models that validate the files (their fields, defaults and docstrings), so a setting is documented where it is
defined. The Spark options' tables are ``connectors.replication.options_doc``'s block on the same page."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from broker_store.config import (
    BrokerConfig,
    ControllerConfig,
    ControllerLinkSettings,
    ControllersConfig,
    LocalClusterConfig,
    LocalClustersConfig,
    NamesrvConfig,
)
from broker_store.controller.settings import ControllerSettings, EtcdSettings
from broker_store.ha.settings import HASettings
from broker_store.net.tls_settings import TlsClientSettings, TlsServerSettings, TlsSettings
from broker_store.store.config import StoreSettings
from connectors.core.config import ClusterConfig as ReplicatorClusterConfig
from connectors.core.config import LinkConfig, ReplicatorConfig
from connectors.core.history_settings import HistorySettings
from connectors.core.monitoring import HeartbeatSettings, MetricsSettings
from connectors.core.sync_settings import AclSyncSettings, CheckpointSettings, ConfigSyncSettings, GroupSelection
from connectors.core.topic_settings import ExplicitTopic, TopicMappingConfig, TopicPattern
from docgen.model_tables import model_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _tables(*parts: tuple[str, str]) -> str:
    return "\n\n".join(f"{title}\n\n{table}" if title else table for title, table in parts)


REPLICATOR_TABLES: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("Top level (`ReplicatorConfig`):", ReplicatorConfig, ""),
    ("Each entry of `clusters` (`connectors.core.config.ClusterConfig`):", ReplicatorClusterConfig, ""),
    ("Each entry of `links` (`LinkConfig`; the read and write settings are the Spark options below under their "
     "snake_case names):", LinkConfig, ""),
    ("A link's `topics` (`TopicMappingConfig`):", TopicMappingConfig, "topics."),
    ("Each entry of `topics.explicit` (`ExplicitTopic`):", ExplicitTopic, ""),
    ("Each entry of `topics.include` (`TopicPattern`):", TopicPattern, ""),
    ("A link's `checkpoints` (`CheckpointSettings`):", CheckpointSettings, "checkpoints."),
    ("A link's `config_sync` (`ConfigSyncSettings`):", ConfigSyncSettings, "config_sync."),
    ("`config_sync.acl` (`AclSyncSettings`):", AclSyncSettings, "config_sync.acl."),
    ("A `groups` selection of `checkpoints` or `config_sync` (`GroupSelection`):", GroupSelection, ""),
    ("A link's `history` (`HistorySettings`):", HistorySettings, "history."),
    ("Top-level `heartbeat` (`HeartbeatSettings`):", HeartbeatSettings, "heartbeat."),
    ("Top-level `metrics` (`MetricsSettings`):", MetricsSettings, "metrics."),
)
"""The replicator's tables: (title, model, key prefix). Float fields without a unit in their name are seconds,
shown as durations."""

BLOCKS: dict[str, Callable[[], str]] = {
    "cluster file": lambda: _tables(
        ("Top level (`LocalClustersConfig`):", model_table(LocalClustersConfig)),
        ("Each entry of `clusters` (`LocalClusterConfig`):", model_table(LocalClusterConfig))),
    "name server": lambda: model_table(NamesrvConfig),
    "controller": lambda: _tables(
        ("", model_table(ControllerSettings)),
        ("`controller.etcd` (`EtcdSettings`):", model_table(EtcdSettings, prefix="etcd."))),
    "standalone controller": lambda: model_table(ControllerConfig),
    "controllers": lambda: model_table(ControllersConfig),
    "broker": lambda: model_table(BrokerConfig),
    "store": lambda: model_table(StoreSettings),
    "ha": lambda: model_table(HASettings),
    "broker controller": lambda: model_table(ControllerLinkSettings),
    "tls": lambda: _tables(
        ("", model_table(TlsSettings, prefix="tls.", by_alias=True)),
        ("`tls.server` (`TlsServerSettings`):", model_table(TlsServerSettings, prefix="tls.server.", by_alias=True)),
        ("`tls.client` (`TlsClientSettings`):", model_table(TlsClientSettings, prefix="tls.client.", by_alias=True))),
    "replicator": lambda: _tables(*((title, model_table(model, prefix=prefix, durations=True))
                                   for title, model, prefix in REPLICATOR_TABLES)),
}
"""Block name -> its tables, in page order."""
