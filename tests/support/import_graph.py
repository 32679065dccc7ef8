"""The one import-graph checker of the layout tests (``tests/unit/test_connectors_layout.py``,
``tests/unit/test_broker_store_layout.py``): which project modules each source file imports, read from the
source with ast (every import statement, also the lazy ones inside functions), grouped into units (a package or
a top-level module), and the checks the tests make of that graph. Nothing is imported to find out."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Import:
    """One import of a project module: ``source`` (a repo-relative path) imports ``module`` (dotted)."""

    source: str
    module: str


def imports_of(path: Path, prefixes: tuple[str, ...]) -> list[Import]:
    """The absolute imports in ``path`` of modules named ``p`` or ``p.*`` for a ``p`` in ``prefixes``
    (``from a.b import c`` counts as importing ``a.b``). The project uses no relative imports."""
    tree = ast.parse(path.read_text(), str(path))
    source = str(path.relative_to(REPO))
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{source}: relative import"
            names = [node.module or ""]
        else:
            continue
        out.extend(Import(source, n) for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))
    return out


def all_imports(roots: Iterable[str], prefixes: tuple[str, ...]) -> list[Import]:
    """``imports_of`` over every ``.py`` file under the repo-relative directories ``roots``."""
    return [imp for root in roots for path in sorted((REPO / root).rglob("*.py")) for imp in imports_of(path, prefixes)]


def package_unit(top: str) -> Callable[[str], str]:
    """The unit of a dotted name or a repo-relative path inside package ``top``: its subpackage, or for a module
    directly in ``top`` that module's name (``broker_store.store.commit_log`` -> ``store``,
    ``broker_store/cli/main.py`` -> ``cli``)."""

    def unit(name: str) -> str:
        parts = name.removesuffix(".py").replace("/", ".").split(".")
        assert parts[0] == top and len(parts) >= 2, name
        return parts[1]

    return unit


def unit_edges(imports: Iterable[Import], unit: Callable[[str], str]) -> dict[tuple[str, str], list[Import]]:
    """``(importing unit, imported unit) -> the imports that make the edge``, without a unit's own imports."""
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in imports:
        a, b = unit(imp.source), unit(imp.module)
        if a != b:
            edges.setdefault((a, b), []).append(imp)
    return edges


def not_allowed(edges: Mapping[tuple[str, str], list[Import]], allowed: Mapping[str, frozenset[str]]) -> list[str]:
    """One line per edge outside ``allowed`` (unit -> the units it may import), naming the imports that make it."""
    return [f"{a} -> {b}: " + ", ".join(f"{i.source} imports {i.module}" for i in imports)
            for (a, b), imports in sorted(edges.items()) if b not in allowed.get(a, frozenset())]


def circle(edges: Iterable[tuple[str, str]]) -> list[str] | None:
    """A path of units that comes back to its start, or None when the graph has no circle."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, path + [node])
            if found is not None:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found is not None:
            return found
    return None


def oversized(roots: Iterable[str], max_lines: int) -> dict[str, int]:
    """Modules under ``roots`` longer than ``max_lines`` (split before they pass it)."""
    sizes = {str(p.relative_to(REPO)): len(p.read_text().splitlines())
             for root in roots for p in (REPO / root).rglob("*.py")}
    return {p: n for p, n in sizes.items() if n > max_lines}


def _module_path(module: str) -> Path | None:
    """The source file of a dotted project module (``a/b.py`` or ``a/b/__init__.py``), None when there is none."""
    base = REPO / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _direct_modules(path: Path, prefix: str, *, at_import: bool) -> set[str]:
    """The project modules ``path`` imports whose names start with ``prefix``, ``from p import m`` counting the
    submodule ``p.m`` when it is one. ``at_import``: only what importing ``path`` runs (module and class bodies;
    not function bodies, nor ``if TYPE_CHECKING:`` blocks)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if at_import and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if at_import and isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                                "typing.TYPE_CHECKING"):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if _module_path(f"{node.module}.{alias.name}") is not None)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in found if m == prefix or m.startswith(prefix + ".")}


def reachable(module: str, prefix: str, *, at_import: bool) -> set[str]:
    """Every project module under ``prefix`` that ``module`` reaches through imports, itself included (a package
    counts as reached with its ``__init__``). ``at_import``: only the imports importing ``module`` runs, so the
    result is what ``import module`` loads; otherwise the lazy ones inside functions count too."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_path(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        parts = name.split(".")
        parents = (".".join(parts[:i]) for i in range(1, len(parts)))  # importing a.b.c runs a and a.b
        todo.extend(p for p in parents if p == prefix or p.startswith(prefix + "."))
        todo.extend(_direct_modules(path, prefix, at_import=at_import))
    return seen
