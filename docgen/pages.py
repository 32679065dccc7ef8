"""Which generated block goes into which page, and the rewrite of a page's blocks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from connectors.replication import options_doc
from docgen import architecture, config_reference
from docgen.blocks import with_block

GENERATED: dict[Path, dict[str, Callable[[], str]]] = {
    config_reference.PAGE: config_reference.BLOCKS,
    architecture.PAGE: {
        "broker_store layers": architecture.broker_store_layers,
        "connector layers": architecture.connector_layers,
    },
}
"""page -> its generated blocks by name. The option tables of ``configuration.md`` are
``connectors.replication.options_doc``'s (its own markers)."""


def generated_page(path: Path) -> str:
    """The page at ``path`` as the code generates it (its prose as committed)."""
    text = path.read_text()
    for name, block in GENERATED[path].items():
        text = with_block(text, name, block())
    if path == options_doc.PAGE:
        text = options_doc.with_generated_block(text)
    return text


def stale_pages() -> list[Path]:
    return [path for path in GENERATED if generated_page(path) != path.read_text()]


def write_pages() -> list[Path]:
    written = []
    for path in GENERATED:
        text = generated_page(path)
        if text != path.read_text():
            path.write_text(text)
            written.append(path)
    return written
