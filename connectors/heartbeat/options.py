"""The options of the ``rmq_heartbeat`` data source (reader and writer), resolved against the config.

Read on the driver when Spark creates the reader or writer; the result (frozen, picklable) travels to
executors inside the writer. Options (case-insensitive)::

    config    replicator.yaml path (required): links, clusters, ``heartbeat.interval``
    links     "a,b": the links to beat for (default: every link of the config)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_store.client import SessionCredentials, TlsClientSettings
from connectors.core.config import load_replicator_config
from connectors.core.errors import ReplicatorConfigError
from connectors.core.options import lowered


@dataclass(frozen=True)
class LinkEndpoints:
    """What the writer needs to beat for one link."""

    link: str
    source: str
    """Source cluster name (the heartbeat is produced there)."""
    target: str
    source_namesrv: str
    """``host:port[;host:port]`` of the source's name servers."""
    credentials: SessionCredentials | None
    """The source cluster's ACL keys, read on the driver (masked in ``repr``)."""
    tls: TlsClientSettings | None = None
    """TLS to the source cluster (its ``tls`` in the config); None: plain."""


@dataclass(frozen=True)
class HeartbeatOptions:
    interval_ms: int
    links: tuple[LinkEndpoints, ...]

    @property
    def link_names(self) -> list[str]:
        return [link.link for link in self.links]

    def link(self, name: str) -> LinkEndpoints:
        for link in self.links:
            if link.link == name:
                return link
        raise ReplicatorConfigError(f"no link {name!r} in this heartbeat source; links: {self.link_names}",
                                    field="links")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> HeartbeatOptions:
        opts = lowered(options)
        path = opts.get("config")
        if not path:
            raise ReplicatorConfigError("required: the replicator.yaml path", field="config")
        config = load_replicator_config(path)
        names = [n.strip() for n in opts.get("links", "").split(",") if n.strip()]
        names = names or [link.name for link in config.links]
        links = []
        for name in names:
            link = config.link(name)
            source = config.cluster(link.source)
            links.append(LinkEndpoints(link.name, link.source, link.target, ";".join(source.namesrv),
                                       source.credentials(), source.tls))
        return cls(config.heartbeat.interval_ms, tuple(links))
