"""The ``ha:`` section of a broker's settings: its replication role, quorum sizes, HA link timing, replica reads.

Defined once here and nested as ``ha:`` in the broker settings (``broker_store.config.BrokerSettings``,
which also checks role against broker_id). Read by ``quorum`` (needAck rules),
``primary_service`` / ``replica_client`` (port, batch size, heartbeats, dead-link timeout) and, later,
the pull processor (replica reads) and metadata sync. Names are RocketMQ's (snake_case), with the unit
in the name; defaults are RocketMQ's, so an empty ``ha:`` section is a standalone ASYNC_MASTER::

    ha:
      role: SYNC_MASTER
      total_replicas: 2
      in_sync_replicas: 2      # 1/1 (the default) means asynchronous replication even for SYNC_MASTER
      slave_timeout_ms: 3000

Validated when loaded (``extra="forbid"``, ranges, and min_in_sync <= in_sync <= total); pydantic's
messages name the field and list the allowed values of ``role``.
"""

from __future__ import annotations

import enum
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from broker_store.acl.peers import checked_peer_list
from broker_store.address import HostPort
from broker_store.ha.peer_auth import PeerPolicy, peer_policy
from broker_store.ha.wire import MAX_BATCH_BYTES
from broker_store.protocol.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB


class HARole(enum.StrEnum):
    """A broker's replication role as configured (RocketMQ's brokerRole).

    Not the runtime role: that is the broker's ``RoleState`` (``broker/role.py``: PRIMARY / REPLICA and
    the fenced stages between), which ``BrokerServer.change_role`` changes. SLAVE starts as REPLICA, either MASTER as
    PRIMARY; the MASTER flavour says whether a primary's puts wait for replica acks. The broker settings
    must keep this consistent with ``broker_id`` (0 = a MASTER role, > 0 = SLAVE), as RocketMQ requires.
    """

    ASYNC_MASTER = "ASYNC_MASTER"
    """Primary; a put is answered once written (and flushed, per flush mode); replicas follow behind."""
    SYNC_MASTER = "SYNC_MASTER"
    """Primary; a put also waits for replica acks when the quorum needs more than one copy."""
    SLAVE = "SLAVE"
    """Replica: follows its group's primary (``ha_primary_address`` or the name server's answer), accepts
    no sends."""

    @property
    def is_primary(self) -> bool:
        return self is not HARole.SLAVE


