"""Failure hooks for the custom-policy tests; imported by the sink's commit on the driver's Python
worker, so they must be importable there (the conftest puts the project root on PYTHONPATH).
State goes through files because the hook runs in another process than the test."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from connectors.replication.records import FailedMessage


def _record(failures: list[FailedMessage]) -> None:
    path = os.environ.get("RMQ_TEST_HOOK_LOG")
    if path:
        with Path(path).open("a", encoding="utf-8") as fh:
            for f in failures:
                fh.write(json.dumps({"topic": f.topic, "offset": f.queue_offset, "error": f.error}) + "\n")


def dismiss_all(failures: list[FailedMessage]) -> bool:
    _record(failures)
    return True


def fail_batch(failures: list[FailedMessage]) -> bool:
    _record(failures)
    return False


def hold_first_call(failures: list[FailedMessage]) -> bool:
    """Fault injection for a driver kill between a batch's send and its commit: the first call (the writer's
    driver-side ``commit``, after every task sent its messages, before the Delta commit) writes the file
    named by ``RMQ_TEST_HOLD_MARKER`` and holds until the test SIGKILLs the driver; later calls (the
    restarted driver's re-run of that batch) dismiss, so the re-run commits."""
    _record(failures)
    marker = Path(os.environ["RMQ_TEST_HOLD_MARKER"])
    if marker.exists():
        return True
    marker.write_text(json.dumps([{"topic": f.topic, "offset": f.queue_offset} for f in failures]))
    time.sleep(600)
    return False
