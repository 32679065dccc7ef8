"""Polling for a condition in tests that drive real processes (whose progress no test clock controls)."""

from __future__ import annotations

from collections.abc import Callable

from broker_store.deploy.launcher import poll_until


def eventually(check: Callable[[], bool], timeout: float = 20.0, what: str | Callable[[], str] = "condition",
               interval: float = 0.05) -> None:
    """Poll ``check`` every ``interval`` s until it returns True; AssertionError naming ``what`` after ``timeout`` s
    (a callable ``what`` is called then, so the message can carry the last state seen, e.g. the containers' logs)."""
    try:
        poll_until(check, timeout, what, interval)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None
