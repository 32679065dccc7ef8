"""The layers of ``broker_store`` (docs/architecture.md, "The broker's layers", generated from this file's rules): every
import between its units points down the layers below, never up or sideways, and the low layers import only what the
design gives them: ``protocol`` nothing of the project, ``durable_file`` (crash-safe small files) only ``protocol``,
``net`` only ``protocol`` and ``clock``, ``store`` only ``clock``, ``durable_file`` and ``protocol``, ``client`` only
``clock``, ``net``, ``protocol`` and ``acl``'s account format, ``acl`` (ACL 1.0's pure decisions) only ``protocol``
and the validation formatter, ``ha`` nothing of the store but its package API and its epoch values. No module passes
600 lines. Read from the source (ast) by the shared checker, ``tests/support/import_graph.py``.

A unit is a subpackage or a top-level module; two modules of ``controller`` are units of their own because they sit
higher than the rest of their package: ``controller.server`` is the controller's process side (it reads
``config.ControllerConfig``, which holds ``controller.settings``) and ``controller.etcd_members`` holds etcd child
processes beside ``launcher``'s (whose helpers it uses).
"""

from __future__ import annotations

from tests.support.import_graph import (
    Import,
    all_imports,
    circle,
    not_allowed,
    oversized,
    package_unit,
    unit_edges,
)

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"protocol", "clock", "address", "background", "validation", "cli_table", "restart_policy"}),
    frozenset({"durable_file"}),
    frozenset({"net", "store", "acl"}),
    frozenset({"client", "ha", "cli_tls", "cli_credentials"}),
    frozenset({"controller"}),
    frozenset({"config"}),
    frozenset({"controller.server", "broker"}),
    frozenset({"namesrv"}),
    frozenset({"launcher"}),
    frozenset({"controller.etcd_members", "image_constraints", "up_supervisor"}),
    frozenset({"up", "cli_ha", "cli_acl", "image"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
"""The units, lowest first. A unit imports only units of lower layers, and of those only its ``ALLOWED``."""

ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "clock": frozenset(),
    "address": frozenset(),
    "background": frozenset(),
    "validation": frozenset(),
    "cli_table": frozenset(),  # the admin commands' tables (rich)
    "restart_policy": frozenset(),  # up's restart rule, a member's ``restart`` setting
    "durable_file": frozenset({"protocol"}),  # crash-safe small files: atomic replace, versioned checksummed JSON
    "acl": frozenset({"protocol", "validation"}),  # ACL 1.0's pure decisions and its account format
    "net": frozenset({"clock", "protocol"}),  # clock: the connection hygiene's timers
    "store": frozenset({"clock", "durable_file", "protocol"}),
    # acl: the account format of the ACL admin requests; clock: every timer of the clients
    "client": frozenset({"acl", "clock", "net", "protocol"}),
    # the store only through HA_STORE_API; acl: the peer allow-list and refusal log of the HA port
    "ha": frozenset({"acl", "address", "clock", "protocol", "store"}),
    # validation: UPDATE_CONTROLLER_CONFIG's refusals name the field as every settings error does
    # acl: the controller's peer allow-list and refusal log
    "controller": frozenset({"acl", "background", "clock", "durable_file", "net", "protocol", "store", "validation"}),
    # config: each part's settings model
    "config": frozenset({"address", "controller", "ha", "net", "protocol", "restart_policy", "store", "validation"}),
    "controller.server": frozenset({"address", "clock", "config", "controller", "net", "protocol"}),
    "broker": frozenset({"acl", "address", "background", "clock", "config", "durable_file", "ha", "net", "protocol",
                         "store", "validation"}),
    "namesrv": frozenset({"background", "clock", "config", "controller.server", "net", "protocol"}),
    "launcher": frozenset({"client", "config", "ha", "protocol"}),
    "controller.etcd_members": frozenset({"launcher"}),
    "up_supervisor": frozenset({"launcher", "restart_policy"}),  # up's restarts of its children
    "up": frozenset({"config", "controller.etcd_members", "launcher", "restart_policy", "up_supervisor"}),
    "image_constraints": frozenset({"protocol"}),  # the image's pins from the installed runtime dependencies
    # the container image build: subprocesses (debootstrap, docker), its pins and its error
    "image": frozenset({"image_constraints", "protocol"}),
    "cli_tls": frozenset({"net", "protocol"}),  # the admin commands' TLS options -> net's client settings
    "cli_credentials": frozenset({"protocol"}),  # the admin commands' ACL account options -> SessionCredentials
    "cli_ha": frozenset({"cli_credentials", "cli_table", "cli_tls", "client", "controller.etcd_members", "net",
                         "protocol"}),
    "cli_acl": frozenset({"acl", "cli_credentials", "cli_tls", "client", "config", "protocol", "validation"}),
    "cli": frozenset({"broker", "cli_acl", "cli_credentials", "cli_ha", "cli_table", "cli_tls", "client", "config",
                      "controller.server", "image", "launcher", "namesrv", "net", "protocol", "up",
                      "up_supervisor"}),
    "__main__": frozenset({"cli"}),
}
"""unit -> the units it may import: the design's layers, as the import graph has them (docs/architecture.md
shows them, python -m docgen). A new edge
that points down may be added here; one that points up or sideways is a design change, not an entry."""

HA_STORE_API = frozenset({"broker_store.store", "broker_store.store.epoch_cache"})
"""What HA may import of the store: the package's public names and the epoch values (pure data both sides of a
link exchange, ``ha.store_view``); it reads and writes a log through the ``ha.store_view`` Protocols."""

OWN_UNITS = ("broker_store.controller.server", "broker_store.controller.etcd_members")
MAX_LINES = 600


def unit(name: str) -> str:
    """A module's unit (``name`` dotted, or a repo-relative path)."""
    dotted = name.removesuffix(".py").replace("/", ".")
    return dotted.removeprefix("broker_store.") if dotted in OWN_UNITS else package_unit("broker_store")(dotted)


def edges() -> dict[tuple[str, str], list[Import]]:
    return unit_edges(all_imports(["broker_store"], ("broker_store",)), unit)


def test_every_unit_has_a_layer_and_its_allowed_imports_lie_below_it() -> None:
    layer = {u: i for i, units in enumerate(LAYERS) for u in units}
    assert sum(map(len, LAYERS)) == len(layer), "a unit in two layers"
    assert set(ALLOWED) == set(layer)
    assert {a for a, b in edges()} | {b for a, b in edges()} <= set(layer), "a new unit: give it a layer"
    assert [(a, b) for a, allowed in ALLOWED.items() for b in allowed if layer[b] >= layer[a]] == []


def test_no_unit_imports_up_or_sideways_and_the_low_layers_only_what_the_design_allows() -> None:
    graph = edges()
    assert not_allowed(graph, ALLOWED) == []
    assert circle(graph) is None


def test_ha_imports_only_the_stores_package_api_and_epoch_values() -> None:
    store_imports = edges().get(("ha", "store"), [])
    assert [f"{i.source} imports {i.module}" for i in store_imports if i.module not in HA_STORE_API] == []


def test_no_module_passes_the_size_limit() -> None:
    assert oversized(["broker_store"], MAX_LINES) == {}
