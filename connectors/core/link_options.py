"""The options of a polling connector bound to one link (checkpoint, config sync): ``config`` + ``link``.

Both halves of such a connector (its reader and its writer, on the driver) take the replicator YAML's
path and the link's name as Spark options and resolve them here; ``deltaLocation`` and
``checkpointLocation`` are optional. Used by ``connectors.checkpoint.data_source`` and
``connectors.config_sync.data_source``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from connectors.core.config import LinkConfig, ReplicatorConfig, load_replicator_config
from connectors.core.errors import ReplicatorConfigError
from connectors.core.options import lowered


@dataclass(frozen=True)
class LinkOptions:
    """A link's connector options, resolved against the replicator config (driver)."""

    config: ReplicatorConfig
    link: LinkConfig
    tables_location: str
    """``<deltaLocation or the link's delta_location>/<link>``: where the link's tables are."""
    checkpoint_location: str | None
    """The query's checkpoint (``checkpointLocation``), when the writer was given one."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> LinkOptions:
        """``ReplicatorConfigError`` naming ``config`` or ``link`` when one is missing, or what the YAML gets wrong."""
        opts = lowered(options)
        path, name = opts.get("config"), opts.get("link")
        if not path or not name:
            raise ReplicatorConfigError("options 'config' (the replicator YAML) and 'link' are both required",
                                        field="config" if not path else "link")
        config = load_replicator_config(path)
        link = config.link(name)
        delta = opts.get("deltalocation") or str(Path(link.delta_location).resolve())
        return cls(config, link, str(Path(delta) / link.name), opts.get("checkpointlocation"))
