"""`python -m jobs.demo --forever`'s load phase: it runs past the bounded length and Ctrl-C ends it, then the demo
goes on to its summary. Tested on ``jobs.demo.run_load`` with the producer and consumer ``run_demo`` builds for
``--forever``, against a real one-broker cluster, a short lag-table period and a real SIGINT to this process:
seconds, in the integration tier. The whole demo (clusters, ``jobs/run_all.py`` on Spark, the summary, exit 0)
runs once in tests/spark/test_demo.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from broker_store.client import Admin
from jobs.demo import TOPIC, LoadProducer, PartialConsumer, run_load
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration

RATE = 200.0
SECONDS = 1.0
"""The demo's ``--seconds``: what a bounded run would produce for (``RATE * SECONDS`` messages)."""


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalCluster(tmp_path_factory.mktemp("demo"), "demo", brokers=1) as cluster:
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic(TOPIC, 2)
            admin.wait_for_route(TOPIC)
        yield cluster.namesrv_addr


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread, as in a terminal (whatever pytest installed)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _load(namesrv: str, *, forever: bool) -> tuple[LoadProducer, PartialConsumer]:
    """What ``run_demo`` builds for the load phase."""
    return (LoadProducer(namesrv, RATE, None if forever else int(RATE * SECONDS)),
            PartialConsumer(namesrv, SECONDS / 2, int(RATE * SECONDS / 2)))


def test_bounded_load_ends_by_itself(namesrv: str, ctrl_c: None) -> None:
    producer, consumer = _load(namesrv, forever=False)
    started = time.monotonic()
    assert run_load(producer, consumer, lambda: None, every=0.2) is False
    assert len(producer.sent) == RATE * SECONDS and time.monotonic() - started < 10 * SECONDS


def test_forever_runs_past_the_bounded_length_until_ctrl_c(namesrv: str, ctrl_c: None,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    producer, consumer = _load(namesrv, forever=True)
    tables: list[float] = []
    interrupt_after = 4 * SECONDS
    timer = threading.Timer(interrupt_after, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        interrupted = run_load(producer, consumer, lambda: tables.append(time.monotonic() - started), every=0.2)
    finally:
        timer.cancel()
    elapsed = time.monotonic() - started
    assert interrupted and elapsed >= interrupt_after
    assert "Ctrl-C: stopping the load, then the summary" in capsys.readouterr().out
    # still producing and showing the lag table after the bounded length, and both threads stopped cleanly
    assert len(producer.sent) > 2 * RATE * SECONDS, len(producer.sent)
    assert tables and tables[-1] > 2 * SECONDS, tables
    assert not producer.is_alive() and not consumer.is_alive()
    assert producer.error is None and consumer.error is None and consumer.read
    # the stop is prompt: the summary starts right after Ctrl-C, not after another bounded length
    assert elapsed < interrupt_after + 3, elapsed

