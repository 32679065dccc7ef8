"""``up``'s file (``conf/cluster-local.yaml``): clusters of a name server and brokers, and optional standalone
controllers; each cluster hands its brokers their ``BrokerConfig``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import Field, model_validator

from broker_store.address import split_host_port
from broker_store.config.broker import BrokerConfig, BrokerSettings
from broker_store.config.common import ConfigModel, duplicates
from broker_store.config.controllers import ControllersConfig
from broker_store.config.namesrv import NamesrvConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.ha.settings import HARole
from broker_store.protocol.errors import ConfigError


class LocalClusterConfig(ConfigModel):
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
        mixed = self._groups_disagreeing_on(lambda b: b.enable_controller_mode)
        if mixed:
            raise ValueError(f"cluster {self.name!r}: groups {mixed} mix brokers with and without "
                             "enable_controller_mode; a group is all static or all controlled")
        differ = self._groups_disagreeing_on(lambda b: b.primary_address)
        if differ:
            raise ValueError(f"cluster {self.name!r}: the members of groups {differ} give different primary_address "
                             "values (or some none); it is the group's, the same on every member")
        return self

    def _groups_disagreeing_on(self, setting: Callable[[BrokerSettings], object]) -> list[str]:
        """The broker groups (by name) whose members give different values of a setting that is the group's."""
        seen: dict[str, set[object]] = {}
        for b in self.brokers:
            seen.setdefault(b.broker_name, set()).add(setting(b))
        return sorted(name for name, values in seen.items() if len(values) > 1)

    def primary_addresses(self) -> list[str]:
        """Each group's primary addresses (``BrokerSettings.primary_addresses``), once per group."""
        return sorted({a for b in self.brokers for a in b.primary_addresses()})

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

class LocalClustersConfig(ConfigModel):
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
        names = duplicates(c.name for c in self.clusters)
        if names:
            raise ValueError(f"cluster names {names} declared more than once")
        controllers = self.controllers
        listens = [c.namesrv.listen for c in self.clusters] + [
            b.listen for c in self.clusters for b in c.brokers
        ] + [f"{split_host_port(b.listen)[0]}:{b.ha_port()}" for c in self.clusters for b in c.brokers] + [
            f"{split_host_port(b.listen)[0]}:{b.metrics_port}" for c in self.clusters for b in c.brokers
            if b.metrics_port] + [a for c in self.clusters for a in c.primary_addresses()] + (
            [] if controllers is None else [*controllers.listen, *(f"127.0.0.1:{p + k}"
                                                                   for p in controllers.etcd_client_ports()
                                                                   for k in (0, 1))])
        ports = duplicates(a for a in listens if not a.endswith(":0"))
        if ports:
            raise ValueError(f"listen addresses {ports} used by more than one process (HA ports included: a "
                             "broker's is ha.ha_listen_port, else its listen port + 1; an etcd member's peer port "
                             "is its client port + 1; each group's primary_address; and metrics_port)")
        dirs = duplicates(str(Path(b.store_dir).resolve()) for c in self.clusters for b in c.brokers)
        if dirs:
            raise ValueError(f"store_dir {dirs} shared by more than one broker")
        return self

    def cluster(self, name: str) -> LocalClusterConfig:
        for c in self.clusters:
            if c.name == name:
                return c
        raise ConfigError(f"no cluster named {name!r}; known: {[c.name for c in self.clusters]}")
