"""Many links in one application: what each link of ``jobs/run_all.py`` costs, side by side in one run.

    .venv/bin/python benchmarks/links.py                 # 1 and 4 links, ~3 minutes
    .venv/bin/python benchmarks/links.py --links 1,4,8   # the sizing rule of docs/operations.md

For each count N of ``--links``: N links ``bsrc`` -> ``bdst`` (one single-broker cluster each side, real
processes, free loopback ports), each with its own topic of ``--queues`` (4) queues holding ``--messages``
(200) messages, every connector a link has by default (replication, checkpoints, config sync; one heartbeat
query for all). ``python jobs/run_all.py --config ...`` is launched as an operator launches it (its own JVM),
and the run measures:

* start-up: launch -> every link's first message on the target (polled every 200 ms);
* then, after ``--settle`` (10) seconds: the job's processes (the launched process and every descendant:
  the JVM, PySpark's daemon and workers, the data sources' runners), their memory as the sum of PSS
  (proportional set size: pages shared by forked workers are counted once) and the CPU they use over
  ``--idle-seconds`` (10) with no new message (cores: CPU seconds / wall seconds).

The last line is ``links: N links <figures>`` for the largest N against 1 link, with the per-link increments
the sizing rule of docs/operations.md is written from. Exit status 0; 1 on a failed run. Every process and file is
removed at exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replicator_children import run_child
from benchmarks.replicator_cluster import (
    Cluster,
    choose_data_root,
    config_yaml,
    create_topic,
    link_yaml,
    start_cluster,
    stop_cluster,
    total_messages,
)
from benchmarks.replicator_first import launch_job, stop_job
from broker_store.client import Admin, MessageQueue

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LinksRun:
    links: int
    first_s: float
    """Launch -> every link's first message on the target."""
    processes: int
    pss_mb: float
    idle_cores: float
    roles: dict[str, tuple[int, float, float]]
    """Role (``role_of``) -> processes, PSS MB, idle cores."""


def role_of(pid: int) -> str:
    """What a process of the job is, from its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    cmd = b" ".join(argv).decode(errors="replace")
    if "java" in os.path.basename(argv[0].decode(errors="replace")):
        return "spark JVM"
    if "run_all.py" in cmd:
        return "job driver (python)"
    for marker in ("pyspark.sql.streaming.", "pyspark.sql.worker."):
        if marker in cmd:
            return "python " + cmd.split(marker, 1)[1].split()[0]
    if "jobs.worker_zygote" in cmd:
        return "python worker fork server"
    if "daemon" in cmd:
        return "python daemon + task workers"
    return "other: " + cmd[:60]


def descendants(root: int) -> list[int]:
    """``root`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def run_links(count: int, work: Path, src: Cluster, dst: Cluster, queues: int, messages: int, settle: float,
              idle_seconds: float, timeout: float) -> LinksRun:
    run_dir = work / f"links-{count}"
    run_dir.mkdir(parents=True)
    links, targets = [], {}
    for i in range(count):
        topic, name = f"BenchLinks{count}x{i}", f"links-{count}-{i}"
        source_queues = create_topic(src.addr, src.name, topic, queues)
        targets[name] = create_topic(dst.addr, dst.name, topic, queues)
        run_child("preload", namesrv=src.addr, topic=topic,
                  queues=[(mq.broker_name, mq.queue_id) for mq in source_queues], count=messages, body=256)
        links.append(link_yaml(name, topic, 1.0, run_dir, 10_000, 4))
    config = run_dir / "replicator.yaml"
    config.write_text(config_yaml(src, dst, links))
    with Admin(dst.addr) as admin, open(run_dir / "console.txt", "wb") as console:
        launched = time.monotonic()
        job = launch_job("run_all.py", config, run_dir / "logs", console)
        try:
            waiting: dict[str, list[MessageQueue]] = dict(targets)
            while waiting:
                if job.poll() is not None:
                    raise RuntimeError(f"job exited with {job.returncode}; see {run_dir / 'console.txt'}")
                if time.monotonic() - launched > timeout:
                    raise RuntimeError(f"links without a message after {timeout:.0f} s: {sorted(waiting)}")
                waiting = {n: q for n, q in waiting.items() if total_messages(admin, q) == 0}
                time.sleep(0.2)
            first_s = time.monotonic() - launched
            time.sleep(settle)
            before = {p: cpu_seconds([p]) for p in descendants(job.pid)}
            t0 = time.monotonic()
            time.sleep(idle_seconds)
            wall = time.monotonic() - t0
            pids = descendants(job.pid)
            roles: dict[str, tuple[int, float, float]] = {}
            for pid in pids:
                n, mb, cores = roles.get(role_of(pid), (0, 0.0, 0.0))
                roles[role_of(pid)] = (n + 1, mb + pss_bytes(pid) / 1e6,
                                       cores + (cpu_seconds([pid]) - before.get(pid, 0.0)) / wall)
        finally:
            stop_job(job)
    return LinksRun(count, first_s, len(pids), sum(r[1] for r in roles.values()), sum(r[2] for r in roles.values()),
                    roles)


def summary(runs: list[LinksRun]) -> str:
    one, many = runs[0], runs[-1]
    extra = max(1, many.links - one.links)

    def per_link(a: float, b: float) -> float:
        return (b - a) / extra

    return (f"links: {many.links} links first message {many.first_s:.1f} s (1 link {one.first_s:.1f} s, "
            f"+{per_link(one.first_s, many.first_s):.1f} s a link), memory {many.pss_mb:,.0f} MB (1 link "
            f"{one.pss_mb:,.0f} MB, +{per_link(one.pss_mb, many.pss_mb):,.0f} MB a link), processes "
            f"{many.processes} (1 link {one.processes}, +{per_link(one.processes, many.processes):.1f} a link), "
            f"idle cores {many.idle_cores:.2f} (1 link {one.idle_cores:.2f}, "
            f"+{per_link(one.idle_cores, many.idle_cores):.3f} a link)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--links", default="1,4", help="link counts to run, comma-separated, starting with 1")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--settle", type=float, default=10.0)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    counts = sorted({int(c) for c in args.links.split(",")})
    if not counts or counts[0] != 1:
        p.error("--links must include 1 (the other counts are measured against it)")
    work = choose_data_root()
    src = dst = None
    try:
        src = start_cluster("bsrc", work)
        dst = start_cluster("bdst", work)
        runs = []
        for count in counts:
            run = run_links(count, work, src, dst, args.queues, args.messages, args.settle, args.idle_seconds,
                            args.timeout)
            print(f"{count} link(s): first message of every link {run.first_s:.1f} s after launch; "
                  f"{run.processes} processes, {run.pss_mb:,.0f} MB (PSS), idle {run.idle_cores:.2f} cores",
                  flush=True)
            for role, (n, mb, cores) in sorted(run.roles.items(), key=lambda item: -item[1][1]):
                print(f"    {role:<48} {n:>3} processes {mb:>7,.0f} MB {cores:>5.2f} cores", flush=True)
            runs.append(run)
        print(summary(runs), flush=True)
        return 0
    except Exception as exc:  # noqa: BLE001 - one line, then the exit status says it failed
        print(f"links benchmark failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for cluster in (src, dst):
            if cluster is not None:
                stop_cluster(cluster)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
