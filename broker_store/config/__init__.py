"""Typed configuration of name servers, brokers and the local multi-cluster layout.

Loaded by ``broker_store.cli`` (``load_yaml(path, Model)``) and built directly by tests. Every model
forbids unknown keys; every problem surfaces as one ``ConfigError`` naming the file, the field path
and the reason (pydantic's message lists the allowed values for enumerations). Nothing is silently
replaced by a default.

``conf/cluster-local.yaml``::

    clusters:
      - name: source
        namesrv: {listen: "127.0.0.1:9876"}
        brokers:
          - {broker_name: broker-a, listen: "127.0.0.1:10911", store_dir: /tmp/rmq/source/broker-a}
      - name: target
        ...

Brokers listed under a cluster inherit ``cluster_name`` and ``namesrv_addrs`` from it.

The models live in one module per concern (``common``, ``namesrv``, ``controllers``, ``broker``,
``local_clusters``); import them from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from broker_store.address import HostPort, split_host_port
from broker_store.config.broker import BrokerConfig, BrokerSettings
from broker_store.config.controllers import (
    MAX_ELECTION_PRIORITY,
    ControllerConfig,
    ControllerLinkSettings,
    ControllersConfig,
)
from broker_store.config.local_clusters import LocalClusterConfig, LocalClustersConfig
from broker_store.config.namesrv import NamesrvConfig
from broker_store.protocol.errors import ConfigError
from broker_store.validation import describe_validation_error

__all__ = ["MAX_ELECTION_PRIORITY", "BrokerConfig", "BrokerSettings", "ControllerConfig", "ControllerLinkSettings",
           "ControllersConfig", "HostPort", "LocalClusterConfig", "LocalClustersConfig", "NamesrvConfig",
           "describe_validation_error", "load_yaml", "split_host_port"]


M = TypeVar("M", bound=BaseModel)


def load_yaml(path: str | Path, model: type[M]) -> M:
    """Read and validate a YAML file; raises ConfigError naming the file, field path and reason."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read configuration file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: configuration file is not UTF-8: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{p}: invalid YAML{where}: {problem}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: <root>: expected a mapping of settings, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(str(p), exc)) from exc
