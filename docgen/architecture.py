"""The layering of ``docs/architecture.md``, rendered from the rules the layout tests enforce
(``tests/unit/test_broker_store_layout.py``: ``LAYERS``, ``ALLOWED``, ``HA_STORE_API``, ``CLIENT_ACL_API``;
``tests/unit/test_connectors_layout.py``: ``PACKAGES``, ``ALLOWED``, ``BROKER_STORE_API``), so the page and the
guard are one source of truth: a rule changed in a test changes the page, and the page cannot claim a rule the
tests do not hold."""

from __future__ import annotations

from pathlib import Path

from tests.unit import test_broker_store_layout as broker_layout
from tests.unit import test_connectors_layout as connectors_layout

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _names(units: frozenset[str] | set[str]) -> str:
    return ", ".join(f"`{u}`" for u in sorted(units)) or "nothing of the project"


def broker_store_layers() -> str:
    """``broker_store``'s units, top layer first, each with the units it may import."""
    lines = ["| layer | unit | may import |", "|---|---|---|"]
    for number, units in reversed(list(enumerate(broker_layout.LAYERS))):
        for unit in sorted(units):
            lines.append(f"| {number} | `{unit}` | {_names(broker_layout.ALLOWED[unit])} |")
    store_api = _names(set(broker_layout.HA_STORE_API))
    client_acl = _names(set(broker_layout.CLIENT_ACL_API))
    return "\n".join([*lines, "", f"Of the store, `ha` may import only {store_api}; of `acl`, `client` may import "
                      f"only {client_acl}. No module passes {broker_layout.MAX_LINES} lines."])


def connector_layers() -> str:
    """The connector packages' allowed imports."""
    edges = sorted(connectors_layout.ALLOWED)
    packages = [p for p in connectors_layout.PACKAGES if p != "core"]
    lines = [f"- `core` imports no connector package; {_names(set(packages))} each import `core`.",
             *(f"- `{a}` may import `{b}`." for a, b in edges),
             "- No other import between connector packages, and no import circle.",
             f"- Of `broker_store`, the connectors import only {_names(set(connectors_layout.BROKER_STORE_API))}.",
             f"- No module of `connectors` or `jobs` passes {connectors_layout.MAX_LINES} lines."]
    return "\n".join(lines)
