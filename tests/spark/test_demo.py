"""`python -m jobs.demo --forever` whole, as a user runs it (docs/getting-started.md, "The demo"): the local
clusters (conf/cluster-local.yaml's layout on free ports, so it can run beside other tests), ``jobs/run_all.py``
on local Spark, the load past the bounded length, Ctrl-C (SIGINT to the demo alone, as a terminal's Ctrl-C
reaches it: its children run in sessions of their own), the summary and exit 0. The load phase alone is tested
quickly in tests/integration/test_demo_forever.py."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.spark.conftest import PROJECT_ROOT
from tests.spark.spark_processes import TaggedProcess, spark_env, wait_for
from tests.support.processes import broker_listen_port, free_port

pytestmark = pytest.mark.integration

SECONDS = 3.0
"""``--seconds``: the length a bounded run would produce for."""


def _clusters_on_free_ports(work: Path) -> Path:
    config = yaml.safe_load((PROJECT_ROOT / "conf" / "cluster-local.yaml").read_text())
    for cluster in config["clusters"]:
        cluster["namesrv"]["listen"] = f"127.0.0.1:{free_port()}"
        for broker in cluster["brokers"]:
            broker["listen"] = f"127.0.0.1:{broker_listen_port(broker.get('fast_listen_enable', True))}"
            broker["store_dir"] = str(work / broker["store_dir"])
    path = work / "cluster-local.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_forever_runs_until_ctrl_c_then_prints_the_summary_and_exits_0(tmp_path: Path) -> None:
    demo = TaggedProcess([sys.executable, "-m", "jobs.demo", "--config", str(_clusters_on_free_ports(tmp_path)),
                          "--forever", "--seconds", str(SECONDS)], tmp_path / "demo.log", spark_env())
    try:
        wait_for(lambda: "\nproducing " in demo.log(), 240, "the demo's load", interval=0.5, alive=demo)
        producing = time.monotonic()
        # past the bounded length: still producing (a bounded load would have printed its "produced" count
        # when it ended), still showing the lag table. Two tables (one every 4 s) are past it; polled for, not
        # slept: a fixed 14 s wait made the test ~6 s longer.
        wait_for(lambda: demo.log().count("replication lag") >= 2, 60, "two lag tables", interval=0.5, alive=demo)
        so_far = demo.log()
        assert time.monotonic() - producing > 2 * SECONDS
        assert demo.alive() and "\nproduced " not in so_far and "Ctrl-C: stopping" not in so_far \
            and "summary:" not in so_far, so_far[-3000:]
        tables = so_far.count("replication lag")
        interrupted = time.monotonic()
        demo.proc.send_signal(signal.SIGINT)
        rc = demo.wait(240)
    finally:
        demo.kill()
    out = demo.log()
    print(out[-4000:])
    assert rc == 0, out[-4000:]
    assert tables >= 2 and "Ctrl-C: stopping the load, then the summary" in out
    produced = int(out.split("\nproduced ", 1)[1].split()[0])
    assert produced > 200 * SECONDS, produced  # the default rate for longer than the bounded length
    assert "summary:" in out and "demo check failed" not in out
    # Spark's start-up notices go to the job's logs/spark-console.log, not into the demo's output,
    # and a clean stop prints nothing alarming (no ERROR line, no traceback).
    assert "Setting default log level" not in out and "Using incubator modules" not in out, out[:3000]
    alarming = [line for line in out.splitlines() if " ERROR " in f" {line} " or "Traceback" in line]
    assert not alarming, "\n".join(alarming)
    assert "stopped the main job (exit 0)" in out and "stopped the local clusters (exit 0)" in out
    assert "Traceback" not in out
    print(f"SIGINT to exit 0: {time.monotonic() - interrupted:.0f} s")


def test_failover_kills_the_source_primary_once_and_reports_the_election_and_nothing_missing(tmp_path: Path) -> None:
    """`make demo DEMO_ARGS=--failover`, bounded and short: the controller-mode source's primary is killed under
    the load; the summary's failover line gives the election time and 0 missing, and every other check holds."""
    demo = TaggedProcess([sys.executable, "-m", "jobs.demo", "--config", str(_clusters_on_free_ports(tmp_path)),
                          "--failover", "--seconds", "10"], tmp_path / "demo.log", spark_env())
    try:
        rc = demo.wait(240)
    finally:
        demo.kill()
    out = demo.log()
    print(out[-3000:])
    assert rc == 0, out[-4000:]
    assert "source cluster up in controller mode" in out and "failover: killed the source primary" in out
    line = next(line for line in out.splitlines() if line.startswith("  failover: election "))
    election = float(line.split()[2])
    assert 0 < election < 10 and ", 0 missing (" in line, line
    assert "demo check failed" not in out and "Traceback" not in out
    assert "stopped the local clusters (exit 0)" in out  # the controller-mode source is one of up's clusters


def test_dr_switches_over_and_fails_back_with_the_runbook_commands_and_every_check_holds(tmp_path: Path) -> None:
    """`make demo DEMO_ARGS=--dr`, short: ``jobs.dr status``, ``switchover`` and ``failback`` run as the operator
    runs them while the application produces and consumes; the commands' reports per queue and group, then the
    checks by key (nothing lost, missed or read twice; the standby holds each message once) and exit 0."""
    demo = TaggedProcess([sys.executable, "-m", "jobs.demo", "--config", str(_clusters_on_free_ports(tmp_path)),
                          "--dr", "--seconds", "9"], tmp_path / "demo.log", spark_env())
    try:
        rc = demo.wait(420)
    finally:
        demo.kill()
    out = demo.log()
    print(out)
    assert rc == 0, out[-4000:]
    for command in ("status", "switchover", "failback"):
        assert f"$ python -m jobs.dr {command} --link source-to-target --config " in out
    assert "switchover " in out and "of link source-to-target: done" in out and "failback " in out
    assert "running: python jobs/replicate.py" in out and "--link target-to-source" in out  # warm, held
    assert "switchover --link source-to-target --config " in out and "--reverse target-to-source" in out
    # the commands' reports: per queue nothing missing, per group the offsets (exact on the way back)
    assert "DEMO_GROUP   Orders/source-a/0" in out and "forward link resume check" in out
    line = next(line for line in out.splitlines() if line.startswith("  by key: "))
    assert line.startswith("  by key: 0 lost (") and ", 0 missed (" in line and line.endswith(", 0 read twice"), line
    application = next(line for line in out.splitlines() if line.startswith("  application: "))
    assert "(start on source, switchover on target, failback on source)" in application, application
    assert "dr demo: every check holds" in out and "demo check failed" not in out and "Traceback" not in out
    assert "stopped the replication jobs (exit 0, 0)" in out and "stopped the local clusters (exit 0)" in out
