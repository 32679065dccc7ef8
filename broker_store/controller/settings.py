"""The controller's settings: one owner, the ``controller:`` section of a name server's YAML (the embedded
controller, RocketMQ's enableControllerInNamesrv) or of ``python -m broker_store controller --config``.

RocketMQ's defaults (10 s heartbeat timeout, 5 s scans) give failovers of tens of seconds; ours are 3 s / 0.5 s,
and a broker whose connection closes (kill -9) is inactive at once. The local configurations use them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

from broker_store.acl.peers import PeerAllowList, checked_peer_list


class EtcdSettings(BaseModel):
    """The replicated controllers' state in etcd (``controller.etcd_store``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    endpoints: list[HttpUrl] = Field(min_length=1)
    """Client URLs of the etcd members (http://127.0.0.1:2379 ...); tried in order, the next on failure."""
    prefix: str = Field(default="rocketmq/", min_length=1)
    """Key prefix of this controller group's state (several groups may share one etcd)."""
    lease_ttl_seconds: int = Field(default=3, ge=1)
    """The leader's lease: another controller takes over this long after the leader stops renewing."""


class ControllerSettings(BaseModel):
    """Frozen: a runtime change (UPDATE_CONTROLLER_CONFIG: the first four fields only, ``controller.runtime_settings``)
    replaces the controller's whole settings object with a newly validated one."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    enable_elect_unclean_master: bool = False
    """AP over CP: with no live SyncStateSet member, elect any live replica (may lose acknowledged
    messages the old primary had and it lacked). Off: the group waits for a SyncStateSet member."""
    heartbeat_timeout_ms: int = Field(default=3000, ge=100)
    """A broker without a heartbeat for this long is inactive (RocketMQ: 10000). A broker whose connection closes
    (kill -9) is inactive at once."""
    scan_interval_ms: int = Field(default=500, ge=20)
    """How often the controller looks for inactive brokers and primaries to replace (RocketMQ: 5000)."""
    notify_broker_role_changed: bool = True
    """Push NOTIFY_BROKER_ROLE_CHANGED to a group's live brokers after an election (they also poll)."""
    state_dir: Path | None = None
    """The embedded controller's state file directory (``controller-state.json``); None: beside the name
    server's working directory (``./controller``). Ignored with ``etcd``."""
    etcd: EtcdSettings | None = None
    """Replicated controllers: the state lives in etcd; none kept locally."""
    allowed_peers: list[str] | None = None
    """Addresses whose controller requests are served (exact IPv4/IPv6 addresses, CIDR networks such as
    10.0.0.0/24, or ``*``): a request from any other is answered NO_PERMISSION with a remark naming this key
    (``acl.peers``). The brokers of every group and the admin tools' hosts belong in it. None (the default)
    serves anyone, as RocketMQ does. Embedded in a name server it guards the controller's requests only: routes
    stay public. Not changeable at runtime (UPDATE_CONTROLLER_CONFIG refuses it)."""

    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """The controller's Prometheus endpoint, ``http://<listen host>:<port>/metrics`` (``controller.metrics``: per
    group whether it has a live primary, its master epoch; RocketMQ's metricsPromExporterPort). Bound to the host
    of the name server's (or the standalone controller's) ``listen``; 0: an ephemeral port, logged. None (the
    default): no endpoint. Not changeable at runtime."""

    acl_file: Path | None = None
    """A plain_acl.yml (RocketMQ's layout, ``acl.plain_file``) whose accounts may send controller requests: with it,
    a request must be signed by one of its accounts (ACL 1.0's signature: brokers sign with their
    ``acl_credentials_file``) or come from one of its ``globalWhiteRemoteAddresses`` / the account's
    ``whiteRemoteAddress``; any other is answered SYSTEM_ERROR with RocketMQ's AclException text. Checked after
    ``allowed_peers``; read when the controller starts (a bad file stops it), not reloaded. None: no signature is
    asked for, as RocketMQ's controller. Not changeable at runtime."""
    acl_credentials_file: Path | None = None
    """The controller's own account (RocketMQ's tools.yml layout: ``accessKey``, ``secretKey``, optional
    ``securityToken``; ``protocol.credentials_file``), read when the controller starts (a bad file stops it): its
    NOTIFY_BROKER_ROLE_CHANGED pushes are signed with it, so brokers with ``acl_enable`` accept them without
    whitelisting the controller (the account must be in their ``acl_file``). None: the pushes go unsigned, as
    RocketMQ's controller sends them, and a broker with ACL refuses them (it still learns the role by polling).
    Not changeable at runtime."""

    @field_validator("allowed_peers")
    @classmethod
    def _parsable_peers(cls, value: list[str] | None) -> list[str] | None:
        return checked_peer_list(value, key="allowed_peers", members="broker")

    def peer_allow_list(self) -> PeerAllowList | None:
        return None if self.allowed_peers is None else PeerAllowList.parse(self.allowed_peers)
