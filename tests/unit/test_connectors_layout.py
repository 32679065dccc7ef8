"""The connectors' layout rules (issue #10, README "Architecture"): ``core`` imports no connector package,
the connector packages import each other only along the documented edges and never in a circle, and no
module of ``connectors`` or ``jobs`` passes 600 lines (split before it does). Read from the source (ast)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "replication", "heartbeat", "checkpoint", "config_sync")
ALLOWED = {
    ("checkpoint", "replication"),   # the link's Delta tables through replication/tables.py, their format's owner
    ("replication", "config_sync"),  # create a missing target topic with config sync's rule (creation.py)
}
"""Imports between connector packages (besides every package -> core)."""
MAX_LINES = 600


def _imported_packages(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        out.update(n.split(".")[1] for n in names if n.startswith("connectors.") and n.count(".") >= 1)
    return out


def test_core_imports_no_connector_and_connectors_only_the_documented_edges() -> None:
    edges: set[tuple[str, str]] = set()
    for package in PACKAGES:
        for path in (REPO / "connectors" / package).rglob("*.py"):
            edges.update((package, imported) for imported in _imported_packages(path) if imported != package)
    assert {e for e in edges if e[0] == "core"} == set()
    assert edges - {(p, "core") for p in PACKAGES} == ALLOWED
    # no circle: following the edges from any package never comes back to it
    for start in PACKAGES:
        reached: set[str] = set()
        stack = [start]
        while stack:
            node = stack.pop()
            for a, b in edges:
                if a == node and b not in reached:
                    reached.add(b)
                    stack.append(b)
        assert start not in reached, f"import circle through connectors.{start}"


def test_no_module_passes_the_size_limit() -> None:
    sizes = {str(p.relative_to(REPO)): len(p.read_text().splitlines())
             for root in ("connectors", "jobs") for p in (REPO / root).rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
