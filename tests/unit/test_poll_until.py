"""launcher.poll_until, the one polling loop of the process harnesses (launcher, tests/support)."""

from __future__ import annotations

import pytest

from broker_store.deploy.launcher import poll_until


def test_returns_once_the_predicate_holds() -> None:
    calls = iter([False, False, True])
    seen: list[bool] = []

    def predicate() -> bool:
        seen.append(next(calls))
        return seen[-1]

    poll_until(predicate, 5.0, "third call", interval=0.001)
    assert seen == [False, False, True]


def test_timeout_names_what_with_the_last_state_seen() -> None:
    polls = 0

    def never() -> bool:
        nonlocal polls
        polls += 1
        return False

    with pytest.raises(TimeoutError) as raised:
        poll_until(never, 0.02, lambda: f"2 replicas (last seen: {polls} polls)", interval=0.001)
    assert str(raised.value) == f"timed out after 0.02s waiting for 2 replicas (last seen: {polls} polls)"
    assert polls >= 2


def test_the_predicate_runs_at_least_once() -> None:
    poll_until(lambda: True, 0.0, "nothing")


def test_a_fixed_description() -> None:
    with pytest.raises(TimeoutError, match="^timed out after 0.01s waiting for the broker$"):
        poll_until(lambda: False, 0.01, "the broker", interval=0.001)
