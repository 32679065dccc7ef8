"""Controllers: a standalone controller's file, ``up``'s ``controllers:`` section, and a controller-mode broker's
``controller:`` link to them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from broker_store.address import HostPort
from broker_store.config.common import ConfigModel, duplicates
from broker_store.controller.settings import ControllerSettings
from broker_store.net.tls_settings import TlsSettings


class ControllerConfig(ConfigModel):
    """``python -m broker_store controller --config FILE``: one standalone controller (several, over etcd,
    for a replicated controller group)."""

    listen: HostPort = "127.0.0.1:9878"
    """Where brokers and admin tools reach this controller."""
    controller: ControllerSettings = Field(default_factory=lambda: ControllerSettings())
    """The controller's settings: the same ``controller:`` section as a name server's embedded controller."""
    tls: TlsSettings = Field(default_factory=lambda: TlsSettings())
    """RocketMQ's TLS settings under their key names (``net.tls_settings``): ``tls.server.mode`` disabled /
    permissive / enforcing with its certificate, key, trust certificates and need.client.auth, and
    ``tls.enable`` + ``tls.client.*`` for its connections to brokers (role-change notices)."""


class ControllersConfig(ConfigModel):
    """``up``'s standalone controllers (the ``controllers:`` section of ``conf/cluster-ha.yaml``), shared by every
    cluster of the file: one ``python -m broker_store controller`` child per ``listen`` address, all with the same
    ``controller`` settings; with ``controller.etcd`` and ``start_etcd``, ``up`` first starts the etcd members
    themselves, one per endpoint. Controller-mode brokers without ``controller.controller_addrs`` report to
    them."""

    listen: list[HostPort] = Field(min_length=1)
    """Where each controller serves (brokers and admin tools dial these)."""
    controller: ControllerSettings = Field(default_factory=lambda: ControllerSettings())
    """Every controller's settings; more than one controller needs ``etcd`` (their shared state)."""
    start_etcd: bool = True
    """With ``controller.etcd``: ``up`` runs one etcd member per endpoint as its own child (loopback only, peer
    port = client port + 1, a 3.4 ``etcd`` binary on PATH). False: the endpoints are an etcd cluster run
    elsewhere."""
    etcd_data_dir: Path = Path("data/etcd")
    """The etcd members' data directories (``etcd-<i>.data`` inside), relative to where ``up`` runs;
    ``up --data-dir D`` uses ``D/etcd`` instead."""
    tls: TlsSettings = Field(default_factory=lambda: TlsSettings())
    """Every controller's TLS settings, as a standalone controller's ``tls`` (``tls.server.*`` for the port brokers
    and admin tools dial, ``tls.enable`` + ``tls.client.*`` for its role-change notices to brokers)."""

    @model_validator(mode="after")
    def _consistent(self) -> ControllersConfig:
        dupes = duplicates(self.listen)
        if dupes:
            raise ValueError(f"listen lists {dupes} more than once")
        if len(self.listen) > 1 and self.controller.etcd is None:
            raise ValueError(f"{len(self.listen)} controllers need controller.etcd: controllers keep no state of "
                             "their own when replicated, and separate state files would elect separately")
        if self.controller.etcd is not None and self.start_etcd:
            for url in self.controller.etcd.endpoints:
                if url.scheme != "http" or url.host != "127.0.0.1" or url.port is None:
                    raise ValueError(f"controller.etcd.endpoints: {url} is not http://127.0.0.1:<port>; the members "
                                     "up starts (start_etcd) serve plain HTTP on loopback")
            ports = self.etcd_client_ports()
            if len(ports) not in (1, 3, 5):
                raise ValueError(f"controller.etcd.endpoints: {len(ports)} members; up starts 1, 3 or 5 (an etcd "
                                 "quorum is a majority: an even count tolerates no more failures than one less)")
        return self

    def etcd_client_ports(self) -> list[int]:
        """Client ports of the etcd members ``up`` starts (empty without etcd or ``start_etcd``)."""
        if self.controller.etcd is None or not self.start_etcd:
            return []
        return [int(url.port or 0) for url in self.controller.etcd.endpoints]

    def controller_configs(self) -> list[ControllerConfig]:
        return [ControllerConfig(listen=addr, controller=self.controller, tls=self.tls) for addr in self.listen]


