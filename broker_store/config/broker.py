"""A broker's settings: ``BrokerSettings`` (a broker entry of ``up``'s file) and ``BrokerConfig`` (one broker
process, ``python -m broker_store broker --config FILE``: the settings plus its cluster and name servers)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator

from broker_store.address import HostPort, split_host_port
from broker_store.config.common import ConfigModel, check_ipv4
from broker_store.config.controllers import ControllerLinkSettings
from broker_store.ha.settings import HARole, HASettings
from broker_store.net.hygiene import ConnectionLimits
from broker_store.net.tls_settings import TlsSettings
from broker_store.restart_policy import RestartMode
from broker_store.store.config import StoreConfig, StoreSettings
from broker_store.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DelayLevels


class BrokerSettings(ConfigModel):
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
    primary_address: HostPort | None = None
    """Controller mode: the broker group's primary address, the same on every member of the group (the
    keepalived-VIP model, ``broker.primary_address``). The member that is PRIMARY binds it (after its promotion's
    steps; retried with back-off while another process still holds it), registers it with the name servers as the
    group's primary (brokerId 0 in routes, so clients' routes name it and never change), and closes it (and every
    connection accepted on it) when its demotion begins or it stops; its own ``listen`` serves throughout.
    Clients that refresh routes only every 30 s (RocketMQ 4.x) thus reach the new primary at the address they
    have. On one host the members share the host and the port moves between processes; across hosts the host
    must be a floating IP that follows the primary (docs/brokers.md, "Clients through a failover"). With
    ``fast_listen_enable`` its port - 2 moves too. None: the primary registers its own ``listen`` address."""
    fast_listen_enable: bool = True
    """Also serve on listen port - 2, RocketMQ's "VIP channel" that Java clients with
    vipChannelEnabled=true send to (skipped when listen port is 0)."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Prometheus endpoint ``http://<listen host>:<port>/metrics`` (``broker.metrics``: role, epoch, offsets, disk
    use and disk full; RocketMQ's metricsPromExporterPort); 0: an ephemeral port, logged. None: no endpoint."""
    broker_ip: Annotated[str, AfterValidator(check_ipv4)] | None = None
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
        if self.primary_address is not None and not self.enable_controller_mode:
            raise ValueError(f"primary_address ({self.primary_address}) needs enable_controller_mode: true; a "
                             "static group's primary never moves, so clients use its listen address")
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
        self._primary_address_checks()
        if self.ha.role is HARole.SLAVE:
            raise ValueError("ha.role SLAVE does not fit enable_controller_mode (the controller decides who is "
                             "primary, and whom to follow: ha.ha_primary_address goes with SLAVE only); allowed: "
                             "ASYNC_MASTER or SYNC_MASTER, how the broker acts while primary")

    def _primary_address_checks(self) -> None:
        """The primary address is the group's, not one more port of this broker: no port 0, none of its own."""
        if self.primary_address is None:
            return
        host, port = split_host_port(self.primary_address)
        if port == 0:
            raise ValueError(f"primary_address {self.primary_address}: port 0 is no address clients can be given; "
                             "name a fixed port")
        if self.fast_listen_enable and port <= 2:
            raise ValueError(f"primary_address {self.primary_address}: with fast_listen_enable its port - 2 is "
                             "served too and must be a port; use a port above 2 or fast_listen_enable: false")
        own = self.own_addresses()
        taken = sorted(a for a in self.primary_addresses() if a in own)
        if taken:
            raise ValueError(f"primary_address {self.primary_address}: {taken} is also this broker's own address "
                             f"(listen, its port - 2, the HA port or metrics_port: {sorted(own)}); the primary "
                             "address moves between the group's members and needs a port of its own")
        if self.ha.ha_listen_port is not None:
            raise ValueError(f"primary_address with ha.ha_listen_port ({self.ha.ha_listen_port}): replicas find "
                             "the primary's HA port at its listen port + 1 when the name servers list the primary "
                             f"address ({host}:{port}) instead of the primary; leave ha.ha_listen_port out")

    def own_addresses(self) -> set[str]:
        """Every ``host:port`` this broker itself binds: listen, the fast port, the HA port, metrics_port."""
        host, port = split_host_port(self.listen)
        addrs = {self.listen, f"{host}:{self.ha_port()}"}
        if self.fast_listen_enable and port > 2:
            addrs.add(f"{host}:{port - 2}")
        if self.metrics_port:
            addrs.add(f"{host}:{self.metrics_port}")
        return addrs

    def primary_addresses(self) -> list[str]:
        """What the group's primary binds while primary: ``primary_address`` and, with ``fast_listen_enable``, its
        port - 2 (empty without a primary address)."""
        if self.primary_address is None:
            return []
        host, port = split_host_port(self.primary_address)
        return [self.primary_address, *([f"{host}:{port - 2}"] if self.fast_listen_enable else [])]

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
