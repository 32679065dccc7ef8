"""The project's two optional C extensions, as the test tiers require them. Users may run without them (setup.py
builds them optionally; each Python module owns a pure-Python fallback giving the same result), but CI must not:
a compiler error would otherwise pass as a skipped C-versus-Python test. Under CI (``CI`` set to true, as
``.ci/run`` runs) the suite refuses to start unless both are built from their current sources
(tests/conftest.py), and a test needing one fails instead of skipping (``skip_without``).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]


class CExtension(NamedTuple):
    module: str
    """The extension's import name."""
    source: str
    """Its C source, relative to the project root."""


EXTENSIONS = (
    CExtension("connectors.replication._forward", "connectors/replication/_forward.c"),
    CExtension("broker_store.store._record_walk", "broker_store/store/_record_walk.c"),
)


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def problem(extension: CExtension) -> str | None:
    """Why ``extension`` cannot be used as built (not importable, or older than its source), else None."""
    try:
        module = importlib.import_module(extension.module)
    except ImportError as exc:
        return f"{extension.module} is not built ({exc}); build it with `make` (pip install -e .) and read its errors"
    built = Path(module.__file__ or "")
    source = ROOT / extension.source
    if built.is_file() and source.is_file() and built.stat().st_mtime < source.stat().st_mtime:
        return f"{extension.module} ({built.name}) is older than {extension.source}: rebuild it (`make`)"
    return None


def problems() -> list[str]:
    return [p for p in map(problem, EXTENSIONS) if p is not None]


def skip_without(module: str) -> None:
    """Skip the calling test when the C extension ``module`` is unusable, or fail it under CI."""
    extension = next(e for e in EXTENSIONS if e.module == module)
    why = problem(extension)
    if why is None:
        return
    if under_ci():
        pytest.fail(f"CI requires the C extensions: {why}")
    pytest.skip(why)
