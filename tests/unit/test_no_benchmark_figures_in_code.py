"""Benchmark figures live in benchmarks/MEASUREMENTS.md and docs/benchmarks.md, not in the code: a figure quoted
in a docstring or comment goes stale while the reason it supports stays true, so the code keeps the reason and
points there. The scan looks for the shapes such figures took (a measured value, a per-call cost in microseconds,
a speed-up factor); sizes, defaults and timeouts are contracts, not measurements, and are not matched."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker_store", "connectors", "jobs")
FIGURE = re.compile(r"measured\s*~|\(measured\b|~\s?\d[\d.]*\s?(?:us|µs)\b|\b\d+\.\d+x\b")
"""``measured ~180 MB/s``, ``(measured ~1.7x)``, ``~5 us``, ``1.7x``."""


def figures(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if FIGURE.search(line)]


def test_the_pattern_finds_the_figures_that_were_in_the_code() -> None:
    for quoted in ("# one join of the pieces beats slice-assigning into a bytearray (measured ~1.7x)",
                   "# not setdefault: a new id costs ~5 us, most re-sends carry one",
                   "parsing the fields (~1 us of ~2.5). Read-only by", "~1.5 s at the measured ~180 MB/s."):
        assert figures(quoted) == [quoted]
    assert figures("backing off 50 ms to 400 ms; 256 MiB; RocketMQ's ms * 1000 us; 10.5 s") == []


def test_no_production_module_quotes_a_benchmark_figure() -> None:
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    found = {str(path.relative_to(ROOT)): hits for path in paths if (hits := figures(path.read_text(encoding="utf-8")))}
    assert found == {}, "move the figures to benchmarks/MEASUREMENTS.md and keep the reason in the code"
