"""`make demo`'s replicator config: the example conf/replicator.yaml (production defaults) with the demo's own
short intervals, its temporary dirs, its metrics port and the clusters' name servers as started; and the
command `make demo [DEMO_ARGS=...]` runs."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from benchmarks.dr_drill_tally import Read, Stint, tally
from broker_store.config import LocalClustersConfig, load_yaml
from broker_store.deploy.up import plan_up
from connectors.core.config import load_replicator_config
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.core.topic_mapping import TopicMapper
from jobs.demo import DEMO_INTERVALS, GROUP, LINK, REPLICATOR_CONFIG, TOPIC, main, named_topics, write_config
from jobs.demo_dr import REVERSE, failed_check, write_dr_config
from jobs.demo_failover import ControlledSource, controlled_clusters, election_seconds
from jobs.dr.failback import reverse_link_of


def test_the_demo_runs_the_example_config_with_its_own_short_intervals(tmp_path: Path) -> None:
    example = load_replicator_config(REPLICATOR_CONFIG)
    config = load_replicator_config(write_config(tmp_path, 4321, {"source": "127.0.0.1:1111"}))
    link, shipped = config.link(LINK), example.link(LINK)
    assert (link.trigger_interval, link.checkpoints.interval, link.config_sync.interval, config.heartbeat.interval) \
        == (DEMO_INTERVALS["trigger_interval"], DEMO_INTERVALS["checkpoints"], DEMO_INTERVALS["config_sync"],
            DEMO_INTERVALS["heartbeat"]) == (1.0, 2.0, 2.0, 1.0)
    # shorter than the example's defaults, everything else as shipped
    assert link.trigger_interval < shipped.trigger_interval and config.heartbeat.interval < example.heartbeat.interval
    assert link.topics == shipped.topics and link.checkpoints.groups == shipped.checkpoints.groups
    assert config.cluster("source").namesrv == ("127.0.0.1:1111",)
    assert config.cluster("target").namesrv == example.cluster("target").namesrv
    assert config.metrics.port == 4321
    assert Path(link.checkpoint_location).is_relative_to(tmp_path) and Path(link.delta_location) == tmp_path / "delta"
    assert Path(config.heartbeat.checkpoint_location).is_relative_to(tmp_path)


def test_the_demo_creates_every_topic_its_link_names(tmp_path: Path) -> None:
    topics = named_topics(write_config(tmp_path, 0, {}))
    assert topics == ["Orders", "OrdersEU", "OrdersUS", "Payments"] and TOPIC in topics


def _make_demo_command(*args: str) -> str:
    """The command `make demo` would run (a dry run: nothing is built or started)."""
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(["make", "-n", "-C", str(repo), "demo", *args], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return next(line for line in reversed(out.splitlines()) if "-m jobs.demo" in line).strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_passes_demo_args_to_the_demo_and_runs_it_bounded_without() -> None:
    assert _make_demo_command().endswith("-m jobs.demo --config conf/cluster-local.yaml")
    assert _make_demo_command("DEMO_ARGS=--forever").endswith(
        "-m jobs.demo --config conf/cluster-local.yaml --forever")
    assert _make_demo_command("DEMO_ARGS=--rate 500 --seconds 60").endswith(
        "--config conf/cluster-local.yaml --rate 500 --seconds 60")
    assert _make_demo_command("DEMO_ARGS=--failover").endswith(
        "-m jobs.demo --config conf/cluster-local.yaml --failover")
    assert _make_demo_command("DEMO_ARGS=--dr").endswith("-m jobs.demo --config conf/cluster-local.yaml --dr")


def test_the_election_is_timed_by_the_first_acknowledged_send_started_after_the_kill() -> None:
    """A send started before the kill may have been answered by the old primary as it died: it proves nothing."""
    acked = [(9.0, 9.1), (9.9, 10.2), (10.5, 12.0), (12.1, 12.2)]
    assert election_seconds(10.0, acked) == 2.0
    assert election_seconds(13.0, acked) is None


def test_failover_runs_the_source_cluster_in_controller_mode_under_up(tmp_path: Path) -> None:
    """`--failover` hands `up` the demo's clusters file with the source cluster rewritten (embedded controller, one
    controller-mode group of three); the members it kills are found by the names and pid files `up` gives them."""
    clusters = load_yaml(Path("conf/cluster-local.yaml"), LocalClustersConfig)
    controlled = controlled_clusters(clusters)
    written = tmp_path / "clusters.yaml"
    written.write_text(yaml.safe_dump(controlled.model_dump(mode="json", exclude_unset=True), sort_keys=False))
    again = load_yaml(written, LocalClustersConfig)
    assert [c.name for c in again.clusters] == [c.name for c in clusters.clusters]
    source = next(c for c in again.clusters if c.name == "source")
    assert source.namesrv.controller is not None
    assert [b.enable_controller_mode for b in source.brokers] == [True] * 3
    others = [c for c in again.clusters if c.name != "source"]
    assert others == [c for c in clusters.clusters if c.name != "source"]  # untouched
    plan = plan_up(again, tmp_path / "run", tmp_path / "data")
    members = ControlledSource(again, tmp_path / "run")
    assert [m.name for m in members.brokers] == ["source-a.0", "source-a.1", "source-a.2"]
    assert {m.name for m in members.brokers} <= {b.name for b in plan.brokers}
    assert members.namesrv_addr == source.namesrv.listen
    assert all(m.pid_file == tmp_path / "run" / f"{m.name}.pid" for m in members.brokers)


def test_dr_adds_the_reverse_link_the_failback_runs_over(tmp_path: Path) -> None:
    """`--dr`: the demo's config and a link target -> source of `Orders` (the one `jobs.dr failback` finds),
    replication only, selecting the demo's group for the failback."""
    config = load_replicator_config(write_dr_config(tmp_path, 0, {"source": "127.0.0.1:1111",
                                                                  "target": "127.0.0.1:2222"}))
    reverse = reverse_link_of(config, config.link(LINK))
    assert reverse.name == REVERSE and (reverse.source, reverse.target) == ("target", "source")
    assert not reverse.checkpoints.enabled and not reverse.config_sync.enabled
    assert reverse.checkpoints.groups.explicit == (GROUP,)
    assert sorted(TopicMapper(reverse.topics).explicit_topics) == [TOPIC]
    assert Path(reverse.delta_location) == tmp_path / "delta" == Path(config.link(LINK).delta_location)


