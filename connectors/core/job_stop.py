"""Whether the job running a query is stopping: the one rule for the level of a sink's "batch aborted" line.

A job stops its queries on SIGTERM / SIGINT, or when one of them failed (``jobs.query_supervisor.supervise``).
Spark then cancels a running micro-batch and calls the sink's ``abort`` in a Python worker. Such an abort is
the stop's own doing, expected at every stop that catches a batch in flight: it is logged at INFO, so a clean
stop prints no warning; an abort while the job runs on is a fault and stays a WARNING (``abort_level``).
Sinks call ``abort_level()`` in their ``abort``; nothing else decides it.

The abort runs in a Python worker of Spark's, not in the job's process, so the job's "stopping" state is a
file: ``prepare_stop_marker`` (the job, before Spark starts) names a file in a fresh directory of its own
in the environment (``STOP_MARKER_ENV``), which the JVM and every Python worker it starts inherit;
``mark_stopping`` creates the file just before the queries are stopped; ``remove_stop_marker`` removes the
directory when the job ends. Without the variable (a user's own query, tests) nothing is ever stopping.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

STOP_MARKER_ENV = "ROCKETMQ_REPLICATOR_STOP_MARKER"
"""Path of the job's stop marker file (absent until the job stops its queries)."""
STOP_MARKER = "stopping"
"""The marker's file name inside the job's own directory."""


def prepare_stop_marker() -> Path:
    """Job, before Spark starts: a fresh directory for the marker, its path exported in ``STOP_MARKER_ENV``."""
    marker = Path(tempfile.mkdtemp(prefix="rmq-replicator-job-")) / STOP_MARKER
    os.environ[STOP_MARKER_ENV] = str(marker)
    return marker


def mark_stopping() -> None:
    """Job: its queries are about to be stopped (no-op without a prepared marker)."""
    marker = os.environ.get(STOP_MARKER_ENV)
    if marker:
        Path(marker).touch()


def stopping() -> bool:
    """Any process of the job: has the job started stopping its queries?"""
    marker = os.environ.get(STOP_MARKER_ENV)
    return marker is not None and marker != "" and Path(marker).exists()


def abort_level() -> int:
    """The level of a sink's "batch aborted" line: INFO when the job's stop caused it, WARNING otherwise."""
    return logging.INFO if stopping() else logging.WARNING


def remove_stop_marker() -> None:
    """Job, at its end: remove the marker's directory and forget it."""
    marker = os.environ.pop(STOP_MARKER_ENV, None)
    if marker:
        shutil.rmtree(Path(marker).parent, ignore_errors=True)
