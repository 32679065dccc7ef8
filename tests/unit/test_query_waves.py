"""``jobs.query_waves``: the later queries of a job start once the first wave's queries ended their first trigger,
after ``FIRST_WAVE_MAX_S`` at the latest, at once when one of them stopped, never after the job's stop."""

from __future__ import annotations

import threading
from typing import Any

from jobs.query_waves import FIRST_WAVE_MAX_S, WAVE_POLL_S, await_first_triggers, first_trigger_ended
from jobs.run_all import query_starters
from tests.support.clocks import MillisClock


class _Query:
    """A running query whose first trigger ends at ``progress_at_ms`` of ``clock`` (None: never)."""

    def __init__(self, clock: MillisClock, progress_at_ms: int | None) -> None:
        self.clock, self.progress_at_ms = clock, progress_at_ms
        self.isActive = True

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        done = self.progress_at_ms is not None and self.clock.now_ms >= self.progress_at_ms
        return {"batchId": 0} if done else None


def test_a_query_ended_its_first_trigger_once_it_reported_progress_or_stopped() -> None:
    clock = MillisClock(0)
    assert not first_trigger_ended(_Query(clock, None))
    assert first_trigger_ended(_Query(clock, 0))
    stopped = _Query(clock, None)
    stopped.isActive = False
    assert first_trigger_ended(stopped)


def test_the_wait_ends_when_the_last_first_trigger_ended() -> None:
    clock = MillisClock(0)
    queries = [_Query(clock, 1_000), _Query(clock, 4_000)]
    assert await_first_triggers(queries, threading.Event(), clock=clock)
    assert 4_000 <= clock.now_ms < 4_000 + WAVE_POLL_S * 1000 + 1


def test_nothing_to_wait_for_starts_the_next_wave_at_once() -> None:
    clock = MillisClock(0)
    assert await_first_triggers([_Query(clock, 0)], threading.Event(), clock=clock)
    assert await_first_triggers([], threading.Event(), clock=clock)
    assert clock.now_ms == 0


def test_a_query_held_in_its_first_batch_holds_the_next_wave_for_the_bound_only() -> None:
    clock = MillisClock(0)
    assert await_first_triggers([_Query(clock, 0), _Query(clock, None)], threading.Event(), clock=clock)
    assert clock.now_ms == round(FIRST_WAVE_MAX_S * 1000)


class _HookedClock(MillisClock):
    """A MillisClock that calls ``hook(now_ms)`` after each ``block``: what happens while the job waits."""

    def __init__(self, hook: Any) -> None:
        super().__init__(0)
        self.hook = hook

    def block(self, seconds: float) -> None:
        super().block(seconds)
        self.hook(self.now_ms)


def test_a_failed_query_ends_the_wait_for_the_supervisor_to_handle() -> None:
    def fail_at_2s(now_ms: int) -> None:
        if now_ms >= 2_000:
            failed.isActive = False

    clock = _HookedClock(fail_at_2s)
    failed = _Query(clock, None)
    assert await_first_triggers([failed], threading.Event(), clock=clock)
    assert clock.now_ms == 2_000


def test_a_stop_ends_the_wait_and_nothing_more_starts() -> None:
    stop = threading.Event()
    clock = _HookedClock(lambda now_ms: stop.set() if now_ms >= 1_000 else None)
    assert not await_first_triggers([_Query(clock, None)], stop, clock=clock)
    assert clock.now_ms == 1_000


def test_run_all_starts_replication_first_and_the_observing_connectors_after(tmp_path: Any) -> None:
    from connectors.core.config import load_replicator_config

    config_path = tmp_path / "replicator.yaml"
    config_path.write_text(f"""version: 1
clusters:
  - {{name: a, namesrv: ["127.0.0.1:1"]}}
  - {{name: b, namesrv: ["127.0.0.1:2"]}}
links:
  - {{name: l1, source: a, target: b, topics: {{explicit: [{{source: T}}]}},
      checkpoint_location: {tmp_path / 'cp'}, delta_location: {tmp_path / 'delta'}}}
""")
    config = load_replicator_config(config_path)
    first, later = query_starters(str(config_path), config, ["l1"])
    assert len(first) == 1 and len(later) == 3  # replication; config sync, heartbeat, checkpoints
    first, later = query_starters(str(config_path), config, ["l1"], available_now=True)
    assert len(first) == 1 and later == []
