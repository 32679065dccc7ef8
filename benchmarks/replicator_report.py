"""Where the time went, for ``benchmarks/replicator.py``: CPU seconds per process role from /proc, py-spy on the
Spark JVM's Python children, percentiles, and the run's closing summary (its lines are the benchmark's
contract)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MB = 1_000_000
TARGET_RATIO, TARGET_MBPS, LATENCY_SLACK_S = 0.5, 30.0, 1.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> tuple[int, str, float]:
    """(ppid, comm, cpu seconds) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        raw = f.read()
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw.rpartition(")")[2].split()
    return int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_snapshot(labels: dict[int, str]) -> dict[str, float]:
    """CPU seconds per role: the given pids, this process, and every descendant of this process
    (the Spark JVM and its Python workers), grouped by what they are. Dead processes drop out."""
    stats: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = _proc_stat(int(entry))
            except (OSError, ValueError):
                continue
    me = os.getpid()
    out: dict[str, float] = {}

    def add(role: str, secs: float) -> None:
        out[role] = out.get(role, 0.0) + secs

    def descends(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == me:
                return True
            pid = stats.get(pid, (0, "", 0.0))[0]
            seen += 1
        return False

    for pid, (_, comm, secs) in stats.items():
        if pid in labels:
            add(labels[pid], secs)
        elif pid == me:
            add("bench driver (py4j client)", secs)
        elif descends(pid):
            cmd = _cmdline(pid)
            if comm == "java":
                add("spark JVM", secs)
            elif "pyspark.daemon" in cmd and "pyspark.sql.worker." in cmd:  # planner / commit runners
                add("python " + cmd.split("pyspark.sql.worker.", 1)[1].split()[0], secs)
            elif "pyspark.daemon" in cmd:
                add("python workers (tasks)", secs)
            elif "pyspark" in cmd:
                add("python " + cmd.split("pyspark.", 1)[-1].split()[0], secs)
            elif "jobs.worker_zygote" in cmd:
                add("python worker fork server", secs)
            elif "multiprocessing" in cmd:
                add("bench child (producer)", secs)
            else:
                add(f"other ({comm}: {cmd[:60]})", secs)
    return out


def start_py_spy(out: str) -> Any:
    """py-spy (not a project dependency: ``pip install py-spy`` into the venv) on Spark's Python workers (daemons,
    forked workers, data source runners): the children of the job's worker fork server (jobs/worker_zygote.py), or
    of the Spark JVM where there is none."""
    me = os.getpid()
    pids = list(map(int, filter(str.isdigit, os.listdir("/proc"))))
    zygotes = [pid for pid in pids if _safe_stat(pid)[0] == me and "jobs.worker_zygote" in _cmdline(pid)]
    jvm = zygotes[0] if zygotes else next(pid for pid in pids if _safe_stat(pid)[:2] == (me, "java"))
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("--py-spy needs py-spy (pip install py-spy)")
    return subprocess.Popen([spy, "record", "--subprocesses", "--nonblocking", "--format", "raw", "-r", "250",
                             "-o", out, "--pid", str(jvm)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _safe_stat(pid: int) -> tuple[int, str, float]:
    try:
        return _proc_stat(pid)
    except (OSError, ValueError):
        return (0, "", 0.0)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}



def pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def print_cpu(window: float, usage: dict[str, float]) -> None:
    total = sum(usage.values())
    print(f"    CPU over {window:.1f} s (cores busy; the machine has {os.cpu_count()}): "
          f"total {total / window:.2f}")
    for role, secs in sorted(usage.items(), key=lambda kv: -kv[1]):
        if secs > 0.005:
            print(f"      {role:<28} {secs:7.1f} s  {secs / window:5.2f} cores")


def print_summary(a: tuple[float, float], b: tuple[float, float], lat: list[int], trigger: float, first_line: str,
                  jvm_s: float, warm_n: int) -> None:
    """The full run's summary, its last lines: (a) and (b) as (msg/s, MB/s), (c)'s latencies, (d)'s line, the
    warm-up."""
    (a_rate, a_mbps), (b_rate, b_mbps) = a, b
    ratio = b_rate / a_rate if a_rate else 0.0
    p99 = pct(lat, 99)
    print("\nsummary")
    print(f"  (a) raw pull            {a_rate:>10,.0f} msg/s  {a_mbps:6.1f} MB/s")
    print(f"  (b) replication         {b_rate:>10,.0f} msg/s  {b_mbps:6.1f} MB/s   "
          f"target >= {TARGET_MBPS:.0f} MB/s: "
          f"{'MET' if b_mbps >= TARGET_MBPS else 'NOT MET'}")
    print(f"  (b)/(a)                 {ratio:>10.2f}                  target >= {TARGET_RATIO}: "
          f"{'MET' if ratio >= TARGET_RATIO else 'NOT MET'}")
    print(f"  (c) latency p50 / p99   {statistics.median(lat):>7.0f} / {p99:.0f} ms          target p99 <= "
          f"{(trigger + LATENCY_SLACK_S) * 1000:.0f} ms: "
          f"{'MET' if p99 <= (trigger + LATENCY_SLACK_S) * 1000 else 'NOT MET'}")
    print(first_line)
    print(f"  warm-up (excluded)      JVM {jvm_s:.1f} s, first query {warm_n} msgs")
