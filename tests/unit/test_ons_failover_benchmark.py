"""``benchmarks/ons_failover.py``'s pure parts: the node producer's log read back, the recovery of a fault (the first
SEND_OK of a send started after it), the last line's exact shape (its contract) and the generated ``up`` file (loaded
by the real config loader). The run itself is a heavy benchmark: ``benchmarks/ons_failover.py --poll-ms 1000``."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.ons_failover import Fault, Send, clusters_yaml, read_sends, recovery_s, summary_line
from broker_store.config import LocalClustersConfig, load_yaml


def test_the_send_log_is_read_back_and_other_lines_are_skipped(tmp_path: Path) -> None:
    log = tmp_path / "sends.log"
    log.write_text("READY\n100 103 SEND_OK\n120 121 ERR Send [4] times, still failed, cost [1]ms\n"
                   "140 3140 FLUSH_SLAVE_TIMEOUT\nnode: warning\n")
    assert read_sends(log) == [Send(100, 103, "SEND_OK"),
                               Send(120, 121, "ERR Send [4] times, still failed, cost [1]ms"),
                               Send(140, 3140, "FLUSH_SLAVE_TIMEOUT")]


def test_recovery_counts_only_sends_started_after_the_fault_and_before_the_next() -> None:
    sends = [Send(990, 1200, "SEND_OK"),          # started before the fault: not a recovery even if it ends after
             Send(1005, 1006, "ERR connect ECONNREFUSED"),
             Send(1030, 4030, "FLUSH_SLAVE_TIMEOUT"),  # not SEND_OK: not an acknowledgement
             Send(4050, 4052, "SEND_OK"),
             Send(4080, 4081, "SEND_OK")]
    assert recovery_s(Fault(1000, "g0.0"), sends, until_ms=10_000) == (3.052, 2)
    assert recovery_s(Fault(1000, "g0.0"), sends, until_ms=4050) == (None, 2)
    assert recovery_s(Fault(5000, "g0.1"), sends, until_ms=10_000) == (None, 0)


def test_the_last_line_has_the_documented_shape() -> None:
    line = summary_line("defaults (pollNameServerInteval 30 s)", 1, "kill -9", [25.0, 20.0, 15.0])
    assert line == ("ali-ons defaults (pollNameServerInteval 30 s), groups 1, kill -9: faults 3, first SEND_OK after "
                    "the fault p50 20.00 s, max 25.00 s, within 3 s: 0 of 3")
    assert re.fullmatch(r"ali-ons .+, groups \d, .+: faults \d+, first SEND_OK after the fault p50 [\d.]+ s, "
                        r"max [\d.]+ s, within 3 s: \d+ of \d+", line)
    never = summary_line("pollNameServerInteval 1000 ms", 2, "SIGSTOP 5 s", [1.2, None])
    assert never.endswith("faults 2, first SEND_OK after the fault p50 inf s, max inf s, within 3 s: 1 of 2")


def test_the_up_file_is_a_valid_local_clusters_file(tmp_path: Path) -> None:
    groups = [["127.0.0.1:20001", "127.0.0.1:20003", "127.0.0.1:20005"], ["127.0.0.1:20007", "127.0.0.1:20009",
                                                                          "127.0.0.1:20011"]]
    path = tmp_path / "clusters.yaml"
    path.write_text(clusters_yaml("127.0.0.1:20000", groups))
    config = load_yaml(path, LocalClustersConfig)
    (cluster,) = config.clusters
    assert [(b.broker_name, b.listen) for b in cluster.brokers] == [
        (f"g{g}", addr) for g, members in enumerate(groups) for addr in members]
    assert all(b.enable_controller_mode and b.ha.in_sync_replicas == 2 for b in cluster.brokers)
    assert cluster.namesrv.controller is not None


def test_the_up_file_gives_each_group_its_primary_address(tmp_path: Path) -> None:
    groups = [["127.0.0.1:20001", "127.0.0.1:20003", "127.0.0.1:20005"], ["127.0.0.1:20007", "127.0.0.1:20009",
                                                                          "127.0.0.1:20011"]]
    path = tmp_path / "clusters.yaml"
    path.write_text(clusters_yaml("127.0.0.1:20000", groups, ["127.0.0.1:20013", "127.0.0.1:20014"]))
    (cluster,) = load_yaml(path, LocalClustersConfig).clusters
    assert [(b.broker_name, b.primary_address) for b in cluster.brokers] == [
        (f"g{g}", f"127.0.0.1:{20013 + g}") for g in range(2) for _ in range(3)]