class HASettings(BaseModel):
    """High availability of one broker within its group (primary broker_id 0, replicas > 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    role: HARole = HARole.ASYNC_MASTER
    """ASYNC_MASTER, SYNC_MASTER or SLAVE (RocketMQ brokerRole)."""
    ha_listen_port: int | None = Field(default=None, ge=0, le=65535)
    """Port of the HA link a primary listens on; default None = the broker's listen port + 1 (RocketMQ
    10912 for 10911); 0 asks the OS for a free port (tests)."""
    ha_primary_address: HostPort | None = None
    """SLAVE only: host:port of the primary's HA listener (RocketMQ haMasterAddress). Unset, the replica
    follows the HA address the name server names in its REGISTER_BROKER answer (the primary registers it as
    haServerAddr); set, it overrides that. A SLAVE without name servers needs it
    (``broker_store.config.BrokerConfig`` checks)."""
    ha_transfer_batch_size: int = Field(default=32 * KiB, gt=0, le=MAX_BATCH_BYTES)
    """Most CommitLog bytes in one transfer batch (RocketMQ haTransferBatchSize, 32 KiB)."""
    ha_send_heartbeat_interval_ms: int = Field(default=5000, gt=0)
    """An idle link carries a heartbeat (empty batch / offset report) this often (RocketMQ 5 s)."""
    ha_housekeeping_interval_ms: int = Field(default=20_000, gt=0)
    """A link on which nothing arrived for this long is dead and closed; the replica reconnects
    (RocketMQ haHousekeepingInterval, 20 s). Must exceed the heartbeat interval."""
    slave_timeout_ms: int = Field(default=3000, gt=0)
    """How long a put waits for its replica acks before FLUSH_SLAVE_TIMEOUT (RocketMQ 5 slaveTimeout,
    3 s; RocketMQ 4.x waited syncFlushTimeout, 5 s). The message stays stored either way."""
    total_replicas: int = Field(default=1, ge=1)
    """Copies in the group, primary included (RocketMQ totalReplicas)."""
    in_sync_replicas: int = Field(default=1, ge=1)
    """Copies, primary included, a SYNC_MASTER put waits for (RocketMQ inSyncReplicas). 1 = no wait:
    RocketMQ 5's compatibility rule makes the 1/1 default asynchronous replication."""
    min_in_sync_replicas: int = Field(default=1, ge=1)
    """Floor of the automatic downgrade: never acknowledge with fewer copies (RocketMQ minInSyncReplicas)."""
    enable_auto_in_sync_replicas: bool = False
    """Automatic downgrade: wait for min(in_sync_replicas, copies currently in sync), but at least
    min_in_sync_replicas (RocketMQ enableAutoInSyncReplicas)."""
    ha_max_gap_not_in_sync: int = Field(default=256 * MiB, gt=0)
    """A replica more than this many bytes behind the primary's max offset is not in sync
    (RocketMQ haMaxGapNotInSync: 256 MiB in its code; its QuorumACK doc's "256K" is a doc error)."""
    all_ack_in_sync_state_set: bool = False
    """Controller mode only: a put waits for every SyncStateSet member (RocketMQ allAckInSyncStateSet).
    Without a controller there is no SyncStateSet and this has no effect."""
    ha_max_time_slave_not_catchup_ms: int = Field(default=15_000, gt=0)
    """Controller mode only: a SyncStateSet member that has not caught up for this long is removed."""
    slave_read_enable: bool = False
    """Let consumers that fall far behind read from a replica (RocketMQ slaveReadEnable)."""
    access_message_in_memory_max_ratio: int = Field(default=40, ge=0, le=100)
    """Percent of ``memory_basis_bytes``: a pull further behind the primary's max offset than this is
    "consuming slowly" and is pointed at the group's whichBrokerWhenConsumeSlowly."""
    memory_basis_bytes: int | None = Field(default=None, gt=0)
    """Memory the ratio above is a share of; None = this machine's physical memory (RocketMQ's basis).
    Set it small in tests to trigger replica reads with little data."""
    metadata_sync_interval_ms: int = Field(default=10_000, gt=0)
    """Period at which a replica copies topics, consumer offsets, subscription groups and delay offsets from
    its primary (RocketMQ SlaveSynchronize: 10 s; ``broker.metadata_sync``). A message of a topic the replica's
    table does not list asks for a round at once (at most one such round a second)."""

    ha_allowed_peers: list[str] | None = None
    """Addresses that may connect to this broker's HA port (exact IPv4/IPv6 addresses, CIDR networks such as
    10.0.0.0/24, or ``*``): a connection from any other is closed before a byte is read (``ha.peer_auth``).
    None (the default) accepts anyone, as RocketMQ does. List every member of the group: a replica promoted
    later needs the others too."""
    ha_secret_file: Path | None = None
    """A file holding the group's shared HA secret (at least 16 bytes; surrounding whitespace ignored), the same
    file content on every member. Set, every HA link opens with a mutual HMAC-SHA256 challenge-response
    (``ha.peer_auth``; the secret never crosses the wire) and a peer without it is refused; unset, the link's
    bytes are RocketMQ's. Read when the broker starts; the secret itself is never written into a config."""

    @field_validator("ha_allowed_peers")
    @classmethod
    def _parsable_peers(cls, value: list[str] | None) -> list[str] | None:
        return checked_peer_list(value, key="ha_allowed_peers", members="peer")

    @model_validator(mode="after")
    def _cross_checks(self) -> HASettings:
        if not self.min_in_sync_replicas <= self.in_sync_replicas <= self.total_replicas:
            raise ValueError(
                "replica counts must satisfy min_in_sync_replicas <= in_sync_replicas <= total_replicas, got "
                f"min_in_sync_replicas={self.min_in_sync_replicas}, in_sync_replicas={self.in_sync_replicas}, "
                f"total_replicas={self.total_replicas}")
        if self.role is not HARole.SLAVE and self.ha_primary_address is not None:
            raise ValueError(f"ha_primary_address is only allowed with role SLAVE, not {self.role.value} "
                             f"(allowed roles for it: {[HARole.SLAVE.value]})")
        if self.ha_housekeeping_interval_ms <= self.ha_send_heartbeat_interval_ms:
            raise ValueError(
                f"ha_housekeeping_interval_ms ({self.ha_housekeeping_interval_ms}) must be greater than "
                f"ha_send_heartbeat_interval_ms ({self.ha_send_heartbeat_interval_ms}), or idle links die")
        return self

    def ha_port(self, listen_port: int) -> int:
        """The HA port for a broker listening on ``listen_port``: the configured one, else listen + 1."""
        if self.ha_listen_port is not None:
            return self.ha_listen_port
        if listen_port == 0:
            return 0
        if listen_port >= 65535:
            raise ConfigError(f"ha.ha_listen_port: the default (listen port + 1) of listen port {listen_port} "
                              "is not a valid port; set ha_listen_port (0..65535)")
        return listen_port + 1

    def peer_policy(self) -> PeerPolicy:
        """Who may use the HA link (``ha_allowed_peers``, ``ha_secret_file``): the secret file is read now, a
        ConfigError naming the field when it cannot be or is too short."""
        return peer_policy(self.ha_allowed_peers, self.ha_secret_file)

    def memory_basis(self) -> int:
        """Bytes the in-memory ratio is a share of (``memory_basis_bytes`` or physical memory)."""
        if self.memory_basis_bytes is not None:
            return self.memory_basis_bytes
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError) as exc:
            raise ConfigError("ha.memory_basis_bytes: physical memory size is unknown on this platform; "
                              "set memory_basis_bytes") from exc

    def max_in_memory_gap(self) -> int:
        """Bytes behind the primary's max offset beyond which a pull counts as consuming slowly."""
        return self.memory_basis() * self.access_message_in_memory_max_ratio // 100
