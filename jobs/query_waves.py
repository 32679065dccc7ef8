"""A job's queries started in waves: ``jobs/run_all.py`` starts the replication queries first and the heartbeat,
checkpoint and config-sync queries once every replication query has ended its first trigger (or after
``FIRST_WAVE_MAX_S``).

Why: every query Spark starts launches its own Python processes (the source's runner, the read and write planners,
the sink's commit runner, the tasks' workers), each importing pyspark. Started together, a job's four queries per
link put a dozen such start-ups on the machine at once, and each query's first trigger waits for all of them: on two
cores under load the replication query's first batch after a restart ended 17 s after its start
(``benchmarks/soak.py``, 2026-11-29). Replication is what a restart must bring back first (a restart's recovery time
ends at the first replicated message); the other connectors only observe and translate what it did, and lose nothing
by starting seconds later (the heartbeat's lag reads "starting" meanwhile, the checkpoint and config-sync rounds
catch up on their first trigger). ``benchmarks/replicator.py --restart-only --restart-job run_all.py`` has the
numbers (benchmarks/MEASUREMENTS.md).

The wait is bounded: a replication query held in its first batch (a source outage it waits out) does not hold the
others past ``FIRST_WAVE_MAX_S``; one that failed or stopped ends the wait at once (``supervise`` deals with it).
A stop (SIGTERM) ends the wait too, and nothing more is started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from broker_store.clock import SYSTEM_CLOCK, ThreadClock

FIRST_WAVE_MAX_S = 15.0
"""The longest the later queries wait for the first wave's first triggers."""

WAVE_POLL_S = 0.2


def first_trigger_ended(query: Any) -> bool:
    """True once ``query`` (a pyspark ``StreamingQuery``) ended a trigger, or is not running any more."""
    return not query.isActive or query.lastProgress is not None


def await_first_triggers(queries: Sequence[Any], stop: threading.Event, *, max_s: float = FIRST_WAVE_MAX_S,
                         ended: Callable[[Any], bool] = first_trigger_ended,
                         clock: ThreadClock = SYSTEM_CLOCK) -> bool:
    """Wait until every one of ``queries`` ended its first trigger (``ended``), ``max_s`` passed or ``stop`` is
    set; False only for the stop (start nothing more then)."""
    deadline = clock.monotonic() + max_s
    while not stop.is_set():
        if clock.monotonic() >= deadline or all(ended(q) for q in queries):
            return True
        clock.block(WAVE_POLL_S)
    return False
