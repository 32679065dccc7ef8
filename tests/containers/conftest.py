"""The container tier (docs/testing.md, "The container tier"): runs only where a Docker daemon answers; elsewhere every
test of it is skipped with the daemon's own error as the reason, printed in the header and in the summary, never
silently.

``make test-containers`` runs it by hand (``pytest -m containers tests/containers``); ``make test`` does not
collect it (``testpaths``). Tests here carry the ``containers`` marker (set for every test of this directory).
"""

from __future__ import annotations

import functools
import os
import sys

import pytest

from tests.support.docker_daemon import docker_unavailable_reason

# testcontainers' reaper (ryuk) image cannot be pulled here: the tests remove their containers themselves.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


@functools.cache
def _skip_reason() -> str | None:
    return docker_unavailable_reason()


def pytest_report_header(config: pytest.Config) -> str:
    reason = _skip_reason()
    return "containers tier: a docker daemon answers" if reason is None else f"containers tier SKIPPED: {reason}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    mine = [item for item in items if str(item.path).startswith(here + os.sep)]
    for item in mine:
        item.add_marker(pytest.mark.containers)
    reason = _skip_reason()
    if reason is not None:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"containers tier: {reason}"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reason = _skip_reason()
    if reason is not None:
        terminalreporter.write_line(f"containers tier SKIPPED (no docker daemon): {reason}", yellow=True)


@pytest.fixture(scope="session")
def tier_image() -> str:
    """The tier's image of this checkout (``python -m broker_store image build``): reused when the daemon holds
    its tag, built otherwise (minutes when the Debian base is missing too)."""
    from broker_store.deploy.image import build_image
    from tests.support.containers import remove_leftovers

    gone = remove_leftovers()
    if gone:
        print(f"containers tier: removed {len(gone)} stopped container(s) of an earlier run: {' '.join(gone)}",
              file=sys.stderr)
    result = build_image(log=lambda line: print(line, file=sys.stderr))
    return result.tag