MAX_ELECTION_PRIORITY = (1 << 31) - 1
"""RocketMQ's brokerElectionPriority is a Java int; its default (Integer.MAX_VALUE) is the least preferred."""


class ControllerLinkSettings(ConfigModel):
    """The ``controller:`` section of a controller-mode broker: whom it asks and how often (RocketMQ 5's
    controllerAddr, brokerElectionPriority, brokerHeartbeatInterval, controllerHeartBeatTimeoutMills and
    the replica-info sync period). Read by ``broker.controller_agent``; allowed only with
    ``enable_controller_mode``."""

    controller_addrs: list[HostPort] = Field(default_factory=list)
    """host:port of each controller, tried in order (the next on failure or CONTROLLER_NOT_LEADER; heartbeats
    go to all). Empty: the broker's name servers, where the controller is embedded by default
    (RocketMQ's enableControllerInNamesrv)."""
    election_priority: int = Field(default=MAX_ELECTION_PRIORITY, ge=0, le=MAX_ELECTION_PRIORITY)
    """Sent in every heartbeat: among candidates equal in epoch and max offset the controller elects the
    lowest (RocketMQ brokerElectionPriority; its default, the largest int, is the least preferred)."""
    heartbeat_interval_ms: int = Field(default=1000, gt=0)
    """Period of the BROKER_HEARTBEAT to the controllers (RocketMQ brokerHeartbeatInterval, 1 s)."""
    heartbeat_timeout_ms: int | None = Field(default=None, gt=0)
    """Sent as heartbeatTimeoutMills: the controller counts this broker inactive after this long without a
    heartbeat. None: the field is left out and the controller's own heartbeat_timeout_ms applies
    (RocketMQ's brokers send controllerHeartBeatTimeoutMills, 10 s); ``up`` sets it to its controllers' own.
    It is also the primary's lease: a primary that has not had a heartbeat accepted for this long refuses sends
    (SERVICE_NOT_AVAILABLE) until a controller confirms it (docs/brokers.md, "Controller mode")."""
    replica_info_poll_interval_ms: int = Field(default=1000, gt=0)
    """Period of CONTROLLER_GET_REPLICA_INFO: the pull beside the controller's NOTIFY_BROKER_ROLE_CHANGED push,
    so a lost notification costs at most this long (RocketMQ syncBrokerMetadataPeriod, 5 s)."""
    request_timeout_ms: int = Field(default=3000, gt=0)
    """How long one request to a controller may take before the next controller is tried."""

    def primary_lease_ms(self) -> int:
        """The controller's heartbeat timeout for this broker: the ``heartbeat_timeout_ms`` it sends, else the
        controller's default (``broker.primary_lease``: how long a primary appends without a controller's word)."""
        if self.heartbeat_timeout_ms is not None:
            return self.heartbeat_timeout_ms
        default: int = ControllerSettings.model_fields["heartbeat_timeout_ms"].default
        return default

    @model_validator(mode="after")
    def _timeout_after_interval(self) -> ControllerLinkSettings:
        if self.heartbeat_timeout_ms is not None and self.heartbeat_timeout_ms <= self.heartbeat_interval_ms:
            raise ValueError(f"heartbeat_timeout_ms ({self.heartbeat_timeout_ms}) must be greater than "
                             f"heartbeat_interval_ms ({self.heartbeat_interval_ms}), or the controller counts a "
                             "live broker inactive between two heartbeats")
        dupes = duplicates(self.controller_addrs)
        if dupes:
            raise ValueError(f"controller_addrs lists {dupes} more than once")
        return self
