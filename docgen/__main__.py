"""``python -m docgen [--check]``: rewrite the generated blocks of ``docs/`` from the code (or, with
``--check``, exit 1 naming each page whose committed blocks are stale)."""

from __future__ import annotations

import argparse
import sys

from docgen.pages import stale_pages, write_pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    check: bool = parser.parse_args(argv).check
    if check:
        stale = stale_pages()
        for page in stale:
            print(f"{page}: stale generated block(s); run python -m docgen", file=sys.stderr)
        return 1 if stale else 0
    for page in write_pages():
        print(f"{page}: written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
