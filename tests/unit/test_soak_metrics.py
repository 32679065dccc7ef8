"""The soak's summing-up rules (benchmarks/soak_metrics.py): growth from minute 5 (or the first sample), the
worst process, lag p99 outside fault windows, the exact last line."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

from benchmarks.soak_metrics import (
    FaultWindow,
    LagSample,
    ProcSample,
    count_fds,
    effective_lag,
    established_sockets,
    growth,
    is_store_file,
    job_role,
    lag_outside,
    percentile,
    process_line,
    rate_series,
    read_proc,
    sample_roles,
    summary_line,
    worst,
)

MIB = 2**20


def test_growth_counts_from_minute_five_not_from_the_start_up() -> None:
    samples = [ProcSample(0, "b", 50 * MIB, 10), ProcSample(300, "b", 100 * MIB, 20),
               ProcSample(600, "b", 110 * MIB, 21), ProcSample(1800, "b", 120 * MIB, 22)]
    assert growth(samples, "rss") == {"b": 20.0}
    assert growth(samples, "fds") == {"b": 10.0}


def test_a_short_run_counts_from_its_first_sample() -> None:
    samples = [ProcSample(0, "b", 100 * MIB, 10), ProcSample(60, "b", 105 * MIB, 10),
               ProcSample(180, "b", 125 * MIB, 12)]
    assert growth(samples, "rss") == {"b": 25.0}
    assert growth(samples, "rss", baseline_s=0.0) == {"b": 25.0}


def test_the_line_names_the_worst_process_and_a_single_sample_has_not_grown() -> None:
    samples = [ProcSample(0, "a", 100, 1), ProcSample(60, "a", 150, 1), ProcSample(0, "b", 100, 1),
               ProcSample(60, "b", 90, 1), ProcSample(30, "once", 10, 1)]
    g = growth(samples, "rss")
    assert g == {"a": 50.0, "b": -10.0, "once": 0.0}
    assert worst(g) == ("a", 50.0)
    assert worst({}) == ("-", 0.0)


def test_lag_p99_leaves_out_the_fault_windows_and_missing_answers() -> None:
    lags = [LagSample(t, 0.5, 0.5) for t in range(0, 100, 2)]
    lags += [LagSample(41, 30.0, 30.0), LagSample(43, None, None), LagSample(59, 4.0, 4.0)]
    windows = [FaultWindow("primary-kill", "ssrc-a-0", 40, 50)]
    outside = lag_outside(lags, windows)
    assert 30.0 not in outside and len(outside) == 50 - 6 + 1
    assert percentile(outside, 99) == 4.0
    assert percentile([0.5] * 99 + [4.0], 99) == 0.5
    assert math.isnan(percentile([], 99))


def test_the_last_line_is_exactly_the_issues() -> None:
    assert summary_line(3, 5, 36000, 35990, 10, 120, 12.345, -3.0, 0.987) == (
        "soak 3 min, faults 5, produced 36000, replicated 35990, lost 10, duplicates 120, rss growth 12.3 %, "
        "fd growth -3.0 %, lag p99 0.99 s")
    assert summary_line(30, 0, 0, 0, 0, 0, 0, 0, math.nan).endswith("lag p99 nan s")


def test_a_process_line_tags_a_broker_with_its_role_at_the_end_and_others_not() -> None:
    broker = ProcSample(1800, "ssrc-a-0", 300 * MIB, 40, store_fds=12, connections=9)
    assert process_line(broker, 7.21, -2.0, "primary", 256) == (
        "  ssrc-a-0: RSS 300 MiB (+7.2 %), fds 40 (-2.0 %; 9 connections as primary; store files 12 of "
        "max_open_files 256)")
    workers = ProcSample(1800, "job:worker", 80 * MIB, 12, processes=3, connections=2)
    assert process_line(workers, 0.0, 1.0, "", 256) == (
        "  job:worker: RSS 80 MiB (+0.0 %), fds 12 (+1.0 %; 2 connections) (largest of 3 processes)")


def test_rates_per_bin_and_job_roles() -> None:
    assert rate_series([0.5, 1.0, 25.0], [10, 10, 30], 10.0) == ([0.0, 10.0, 20.0], [2.0, 0.0, 3.0])
    assert rate_series([], [], 10.0) == ([], [])
    assert job_role([b"/usr/lib/jvm/java-17/bin/java", b"-cp"], "run_all.py") == "job:jvm"
    assert job_role([b"/venv/bin/python", b"/w/jobs/run_all.py", b"--config"], "run_all.py") == "job:driver"
    assert job_role([b"/venv/bin/python", b"-m", b"pyspark.daemon"], "run_all.py") == "job:pyspark-workers"


def test_a_stall_raises_the_lag_although_the_newest_heartbeat_arrived_quickly() -> None:
    assert effective_lag(0.3, 0.8, 1.0) == 0.3
    assert effective_lag(0.3, 12.0, 1.0) == 11.0
    assert effective_lag(None, 12.0, 1.0) is None
    assert effective_lag(0.3, None, None) == 0.3


def test_a_role_of_several_processes_is_its_largest_and_gone_ones_are_left_out() -> None:
    (me,) = sample_roles(7.0, {"me": [os.getpid(), 2**22 + 1], "gone": [2**22 + 1]})
    assert (me.t, me.name, me.processes) == (7.0, "me", 1)
    assert me.rss > 10 * MIB and me.fds >= 3


def test_fds_leave_out_store_files_and_established_connections_but_not_close_wait_sockets() -> None:
    targets = ["/run/b-0/commitlog/00000000000008388608", "/run/b-0/consumequeue/T/3/00000000000000000000",
               "socket:[11]", "socket:[12]", "socket:[13]", "/run/b-0/config/topics.json", "pipe:[7]",
               "anon_inode:[eventpoll]", "/run/commitlog"]
    # 11 and 12 established; 13 a listening socket or one in CLOSE_WAIT (its peer gone: a leak looks so)
    assert count_fds(targets, frozenset({11, 12, 99})) == (5, 2, 2)
    assert count_fds(targets, frozenset()) == (7, 2, 0)


def test_established_sockets_reads_this_namespaces_tcp_table() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            inode = os.fstat(client.fileno()).st_ino
            assert inode in established_sockets()
            assert os.fstat(server.fileno()).st_ino not in established_sockets()


def test_store_files_are_counted_apart_from_other_fds(tmp_path: Path) -> None:
    assert is_store_file("/run/b-0/commitlog/00000000000008388608")
    assert is_store_file("/run/b-0/consumequeue/T/3/00000000000000000000")
    assert not is_store_file("socket:[123]") and not is_store_file("/run/b-0/config/topics.json")
    assert not is_store_file("/run/commitlog")  # a file named so is not in such a directory
    before = read_proc(os.getpid())
    assert before is not None
    (tmp_path / "commitlog").mkdir()
    fd = os.open(tmp_path / "commitlog" / "0", os.O_CREAT | os.O_RDWR)
    try:
        after = read_proc(os.getpid())
        assert after is not None and after[1:3] == (before[1], before[2] + 1)
    finally:
        os.close(fd)
