"""``jobs.spark_session.choose_master``: the order a job's master is chosen in. The container tier found
``SPARK_MASTER=spark://...`` ignored (the launched JVM reads only MASTER): the job ran local[*] while its
worker container sat idle; ``build_spark`` now always passes the chosen master when it differs from the
configured one."""

from __future__ import annotations

import pytest

from jobs.spark_session import choose_master


@pytest.mark.parametrize(("given", "configured", "env", "chosen"), [
    ("local[1]", "spark://h:7077", "spark://e:7077", "local[1]"),  # the caller's word wins
    (None, "spark://h:7077", "spark://e:7077", "spark://h:7077"),  # then spark-submit / spark-defaults
    (None, None, "spark://e:7077", "spark://e:7077"),  # then SPARK_MASTER
    (None, None, None, "local[*]"),
    (None, None, "", "local[*]"),
])
def test_the_master_is_the_callers_then_the_configured_then_spark_master_then_local(
        given: str | None, configured: str | None, env: str | None, chosen: str) -> None:
    assert choose_master(given, configured, env) == chosen
