"""Reproducible performance runs, each a script (``.venv/bin/python benchmarks/<name>.py``). A package so that
mypy checks them and the tests and sibling benchmarks import them as ``benchmarks.<name>``."""
