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
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from broker_store.address import HostPort, split_host_port
from broker_store.controller.settings import ControllerSettings
from broker_store.ha.settings import HARole, HASettings
from broker_store.net.hygiene import ConnectionLimits
from broker_store.net.tls_settings import TlsSettings
from broker_store.protocol.errors import ConfigError
from broker_store.restart_policy import RestartMode
from broker_store.store.config import StoreConfig, StoreSettings
from broker_store.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DelayLevels
from broker_store.validation import describe_validation_error

__all__ = ["BrokerConfig", "BrokerSettings", "ControllerConfig", "ControllersConfig", "HostPort", "LocalClusterConfig",
           "LocalClustersConfig", "NamesrvConfig",
           "describe_validation_error", "load_yaml", "split_host_port"]


def _check_ipv4(value: str) -> str:
    try:
        ipaddress.IPv4Address(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not an IPv4 address (stored messages hold IPv4 hosts)") from exc
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class NamesrvConfig(_Model):
    """One name server."""

    listen: HostPort = "127.0.0.1:9876"
    """Address the name server binds and brokers/clients dial."""
    broker_expiry_seconds: float = Field(default=5.0, gt=0)
    """A broker without a heartbeat for this long is removed from routes (RocketMQ 5 lite heartbeat). A heartbeat
    from a broker the name server does not hold (it restarted, or expired the broker while it was frozen) is
    answered so, and the project's broker registers at once instead of at its next ``register_interval_seconds``
    (RocketMQ's brokers wait for it)."""
    scan_interval_seconds: float = Field(default=1.0, gt=0)
    """Period of the expiry scan."""
    controller: ControllerSettings | None = None
    """The embedded controller (RocketMQ's enableControllerInNamesrv): brokers in controller mode register,
    heartbeat and are elected here. None: this name server runs no controller."""
    tls: TlsSettings = Field(default_factory=lambda: TlsSettings())
    """RocketMQ's TLS settings under their key names (``net.tls_settings``): ``tls.server.mode`` disabled /
    permissive / enforcing with its certificate, key, trust certificates and need.client.auth, and
    ``tls.enable`` + ``tls.client.*`` for the embedded controller's connections to brokers."""
    restart: RestartMode = RestartMode.ON_FAILURE
    """Read by ``up`` only (``restart_policy``): "on-failure" restarts this name server with back-off when it exits
    with a code other than 0; "no" leaves it down."""


class ControllerConfig(_Model):
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


class ControllersConfig(_Model):
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
        dupes = _duplicates(self.listen)
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


class ControllerLinkSettings(_Model):
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
        dupes = _duplicates(self.controller_addrs)
        if dupes:
            raise ValueError(f"controller_addrs lists {dupes} more than once")
        return self


class BrokerSettings(_Model):
    """Everything about one broker except what its cluster implies (name, name servers)."""

    restart: RestartMode = RestartMode.ON_FAILURE
    """Read by ``up`` only (``restart_policy``): "on-failure" restarts this broker with back-off when it exits with
    a code other than 0 (kill -9 included); "no" leaves it down (a test that wants a member down)."""
    broker_name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Broker group name; primary and replicas of one group share it."""
    broker_id: int = Field(default=0, ge=0)
    """0 = primary, > 0 = replica. Static groups only: with ``enable_controller_mode`` the controller assigns
    the id (kept in ``store_dir/brokerIdentity``) and the role, and this key must be left out."""
    enable_controller_mode: bool = False
    """RocketMQ's enableControllerMode: the broker has no fixed role or id. It starts as a replica under the
    id its ``brokerIdentity`` file keeps (across restarts and address changes, ``broker.identity_file``) and
    the controller promotes or demotes it; ``ha.role`` then names only how it acts while primary
    (ASYNC_MASTER or SYNC_MASTER), and the controller, not ``ha.ha_primary_address``, names whom it
    follows. The file, ``store_dir/brokerIdentity``, holds ``cluster#broker#id`` (``brokerIdentity-temp`` adds
    ``#registerCheckCode`` while an apply is pending); without one the broker does not register until the
    controller assigns an id. A group is all static or all controlled."""
    controller: ControllerLinkSettings = Field(default_factory=lambda: ControllerLinkSettings())
    """With ``enable_controller_mode``: the controllers this broker reports to and its election priority
    (``ControllerLinkSettings``); a ``controller:`` section without controller mode is refused."""
    listen: HostPort = "127.0.0.1:10911"
    """Address the broker binds."""
    fast_listen_enable: bool = True
    """Also serve on listen port - 2, RocketMQ's "VIP channel" that Java clients with
    vipChannelEnabled=true send to (skipped when listen port is 0)."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Prometheus endpoint ``http://<listen host>:<port>/metrics`` (``broker.metrics``: role, epoch, offsets, disk
    use and disk full; RocketMQ's metricsPromExporterPort); 0: an ephemeral port, logged. None: no endpoint."""
    broker_ip: Annotated[str, AfterValidator(_check_ipv4)] | None = None
    """IPv4 address advertised to name servers and written as STOREHOST; default: the listen host
    (or 127.0.0.1 when listening on 0.0.0.0)."""
    store_dir: Path
    """Directory for the CommitLog, ConsumeQueues and metadata (``config/topics.json``,
    ``config/consumer_offsets.json``, ``config/subscription_groups.json``, ``config/delayOffset.json``)."""
    store: StoreSettings = Field(default_factory=lambda: StoreSettings())
    """The message store's settings (``broker_store.store.config.StoreSettings``). Its keys may also be
    written flat at the broker level, as older files do; the same key in both places is an error."""
    ha: HASettings = Field(default_factory=lambda: HASettings())
    """Replication within the broker group (``broker_store.ha.settings.HASettings``): role, HA port, quorum
    sizes, replica reads. role SLAVE goes with broker_id > 0, ASYNC_MASTER / SYNC_MASTER with broker_id 0."""
    auto_create_topic_enable: bool = True
    """Register TBW102 (perm READ|WRITE|INHERIT) so sends to unknown topics create them."""
    auto_create_subscription_group: bool = True
    """A PULL_MESSAGE naming a consumer group the subscription group table lacks creates the group with
    RocketMQ's defaults (persisted); off, such a pull is refused SUBSCRIPTION_GROUP_NOT_EXIST (26). Groups named
    ``CID_RMQ_SYS_*`` (RocketMQ's own tools, this replicator) are created either way, as RocketMQ does."""
    default_topic_queue_nums: int = Field(default=8, ge=1, le=1024)
    """Queue count of TBW102, the cap on auto-created topics' queue counts."""
    register_interval_seconds: float = Field(default=30.0, gt=0)
    """Period of the full REGISTER_BROKER with the whole topic table."""
    heartbeat_interval_seconds: float = Field(default=1.0, gt=0)
    """Period of the lite BROKER_HEARTBEAT."""
    long_polling_enable: bool = True
    """Hold pulls that find nothing until a message arrives or suspendTimeoutMillis passes."""
    short_polling_time_ms: int = Field(default=1000, ge=0)
    """Hold time of a suspended pull when long polling is off."""
    max_pull_msg_nums: int = Field(default=1024, ge=1)
    """Cap on messages returned by one PULL_MESSAGE."""
    region_id: str = "DefaultRegion"
    """Returned as MSG_REGION in send responses."""
    trace_on: bool = True
    """Returned as TRACE_ON in send responses."""
    max_reconsume_times: int = Field(default=16, ge=0)
    """Redeliveries before CONSUMER_SEND_MSG_BACK moves a message to %DLQ%<group>."""
    offset_persist_interval_seconds: float = Field(default=5.0, gt=0)
    """Period of consumer-offset and delay-offset persistence (also persisted on shutdown)."""
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    """Delay of each level of scheduled delivery, level 1 first (RocketMQ messageDelayLevel): delays separated
    by single spaces, each an integer and a unit s, m, h or d. A message whose DELAY property is a level > 0
    waits that long in SCHEDULE_TOPIC_XXXX (levels above the last wait the last delay); a consumer send-back
    with delayLevel 0 waits level 3 + reconsumeTimes (``broker.schedule``)."""
    client_channel_expiry_seconds: float = Field(default=120.0, gt=0)
    """A producer/consumer without HEART_BEAT for this long is dropped from the registry."""
    acl_enable: bool = False
    """RocketMQ's aclEnable: every request is checked against ``acl_file`` (ACL 1.0: signature, whitelists,
    permissions; ``broker_store.acl``) before it is dispatched; a refusal answers SYSTEM_ERROR with RocketMQ's
    AclException text."""
    acl_file: Path | None = None
    """The plain_acl.yml (RocketMQ's layout, ``acl.plain_file``) read at start (a bad or missing file stops the
    start), re-read when it changes (a bad one is logged and the previous accounts kept) and rewritten by the ACL
    admin requests. Required with ``acl_enable``."""
    acl_reload_check_seconds: float = Field(default=1.0, gt=0)
    """How often a request may look at ``acl_file``'s modification time and size for a change."""
    acl_credentials_file: Path | None = None
    """The broker's own ACL account, a file of RocketMQ's tools.yml layout (``accessKey``, ``secretKey``, optional
    ``securityToken``; ``protocol.credentials_file``), read at start. A replica signs its metadata-sync requests to its
    primary with it, so a primary with ACL lets the replica in by account, not by a whitelisted address (the
    account needs ``admin`` when the primary has ACL: the round copies its ACL file with admin requests), and every
    broker signs its controller requests with it (for a controller's ``controller.acl_file``). None: those requests
    go unsigned (RocketMQ's slave sync), and a primary with ACL must whitelist the replicas."""
    tls: TlsSettings = Field(default_factory=lambda: TlsSettings())
    """RocketMQ's TLS settings under their key names (``net.tls_settings``): ``tls.server.mode`` disabled /
    permissive / enforcing with its certificate, key, trust certificates and need.client.auth, and
    ``tls.enable`` + ``tls.client.*`` for the broker's connections to name servers and controllers."""
    server_channel_max_idle_seconds: float | None = Field(default=120.0, gt=0)
    """A client connection with nothing received or sent for this long and no request in flight is closed
    (RocketMQ serverChannelMaxIdleTimeSeconds, 120 s; ``net.hygiene``). None: never."""
    server_partial_frame_timeout_seconds: float | None = Field(default=30.0, gt=0)
    """A frame whose first bytes arrived this long ago and that is still incomplete closes its connection.
    None: never."""
    server_max_connections: int | None = Field(default=10_000, ge=1)
    """Open client connections per listener; past it a new one is answered SYSTEM_BUSY "[OVERLOAD] ..." and
    closed. None: no cap."""
    server_max_requests_in_flight: int | None = Field(default=10_000, ge=1)
    """Requests of one connection awaiting their answer (held pulls, puts waiting for flush or replicas); past
    it the next is answered SYSTEM_BUSY "[OVERLOAD] ...". None: no cap."""

    @model_validator(mode="before")
    @classmethod
    def _flat_store_keys(cls, data: Any) -> Any:
        """Move store keys written at the broker level into ``store`` (one definition, two spellings)."""
        if not isinstance(data, dict):
            return data
        flat = [key for key in data if key in StoreSettings.model_fields]
        if not flat:
            return data
        data = dict(data)
        nested = data.get("store")
        if isinstance(nested, StoreSettings):
            nested = nested.model_dump(exclude_unset=True)
        nested = dict(nested) if isinstance(nested, dict) else {}
        both = sorted(key for key in flat if key in nested)
        if both:
            raise ValueError(f"{both} given both at the broker level and under store:; keep one")
        nested.update((key, data.pop(key)) for key in flat)
        data["store"] = nested
        return data

    @field_validator("message_delay_level")
    @classmethod
    def _parsable_delay_levels(cls, value: str) -> str:
        DelayLevels.parse(value)  # raises, naming the bad item and the format
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> BrokerSettings:
        store = self.store
        if store.max_message_size + 4096 > store.commit_log_segment_size:
            raise ValueError(
                f"store.max_message_size ({store.max_message_size}) must leave room in a CommitLog "
                f"segment (store.commit_log_segment_size {store.commit_log_segment_size})"
            )
        role = self.ha.role
        if self.controller != ControllerLinkSettings() and not self.enable_controller_mode:
            # compared with the defaults, not "was it given": written configs (launcher) spell out every field
            raise ValueError("controller (the controllers a broker reports to) is only allowed with "
                             "enable_controller_mode: true; a static broker has a fixed role and asks no controller")
        if self.enable_controller_mode:
            self._controller_mode_checks()
        elif (role is HARole.SLAVE) != (self.broker_id > 0):
            allowed = ([HARole.SLAVE.value] if self.broker_id > 0
                       else [HARole.ASYNC_MASTER.value, HARole.SYNC_MASTER.value])
            raise ValueError(f"ha.role {role.value} does not fit broker_id {self.broker_id} (0 = primary, > 0 = "
                             f"replica); allowed roles for broker_id {self.broker_id}: {allowed}")
        self.ha_port()  # raises if listen + 1 is no port
        if self.acl_enable and self.acl_file is None:
            raise ValueError("acl_enable needs acl_file, the plain_acl.yml holding the accounts")
        return self

    def _controller_mode_checks(self) -> None:
        """What ``enable_controller_mode`` relaxes and what it rules out (the role/id pairing does not apply)."""
        if "broker_id" in self.model_fields_set:
            raise ValueError(f"broker_id ({self.broker_id}) is assigned by the controller when "
                             "enable_controller_mode is on (kept in store_dir/brokerIdentity); leave it out")
        if self.ha.role is HARole.SLAVE:
            raise ValueError("ha.role SLAVE does not fit enable_controller_mode (the controller decides who is "
                             "primary, and whom to follow: ha.ha_primary_address goes with SLAVE only); allowed: "
                             "ASYNC_MASTER or SYNC_MASTER, how the broker acts while primary")

    def connection_limits(self) -> ConnectionLimits:
        """The remoting listeners' hygiene (``net.hygiene``) from the ``server_*`` settings."""
        return ConnectionLimits(self.server_channel_max_idle_seconds, self.server_partial_frame_timeout_seconds,
                                self.server_max_connections, self.server_max_requests_in_flight)

    def delay_levels(self) -> DelayLevels:
        """The parsed ``message_delay_level``."""
        return DelayLevels.parse(self.message_delay_level)

    def ha_port(self) -> int:
        """The HA port: ``ha.ha_listen_port``, else the listen port + 1 (RocketMQ 10912 for 10911)."""
        return self.ha.ha_port(split_host_port(self.listen)[1])

    @property
    def advertised_ip(self) -> str:
        if self.broker_ip:
            return self.broker_ip
        host, _ = split_host_port(self.listen)
        if host in ("0.0.0.0", "", "localhost"):
            return "127.0.0.1"
        return host


class BrokerConfig(BrokerSettings):
    """One broker process."""

    cluster_name: str = Field(default="DefaultCluster", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Cluster the broker registers under."""
    namesrv_addrs: list[HostPort] = Field(default_factory=list)
    """Name servers to register with; empty = standalone (tests)."""

    @model_validator(mode="after")
    def _unique_namesrvs(self) -> BrokerConfig:
        dupes = [a for a, n in Counter(self.namesrv_addrs).items() if n > 1]
        if dupes:
            raise ValueError(f"namesrv_addrs lists {dupes} more than once")
        if self.ha.role is HARole.SLAVE and self.ha.ha_primary_address is None and not self.namesrv_addrs \
                and not self.enable_controller_mode:
            raise ValueError("a broker with ha.role SLAVE needs ha.ha_primary_address (host:port of the primary's "
                             "HA port) or namesrv_addrs (whose registration answer names the primary)")
        if self.enable_controller_mode and not self.controller_addresses():
            raise ValueError("a broker with enable_controller_mode needs controller.controller_addrs or "
                             "namesrv_addrs (the controller embedded in the name server): it has no fixed role "
                             "and no controller to ask for one")
        return self

    def controller_addresses(self) -> list[str]:
        """The controllers this broker reports to: ``controller.controller_addrs``, else its name servers."""
        return list(self.controller.controller_addrs or self.namesrv_addrs)

    def to_store_config(self) -> StoreConfig:
        """The MessageStore configuration this broker runs with (its store section and store_dir)."""
        return StoreConfig(store_dir=Path(self.store_dir), **dict(self.store))


class LocalClusterConfig(_Model):
    """One local cluster: a name server and its brokers."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Cluster name; its brokers inherit it as ``cluster_name``."""
    namesrv: NamesrvConfig = Field(default_factory=lambda: NamesrvConfig())
    """The cluster's name server (the name server's keys)."""
    brokers: list[BrokerSettings] = Field(min_length=1)
    """The cluster's brokers: the broker keys, minus ``cluster_name`` and ``namesrv_addrs``, which come from the
    cluster."""

    @model_validator(mode="after")
    def _unique_brokers(self) -> LocalClusterConfig:
        """Static brokers are told apart by name and id; controller-mode ones have no configured id (their
        store_dir tells them apart, unique across the file)."""
        keys = Counter((b.broker_name, b.broker_id) for b in self.brokers if not b.enable_controller_mode)
        dupes = [f"{n}/{i}" for (n, i), c in keys.items() if c > 1]
        if dupes:
            raise ValueError(f"cluster {self.name!r}: broker name/id {dupes} declared more than once")
        modes: dict[str, set[bool]] = {}
        for b in self.brokers:
            modes.setdefault(b.broker_name, set()).add(b.enable_controller_mode)
        mixed = sorted(name for name, seen in modes.items() if len(seen) > 1)
        if mixed:
            raise ValueError(f"cluster {self.name!r}: groups {mixed} mix brokers with and without "
                             "enable_controller_mode; a group is all static or all controlled")
        return self

    @model_validator(mode="after")
    def _replicas_have_primaries(self) -> LocalClusterConfig:
        primaries = {b.broker_name for b in self.brokers if b.broker_id == 0 and not b.enable_controller_mode}
        orphans = sorted(f"{b.broker_name}/{b.broker_id}" for b in self.brokers
                         if b.ha.role is HARole.SLAVE and b.ha.ha_primary_address is None
                         and b.broker_name not in primaries)
        if orphans:
            raise ValueError(f"cluster {self.name!r}: replicas {orphans} have no broker_id 0 in their group to "
                             "follow; add it or set ha.ha_primary_address")
        return self

    def broker_configs(self, controller_addrs: Iterable[str] = (),
                       controllers: ControllerSettings | None = None) -> list[BrokerConfig]:
        """Brokers with cluster_name and namesrv_addrs filled in from this cluster, and ``controller_addrs`` (the
        file's standalone controllers, whose settings are ``controllers``) for controller-mode brokers that name
        none. Such a broker also gets its controllers' heartbeat timeout as ``controller.heartbeat_timeout_ms``
        unless it sets one (the standalone controllers', else the embedded controller's when it reports to its
        name server): it is the length of its primary lease (``broker.primary_lease``), which must not exceed the
        timeout its controllers go by. A replica without ``ha.ha_primary_address`` learns its primary's HA address
        from the name server's registration answer, as RocketMQ's slaves do."""
        addrs = list(controller_addrs)
        configs = []
        for b in self.brokers:
            options = b.model_dump(exclude_unset=True)
            if b.enable_controller_mode and not b.controller.controller_addrs:
                link = dict(options.get("controller", {}))
                if addrs:
                    link["controller_addrs"] = addrs
                timeout = (controllers if addrs else self.namesrv.controller)
                if (timeout is not None and b.controller.heartbeat_timeout_ms is None
                        and timeout.heartbeat_timeout_ms > b.controller.heartbeat_interval_ms):
                    link["heartbeat_timeout_ms"] = timeout.heartbeat_timeout_ms
                if link:
                    options["controller"] = link
            configs.append(BrokerConfig(**options, cluster_name=self.name, namesrv_addrs=[self.namesrv.listen]))
        return configs


def _duplicates(values: Iterable[str]) -> list[str]:
    return sorted(v for v, n in Counter(values).items() if n > 1)


class LocalClustersConfig(_Model):
    """``conf/cluster-local.yaml``: every process of the local clusters (``python -m broker_store up``)."""

    clusters: list[LocalClusterConfig] = Field(min_length=1)
    """One entry per independent cluster."""
    controllers: ControllersConfig | None = None
    """Standalone controllers (and their etcd members) for the file's controller-mode groups; None: such groups
    use the controller embedded in their name server (``namesrv.controller``)."""

    @model_validator(mode="after")
    def _controlled_groups_have_a_controller(self) -> LocalClustersConfig:
        for i, c in enumerate(self.clusters):
            if self.controllers is not None and c.namesrv.controller is not None:
                raise ValueError(f"clusters[{i}].namesrv.controller and controllers are both set: keep one (the "
                                 "standalone controllers, or the one embedded in the name server)")
            lost = sorted({b.broker_name for b in c.brokers if b.enable_controller_mode
                           and not b.controller.controller_addrs}) \
                if self.controllers is None and c.namesrv.controller is None else []
            if lost:
                raise ValueError(f"cluster {c.name!r}: controller-mode groups {lost} have no controller: set "
                                 f"controllers, clusters[{i}].namesrv.controller (the embedded one) or the "
                                 "brokers' controller.controller_addrs")
        return self

    def broker_configs(self, cluster: LocalClusterConfig) -> list[BrokerConfig]:
        """``cluster.broker_configs`` with the file's standalone controllers filled in."""
        if self.controllers is None:
            return cluster.broker_configs()
        return cluster.broker_configs(self.controllers.listen, self.controllers.controller)

    @model_validator(mode="after")
    def _unique_across_file(self) -> LocalClustersConfig:
        names = _duplicates(c.name for c in self.clusters)
        if names:
            raise ValueError(f"cluster names {names} declared more than once")
        controllers = self.controllers
        listens = [c.namesrv.listen for c in self.clusters] + [
            b.listen for c in self.clusters for b in c.brokers
        ] + [f"{split_host_port(b.listen)[0]}:{b.ha_port()}" for c in self.clusters for b in c.brokers] + [
            f"{split_host_port(b.listen)[0]}:{b.metrics_port}" for c in self.clusters for b in c.brokers
            if b.metrics_port] + (
            [] if controllers is None else [*controllers.listen, *(f"127.0.0.1:{p + k}"
                                                                   for p in controllers.etcd_client_ports()
                                                                   for k in (0, 1))])
        ports = _duplicates(a for a in listens if not a.endswith(":0"))
        if ports:
            raise ValueError(f"listen addresses {ports} used by more than one process (HA ports included: a "
                             "broker's is ha.ha_listen_port, else its listen port + 1; an etcd member's peer port "
                             "is its client port + 1; and metrics_port)")
        dirs = _duplicates(str(Path(b.store_dir).resolve()) for c in self.clusters for b in c.brokers)
        if dirs:
            raise ValueError(f"store_dir {dirs} shared by more than one broker")
        return self

    def cluster(self, name: str) -> LocalClusterConfig:
        for c in self.clusters:
            if c.name == name:
                return c
        raise ConfigError(f"no cluster named {name!r}; known: {[c.name for c in self.clusters]}")


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
