"""Polling for a condition in tests that drive real processes (whose progress no test clock controls)."""

from __future__ import annotations

from collections.abc import Callable

from broker_store.launcher import poll_until


def eventually(check: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``check`` every 50 ms until it returns True; AssertionError naming ``what`` after ``timeout`` s."""
    try:
        poll_until(check, timeout, what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None