def test_dr_runs_on_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--dr", "--forever"])
    assert exc.value.code == 2 and "--dr runs on its own" in capsys.readouterr().err


def test_dr_fails_on_the_first_check_that_does_not_hold_and_names_it() -> None:
    """One line naming the failed check (by key: lost, missed, read twice; then the failures tables, where only
    heartbeats sent to a fenced side are expected, and the standby's copy); None when every check holds."""
    stints = [Stint(0, "source", "start", 0.0), Stint(1, "target", "switchover", 1.0)]
    reads = [Read("k1", 0.5, 0), Read("k2", 0.6, 0), Read("k3", 1.5, 1)]
    good = tally(["k1", "k2", "k3"], ["k1", "k2", "k3"], reads, stints)
    heartbeats = {"source-to-target": Counter({HEARTBEAT_TOPIC: 3}), "target-to-source": Counter()}
    assert failed_check(good, heartbeats, (0, 0)) is None
    lost = tally(["k1", "k2", "k3", "k4"], ["k1", "k2", "k3"], [*reads, Read("k4", 1.6, 1)], stints)
    assert (failed_check(lost, heartbeats, (0, 0)) or "").startswith("lost: 1 acknowledged message(s) not on source")
    missed = tally(["k1", "k2", "k3"], ["k1", "k2", "k3"], reads[:2], stints)
    assert (failed_check(missed, heartbeats, (0, 0)) or "").startswith("missed: DEMO_GROUP never read 1")
    twice = tally(["k1", "k2", "k3"], ["k1", "k2", "k3"], [*reads, Read("k2", 1.7, 1)], stints)
    assert failed_check(twice, heartbeats, (0, 0)) == (
        "read twice: DEMO_GROUP read message(s) again, by the move that started the stint: {'switchover': 1}")
    orders = {"source-to-target": Counter({HEARTBEAT_TOPIC: 3, TOPIC: 2})}
    assert failed_check(good, orders, (0, 0)) == (
        "failures: messages other than heartbeats recorded as failed, per link: {'source-to-target': 2}")
    assert failed_check(good, heartbeats, (1, 0)) == (
        "standby: target lacks 1 and holds 0 twice of the acknowledged message(s)")
