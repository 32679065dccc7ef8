"""Hooks for every tier: a failed test's report ends with the logs of the broker and name server
processes it used (tests/support/processes.py keeps them in the test's tmp dir)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import c_extensions
from tests.support.processes import failure_logs, forget_closed_clusters


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under CI both C extensions must be built from their current sources (tests/support/c_extensions.py)."""
    if c_extensions.under_ci() and (problems := c_extensions.problems()):
        pytest.exit("CI refuses to run without both C extensions built: " + "; ".join(problems), returncode=3)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    forget_closed_clusters()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        logs = failure_logs()
        if logs:
            report.sections.append(("name server and broker logs", logs))
