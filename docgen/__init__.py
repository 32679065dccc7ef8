"""The documentation's generated parts (``docs/``), each written from the code that owns it, never twice.

``python -m docgen`` rewrites them; ``python -m docgen --check`` exits 1 naming each stale page, and
``tests/unit/test_docs_generated.py`` fails while a committed page differs from what the code generates.
The generated blocks are committed rather than made at build time so that the pages read the same on the
site, in a checkout and in a diff, and ``mkdocs build`` needs nothing of the project (no pyspark import).
"""
