"""Hooks for every tier: a failed test's report ends with the logs of the broker and name server
processes it used (tests/support/processes.py keeps them in the test's tmp dir); the run ends with the time spent
per tier and in the slowest files (setup, call and teardown: a module's shared clusters count in its first test),
where the suite's time goes."""

from __future__ import annotations

from collections import defaultdict
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


_SECONDS_BY_FILE: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SECONDS_BY_FILE[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SECONDS_BY_FILE:
        return
    tiers: defaultdict[str, float] = defaultdict(float)
    for path, seconds in _SECONDS_BY_FILE.items():
        tiers["/".join(path.split("/")[:2])] += seconds
    terminalreporter.section("time per tier and in the slowest files")
    terminalreporter.write_line(", ".join(f"{tier} {seconds:.0f} s" for tier, seconds in _slowest(tiers)))
    for path, seconds in _slowest(_SECONDS_BY_FILE)[:15]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")


def _slowest(seconds: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])
