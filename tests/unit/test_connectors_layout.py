"""The connectors' layout rules (docs/architecture.md, "The connectors' layers", generated from this file's rules):
``core`` imports no connector package, the connector packages import each other only along the documented edges and
never in a circle, the connectors import nothing of ``broker_store`` beyond ``client``, ``protocol``
(docs/architecture.md, "Data flow"), ``clock`` (the one source of time, a leaf module) and ``durable_file``
(crash-safe small files), the replication sink's driver commit and its executor tasks share only their records and
the rules both apply (and the writer's planning imports neither), and no module of ``connectors`` or ``jobs`` passes
600 lines (split before it does). Read from the source (ast) by the shared checker,
``tests/support/import_graph.py``."""

from __future__ import annotations

from tests.support.import_graph import all_imports, circle, oversized, package_unit, reachable, unit_edges

PACKAGES = ("core", "replication", "heartbeat", "checkpoint", "config_sync")
ALLOWED = {
    ("checkpoint", "replication"),   # the link's Delta tables through replication/tables.py, their format's owner
    ("replication", "config_sync"),  # create a missing target topic with config sync's rule (creation.py)
}
"""Imports between connector packages (besides every package -> core)."""
BROKER_STORE_API = frozenset({"client", "clock", "durable_file", "protocol"})
"""What the connectors may import of ``broker_store``: its client, its wire types, its clock (which imports
nothing of the project) and its crash-safe small files (``durable_file``: the source's max offsets record),
never broker internals."""
MAX_LINES = 600

SINK_WRITER = "connectors.replication.writer"
"""The sink's Spark class: unpickled by write planning, the tasks and the commit alike."""
SINK_TASK = "connectors.replication.partition_writer"
"""Where the sink's executor code starts (``write_partition``)."""
SINK_COMMIT = "connectors.replication.batch_commit"
"""Where the sink's driver code after a batch starts (``commit_batch``, ``abort_batch``)."""
SINK_SHARED = frozenset(f"connectors.replication{m}" for m in (
    "", ".records", ".writer_options", ".queue_placement", ".placement_table", ".planning"))
"""The replication modules both sides of the sink import: the package, the tasks' report to the commit and the
records in it, the options, the placement rule and table, the range plan."""
SINK_PLANNING = frozenset({"connectors.replication.failure_policy"})
"""The modules of one side that the writer's planning imports: it loads the failure hook, so that a bad hook fails
the query before any data moves."""


def test_core_imports_no_connector_and_connectors_only_the_documented_edges() -> None:
    edges = set(unit_edges(all_imports(["connectors"], ("connectors",)), package_unit("connectors")))
    assert {e for e in edges if e[0] == "core"} == set()
    assert edges - {(p, "core") for p in PACKAGES} == ALLOWED
    assert circle(edges) is None, f"import circle: {circle(edges)}"


def test_connectors_import_only_the_broker_stores_client_and_protocol() -> None:
    unit = package_unit("broker_store")
    used = {unit(imp.module): imp for imp in all_imports(["connectors"], ("broker_store",))}
    assert {u: f"{imp.source} imports {imp.module}" for u, imp in used.items() if u not in BROKER_STORE_API} == {}


def test_no_module_passes_the_size_limit() -> None:
    assert oversized(["connectors", "jobs"], MAX_LINES) == {}


def test_the_sinks_driver_commit_and_executor_tasks_import_nothing_of_each_other() -> None:
    task = reachable(SINK_TASK, "connectors.replication", at_import=False)
    commit = reachable(SINK_COMMIT, "connectors.replication", at_import=False)
    assert task & commit == SINK_SHARED
    one_side = (task | commit) - SINK_SHARED
    assert reachable(SINK_WRITER, "connectors.replication", at_import=True) & one_side == SINK_PLANNING
