"""The documentation site's pages (``docs/``, built by ``make docs`` with ``mkdocs build --strict``): the blocks
generated from the code (the configuration reference from the settings models, the architecture's layering from
the layout tests' rules) are the ones committed, every page is in ``mkdocs.yml``'s nav, and no prose line of the
README or a page runs past 200 characters (tables, fenced blocks and generated blocks aside)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from docgen.blocks import begin_marker, end_marker, with_block
from docgen.pages import GENERATED, generated_page
from tests.support.readme_commands import DOCS, ROOT, documented_files

LONGEST_LINE = 200


@pytest.mark.parametrize("page", sorted(GENERATED), ids=lambda p: p.name)
def test_the_committed_generated_blocks_are_what_the_code_generates(page: Path) -> None:
    assert generated_page(page) == page.read_text(), (
        f"{page.relative_to(ROOT)}: a generated block differs from the code it comes from: run python -m docgen")


def test_a_block_is_replaced_between_its_markers_and_refused_without_them() -> None:
    page = f"intro\n{begin_marker('b')}\nold\n{end_marker('b')}\nrest\n"
    assert with_block(page, "b", "new") == f"intro\n{begin_marker('b')}\n\nnew\n\n{end_marker('b')}\nrest\n"
    with pytest.raises(ValueError, match="'c'"):
        with_block(page, "c", "new")


def test_the_architecture_page_shows_every_layout_rule() -> None:
    from tests.unit import test_broker_store_layout as layout

    text = (DOCS / "architecture.md").read_text()
    for unit in layout.ALLOWED:
        assert f"| `{unit}` |" in text, unit


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, dict):
            return [p for value in nav.values() for p in pages(value)]
        assert isinstance(nav, list)
        return [p for item in nav for p in pages(item)]

    assert sorted(pages(config["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))


@pytest.mark.parametrize("path", documented_files(), ids=lambda p: p.name)
def test_no_prose_line_is_longer_than_the_limit(path: Path) -> None:
    long_lines, generated, fenced = [], False, False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        generated = (generated or line.startswith("<!-- generated")) and not line.startswith("<!-- end of")
        fenced = fenced != line.startswith("```")  # a fence's lines (output, commands) stay as printed
        if len(line) > LONGEST_LINE and not (generated or fenced) and not re.match(r"\s*\|", line):
            long_lines.append(number)
    assert long_lines == [], f"{path.relative_to(ROOT)}: lines over {LONGEST_LINE} characters: wrap them"


CITATION = re.compile(r'docs/([\w-]+\.md),\s+"([^"]+)"')
"""``docs/operations.md, "Damaged files and a full disk"``: how code, tests and benchmarks cite the manual."""


def sections(page: Path) -> list[str]:
    """A page's headings and the lead words of its bold-led paragraphs (``**Failover (...).**``), backticks removed."""
    text = page.read_text()
    found = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    found += re.findall(r"^\*\*(.+?)\*\*", text, flags=re.M)
    return [s.replace("`", "") for s in found]


def test_every_citation_of_the_docs_names_a_page_and_a_section_it_has() -> None:
    cited = 0
    sources = [p for d in ("broker_store", "connectors", "jobs", "tests", "benchmarks", "docgen")
               for p in sorted((ROOT / d).rglob("*.py"))]
    for source in sources:
        for page, section in CITATION.findall(source.read_text()):
            cited += 1
            section = " ".join(section.split())
            where = f"{source.relative_to(ROOT)} cites docs/{page}, {section!r}"
            assert (DOCS / page).is_file(), f"{where}: no such page"
            assert any(s.startswith(section) for s in sections(DOCS / page)), f"{where}: no such section"
    assert cited >= 20
