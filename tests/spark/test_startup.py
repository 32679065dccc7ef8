"""Start-up helpers of the replicate job on the shared session: the Python worker warm-up runs to completion
(``connectors.replication.warmup``) and leaves the session usable."""

from __future__ import annotations

import logging

import pytest
from pyspark.sql import SparkSession

from connectors.replication.warmup import join_worker_warmup, start_worker_warmup


def test_worker_warmup_completes(spark: SparkSession, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="connectors.replication.warmup"):
        threads = start_worker_warmup(spark)
        join_worker_warmup(threads)
    assert not any(t.is_alive() for t in threads)
    messages = [r.getMessage() for r in caplog.records if r.name == "connectors.replication.warmup"]
    assert messages == ["Python workers warmed up (tasks)"], messages
    assert spark.range(1).collect()[0].id == 0
