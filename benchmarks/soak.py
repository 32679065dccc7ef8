"""Soak (docs/benchmarks.md, "Benchmarks"): the whole product for ``--minutes`` under a steady load and a fault every
``--fault-every`` seconds, with every process's RSS and open files, the replication lag and the heartbeat age sampled
over time.

    .venv/bin/python benchmarks/soak.py                      # 30 minutes, a fault every 3 minutes
    .venv/bin/python benchmarks/soak.py --minutes 3 --fault-every 30    # a quick run that still sees faults

What runs, all local processes on 127.0.0.1 (``tests.support.processes.LocalCluster``, the test harness):

* a source and a target cluster in controller mode: a name server embedding the controller and one group of three
  brokers each (SYNC_MASTER, ``in_sync_replicas`` 2 of 3: every acknowledged send is on two members);
* the main job, ``spark-submit jobs/run_all.py`` on ``local[2]`` (replication, heartbeat every second,
  checkpoints, config sync, the Prometheus endpoint the lag is read from, as ``jobs/lag.py`` reads it);
* a producer sending batches of ``--batch`` at ``--rate`` messages per second to the source (every SEND_OK's
  message ids kept), and a consumer group pulling the target topic and committing its offsets;
* a nemesis: every ``--fault-every`` seconds the next fault of ``--kinds`` in rotation: ``primary-kill`` (kill -9
  the primary of one cluster, source and target in turn, restarted ``--down`` s later), ``primary-pause``
  (SIGSTOP it for ``--pause`` s, then SIGCONT), ``replica-kill`` (kill -9 a member that is not the primary,
  restarted ``--down`` s later), ``driver-kill`` (SIGKILL the job, driver JVM and Python workers, then
  ``spark-submit`` it again on the same checkpoints), ``source-restart`` (SIGTERM a source broker, the group's
  members in turn, and start it again). A fault's window runs from the injection until, after the heal, the
  link is OK again for ``jobs.lag`` with a heartbeat younger than 3 s (at most ``--heal-timeout``), plus
  ``--fault-grace`` s.
* a sampler: every ``--lag-every`` s the link's heartbeat lag and age; every ``--sample-every`` s (and at the
  start and the end) the RSS and open fds of every process (/proc; the job's by role: JVM, driver, and the
  largest of PySpark's Python workers).

At the end the load stops, the faults stop, the target is drained (until it holds at least as many messages
as the source, at most ``--drain-timeout`` s) and read whole. *Lost*: acknowledged source messages whose id is
not on the target. *Replicated*: acknowledged messages found there. *Duplicates*: what the replicator wrote twice,
copies on the target beyond one per source message, a source message being its position on the source (the
``ROCKETMQ_REPLICATOR_POSITION`` every forwarded message carries) and its message id (a source failover can
truncate a position and reuse it for another message). A send the producer retried after a lost answer is stored
twice on the source, at two positions: both copies cross once each, not counted (the log line gives the count by
message id, these included). The log (``soak.log``), the job's console and the processes' logs and
the plot ``soak.png`` (RSS, lag, throughput over time) are in ``--out`` (default ``run/soak-<time>``).

The last line is exactly ``soak M min, faults F, produced P, replicated R, lost L, duplicates D, rss growth G %,
fd growth H %, lag p99 X s`` (growth and lag rules: ``benchmarks/soak_metrics.py``). Targets: L = 0,
G <= 20 %, H <= 10 %, lag p99 <= 5 s outside the fault windows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replicator_restart import first_message_after
from benchmarks.soak_metrics import (
    BASELINE_S,
    FaultWindow,
    LagSample,
    ProcSample,
    effective_lag,
    growth,
    job_processes,
    lag_outside,
    percentile,
    plot,
    process_line,
    sample_roles,
    summary_line,
    worst,
)
from broker_store.client import (
    Admin,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    SendStatus,
    StoredMessage,
    new_message,
)
from broker_store.deploy.launcher import free_port
from broker_store.protocol.properties import PROPERTY_REPLICATOR_POSITION
from broker_store.store.config import StoreConfig
from jobs.lag import EndpointUnreachableError, LinkLag, Status, link_lags, scrape
from tests.spark.spark_processes import (
    TaggedProcess,
    python_driver_pid,
    read_topic,
    submit_job,
    write_replicator_config,
)
from tests.support.processes import Broker, LocalCluster

SCRIPT, LINK, TOPIC, GROUP = "run_all.py", "soak", "SoakTopic", "GID_soak_consumer"
HA = {"total_replicas": 3, "in_sync_replicas": 2, "min_in_sync_replicas": 2}
STORE_FD_CAP = StoreConfig.model_fields["max_open_files"].default
"""The brokers here run with the store's default cap on open store files."""
KINDS = ("primary-kill", "primary-pause", "replica-kill", "driver-kill", "source-restart")
HEALTHY_AGE_S = 3.0
"""A link is healthy again once ``jobs.lag`` says OK and its newest heartbeat is younger than this (heartbeats
every second). OK, not only the age: before a (restarted) job's first heartbeat arrives its age is counted from
the job's start, young as well, and the status says STARTING."""


class Log:
    """Lines to stdout and ``soak.log``, each prefixed with the soak's clock."""

    def __init__(self, path: Path, started: Callable[[], float]) -> None:
        self.file: TextIO = path.open("a")
        self.started = started
        self.lock = threading.Lock()

    def __call__(self, text: str) -> None:
        line = f"[{self.started():7.1f} s] {text}"
        with self.lock:
            print(line, flush=True)
            self.file.write(line + "\n")
            self.file.flush()

    def close(self) -> None:
        self.file.close()


@dataclass
class Soak:
    args: argparse.Namespace
    out: Path
    src: LocalCluster
    dst: LocalCluster
    config: Path
    metrics_url: str
    job: TaggedProcess | None = None
    t0: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=threading.Event)
    acked: set[str] = field(default_factory=set)
    acked_at: list[float] = field(default_factory=list)
    acked_n: list[int] = field(default_factory=list)
    sends_failed: Counter[str] = field(default_factory=Counter)
    consumed_at: list[float] = field(default_factory=list)
    consumed_n: list[int] = field(default_factory=list)
    consumer_errors: Counter[str] = field(default_factory=Counter)
    procs: list[ProcSample] = field(default_factory=list)
    lags: list[LagSample] = field(default_factory=list)
    windows: list[FaultWindow] = field(default_factory=list)
    job_restarts: int = 0
    restart_rtos: list[float] = field(default_factory=list)
    job_lock: threading.Lock = field(default_factory=threading.Lock)
    log: Log | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        assert self.log is not None
        self.log(text)

    # -- the job ---------------------------------------------------------------------------------------------

    def submit(self) -> None:
        with self.job_lock:
            self.job = submit_job(SCRIPT, self.config, self.out / "job-console.log", job_log4j=True)

    def kill_job(self) -> None:
        with self.job_lock:
            if self.job is not None:
                self.job.kill()

    def stop_job(self) -> int | None:
        """SIGTERM the Python driver (the job's clean stop), then kill whatever is left; its exit code."""
        with self.job_lock:
            job = self.job
        if job is None or not job.alive():
            return None if job is None else job.proc.returncode
        try:
            os.kill(python_driver_pid(job, SCRIPT), signal.SIGTERM)
            return job.wait(90)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            return None
        finally:
            job.kill()

    # -- load ------------------------------------------------------------------------------------------------

    def produce(self) -> None:
        """Batches of ``--batch`` at ``--rate`` msg/s until ``stop``; a failed send is counted, not repeated."""
        args, index = self.args, 0
        started = time.monotonic()
        with Producer(self.src.namesrv_addr, "PID_soak", send_timeout=3.0, attempt_timeout=1.0) as producer:
            while not self.stop.is_set():
                batch = [new_message(TOPIC, os.urandom(args.body), keys=f"i{index + k}") for k in range(args.batch)]
                index += args.batch
                try:
                    result = producer.send_batch(batch)
                except Exception as exc:  # noqa: BLE001 - any failure: not acknowledged, the load goes on
                    self.sends_failed[type(exc).__name__] += 1
                    time.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.update(result.msg_ids)
                    self.acked_at.append(self.now())
                    self.acked_n.append(len(result.msg_ids))
                else:
                    self.sends_failed[result.status.name] += 1
                ahead = index / args.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)

    def consume(self) -> None:
        """The target's consumer group: pull every queue from its committed offset, commit after each round."""
        consumer = PullConsumer(self.dst.namesrv_addr, GROUP, pull_timeout=5.0)
        offsets: dict[MessageQueue, int] = {}
        queues: list[MessageQueue] = []
        try:
            while not self.stop.is_set():
                try:
                    if not queues:
                        queues = consumer.fetch_message_queues(TOPIC)
                    got = 0
                    for mq in queues:
                        if mq not in offsets:
                            offsets[mq] = consumer.query_consumer_offset(mq) or 0
                        result = consumer.pull(mq, offsets[mq], 256)
                        if result.status is PullStatus.FOUND:
                            got += len(result.messages)
                        if result.status in (PullStatus.FOUND, PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG,
                                             PullStatus.OFFSET_ILLEGAL):
                            offsets[mq] = result.next_begin_offset
                        consumer.update_consumer_offset(mq, offsets[mq])
                except Exception as exc:  # noqa: BLE001 - the target fails over under it: retry
                    self.consumer_errors[type(exc).__name__] += 1
                    time.sleep(0.5)
                    continue
                if got:
                    self.consumed_at.append(self.now())
                    self.consumed_n.append(got)
                else:
                    time.sleep(0.2)
        finally:
            consumer.close()

    # -- measurements ----------------------------------------------------------------------------------------

    def link(self) -> LinkLag | None:
        """The link's row as ``python -m jobs.lag`` shows it; None while the job's endpoint does not answer."""
        try:
            return link_lags(scrape(self.metrics_url, 2.0), [LINK], lagging_threshold_s=5.0)[0]
        except EndpointUnreachableError:
            return None

    def lag_now(self) -> LagSample:
        row = self.link()
        if row is None:
            return LagSample(self.now(), None, None)
        return LagSample(self.now(), effective_lag(row.lag_s, row.age_s, row.interval_s), row.age_s)

    def roles(self) -> dict[str, list[int]]:
        roles = {p.name: [p.pid] for c in (self.src, self.dst) for p in c.processes() if p.running()}
        with self.job_lock:
            job = self.job
        if job is not None:
            roles.update(job_processes(job.pids(), SCRIPT))
        return roles

    def broker_roles(self) -> dict[str, str]:
        """Each broker member's role ("primary" / "replica") as the name servers list it now; the members of a
        group listing no primary (an election under way) are left out."""
        roles: dict[str, str] = {}
        for cluster in (self.src, self.dst):
            for group, members in cluster.groups.items():
                primary = cluster.listed_primary(group)
                if primary is not None:
                    roles.update({b.name: "primary" if b is primary else "replica" for b in members})
        return roles

    def sample_procs(self) -> None:
        taken = sample_roles(self.now(), self.roles())
        self.procs.extend(taken)
        rss = sum(s.rss for s in taken) / 2**20
        fds = sum(s.fds for s in taken)
        self.say(f"sample: {sum(s.processes for s in taken)} processes in {len(taken)} roles, RSS {rss:.0f} MiB "
                 f"(the largest of each role), fds {fds}, acknowledged {len(self.acked)}, "
                 f"consumed {sum(self.consumed_n)}, lag {_fmt_lag(self.lags[-1] if self.lags else None)}")

    def sampler(self) -> None:
        next_procs = self.now() + self.args.sample_every
        while not self.stop.wait(self.args.lag_every):
            self.lags.append(self.lag_now())
            if self.now() >= next_procs:
                self.sample_procs()
                next_procs += self.args.sample_every

    def wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.link()
            if row is not None and row.status is Status.OK and row.age_s is not None and row.age_s < HEALTHY_AGE_S:
                return True
            time.sleep(0.5)
        return False

    # -- faults ----------------------------------------------------------------------------------------------

    def nemesis(self, end: float) -> None:
        kinds = self.args.kinds.split(",")
        n = 0
        while not self.stop.wait(max(0.0, self.args.fault_every - (self.now() % self.args.fault_every))):
            if self.now() + self.args.fault_every / 2 > end:  # no fault the run cannot see healed
                return
            kind = kinds[n % len(kinds)]
            cluster = self.src if n % 2 == 0 else self.dst  # with an odd rotation each kind hits both in turn
            start = self.now()
            try:
                victim = self.inject(kind, cluster, n)
            except Exception as exc:  # noqa: BLE001 - reported; the soak goes on
                self.say(f"fault {n + 1} {kind}: could not inject: {exc!r}")
                n += 1
                continue
            healed = self.now()
            ok = self.wait_healthy(self.args.heal_timeout)
            window = FaultWindow(kind, victim, start, self.now() + self.args.fault_grace)
            self.windows.append(window)
            self.say(f"fault {n + 1}: {kind} {victim} at {start:.1f} s, healed {healed - start:.1f} s later, "
                     f"link {'healthy' if ok else 'NOT healthy'} {self.now() - start:.1f} s after the injection")
            n += 1

    def inject(self, kind: str, cluster: LocalCluster, n: int) -> str:
        args = self.args
        group = next(iter(cluster.groups))
        if kind == "driver-kill":
            killed = time.time()
            self.kill_job()
            self.job_restarts += 1
            self.submit()
            threading.Thread(target=self.time_restart, args=(killed,), name="restart-rto", daemon=True).start()
            return "job"
        if kind == "source-restart":
            members = self.src.groups[next(iter(self.src.groups))]
            member = members[n % len(members)]
            member.stop()
            member.start(60)
            return member.name
        primary = cluster.primary(group)
        if kind == "primary-kill":
            return self._kill_restart(primary, args.down)
        if kind == "primary-pause":
            primary.pause()
            time.sleep(args.pause)
            primary.resume()
            return primary.name
        if kind == "replica-kill":
            replica = next(b for b in cluster.groups[group] if b is not primary and b.running())
            return self._kill_restart(replica, args.down)
        raise SystemExit(f"--kinds: unknown fault {kind!r} ({', '.join(KINDS)})")

    def time_restart(self, killed: float) -> None:
        """The restart's own RTO (``benchmarks/replicator_restart.py``): the kill -> the first message the
        resubmitted job stores on the target."""
        try:
            rto = first_message_after(self.dst.namesrv_addr, queues_of(self.dst.namesrv_addr), killed,
                                      self.args.heal_timeout)
        except Exception as exc:  # noqa: BLE001 - reported; the soak goes on
            self.say(f"driver-kill: the first replicated message after the kill could not be timed: {exc!r}")
            return
        self.restart_rtos.append(rto)
        self.say(f"driver-kill: first replicated message {rto:.1f} s after the kill -9 (target 15 s)")

    @staticmethod
    def _kill_restart(member: Broker, down: float) -> str:
        member.kill()
        time.sleep(down)
        member.start(60)
        return member.name

    # -- the end ---------------------------------------------------------------------------------------------

    def totals(self, cluster: LocalCluster) -> int | None:
        try:
            with Admin(cluster.namesrv_addr) as admin:
                route = admin.wait_for_route(TOPIC, timeout=10)
                return sum(admin.max_offset(MessageQueue(TOPIC, q.broker_name, i))
                           for q in route.queue_datas for i in range(q.read_queue_nums))
        except Exception:  # noqa: BLE001 - a primary being replaced: ask again
            return None

    def drain(self, timeout: float) -> dict[MessageQueue, list[StoredMessage]]:
        """The target's whole topic once it holds at least the source's count and every acknowledged message
        (re-read every few seconds until then, or until ``timeout``: what is still missing then is lost)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            source, target = self.totals(self.src), self.totals(self.dst)
            if source is not None and target is not None and target >= source:
                break
            time.sleep(1.0)
        while True:
            read = read_topic(self.dst.namesrv_addr, queues_of(self.dst.namesrv_addr))
            present = {m.msg_id for msgs in read.values() for m in msgs}
            missing = sum(1 for key in self.acked if key not in present)
            if not missing or time.monotonic() > deadline:
                self.say(f"drained: source holds {self.totals(self.src)}, target {sum(map(len, read.values()))}, "
                         f"acknowledged messages not on the target {missing}")
                return read
            time.sleep(5.0)


def _fmt_lag(sample: LagSample | None) -> str:
    if sample is None or sample.lag_s is None or sample.age_s is None:
        return "-"
    return f"{sample.lag_s:.2f} s (heartbeat age {sample.age_s:.1f} s)"


def queues_of(namesrv: str) -> list[MessageQueue]:
    with Admin(namesrv) as admin:
        route = admin.wait_for_route(TOPIC, timeout=30)
    return sorted(MessageQueue(TOPIC, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def run(args: argparse.Namespace, out: Path) -> str:
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(LocalCluster(out, "ssrc", brokers=1, replicas=3, controller={}, ha=HA))
        dst = stack.enter_context(LocalCluster(out, "sdst", brokers=1, replicas=3, controller={}, ha=HA))
        port = free_port()
        config = write_replicator_config(
            out / "replicator.yaml", source=("ssrc", src.namesrv_addr), target=("sdst", dst.namesrv_addr),
            metrics_port=port, heartbeat={"interval": 1.0},
            links={LINK: {"topic": TOPIC, "trigger_interval": 1.0, "checkpoints": {"interval": 5.0},
                          "config_sync": {"interval": 5.0}, "retry_backoff_ms": 100,
                          "retry_backoff_max_ms": 1000}})
        soak = Soak(args, out, src, dst, config, f"http://127.0.0.1:{port}/metrics")
        soak.log = log = Log(out / "soak.log", soak.now)
        stack.callback(soak.kill_job)
        with Admin(src.namesrv_addr) as admin:
            admin.create_topic(TOPIC, args.queues, cluster="ssrc")
            admin.wait_for_route(TOPIC, timeout=30)
        log(f"clusters up: source {src.namesrv_addr}, target {dst.namesrv_addr}; starting {SCRIPT}")
        soak.submit()
        with Producer(src.namesrv_addr, "PID_soak_warmup") as producer:
            result = producer.send_batch([new_message(TOPIC, b"warm-up", keys="warm") for _ in range(10)])
        soak.acked.update(result.msg_ids)
        deadline = time.monotonic() + args.start_timeout
        while (soak.totals(dst) or 0) < 10:
            job = soak.job
            assert job is not None
            if not job.alive() or time.monotonic() > deadline:
                raise SystemExit(f"the job replicated nothing within {args.start_timeout:g} s (alive "
                                 f"{job.alive()}); see {out / 'job-console.log'}:\n{job.log()[-3000:]}")
            time.sleep(1.0)
        soak.t0 = time.monotonic()
        end = args.minutes * 60.0
        log(f"the job replicates; soak for {args.minutes:g} min, a fault every {args.fault_every:g} s")
        threads = [threading.Thread(target=f, name=f.__name__, daemon=True)
                   for f in (soak.produce, soak.consume, soak.sampler)]
        nemesis = threading.Thread(target=soak.nemesis, args=(end,), name="nemesis", daemon=True)
        soak.sample_procs()
        for t in [*threads, nemesis]:
            t.start()
        while soak.now() < end and all(t.is_alive() for t in threads):
            time.sleep(1.0)
        dead = [t.name for t in threads if not t.is_alive()]
        soak.stop.set()
        nemesis.join(args.heal_timeout + 120)
        for t in threads:
            t.join(60)
        if dead:
            log(f"WARNING: {dead} ended early")
        soak.sample_procs()  # the end sample, before the drain
        broker_roles = soak.broker_roles()  # the end's roles, for the last sample's lines (the clusters stop below)
        # the configured length, unless the run was cut short (a thread of the load died)
        run_minutes = args.minutes if soak.now() >= end else round(soak.now() / 60, 1)
        target = soak.drain(args.drain_timeout)
        source = read_topic(src.namesrv_addr, queues_of(src.namesrv_addr))
        rc = soak.stop_job()
        log(f"job stopped with exit code {rc} after {soak.job_restarts} restart(s)")
    on_target = Counter(m.msg_id for msgs in target.values() for m in msgs)
    on_source = Counter(m.msg_id for msgs in source.values() for m in msgs)
    lost = sum(1 for key in soak.acked if key not in on_target)
    replicated = len(soak.acked) - lost
    copies = Counter((m.properties.get(PROPERTY_REPLICATOR_POSITION), m.msg_id)
                     for msgs in target.values() for m in msgs)
    duplicates = sum(n - 1 for n in copies.values() if n > 1)
    id_duplicates = sum(n - 1 for n in on_target.values() if n > 1)
    source_dups = sum(n - 1 for n in on_source.values() if n > 1)
    baseline = BASELINE_S  # growth() takes the first sample when the run has none after minute 5 but its last
    rss_growths = growth(soak.procs, "rss", baseline)
    fd_growths = growth(soak.procs, "fds", baseline)
    rss_name, rss_growth = worst(rss_growths)
    fd_name, fd_growth = worst(fd_growths)
    outside = lag_outside(soak.lags, soak.windows)
    p99 = percentile(outside, 99)
    png = out / "soak.png"
    plot(png, soak.procs, soak.lags, soak.windows, (soak.acked_at, soak.acked_n),
         (soak.consumed_at, soak.consumed_n))
    log(f"faults by kind {dict(Counter(w.kind for w in soak.windows))}; failed sends {dict(soak.sends_failed)}; "
        f"consumer errors {dict(soak.consumer_errors)}; consumed {sum(soak.consumed_n)}")
    if soak.restart_rtos:
        log("restart RTO (driver kill -9 -> first replicated message): "
            + ", ".join(f"{rto:.1f} s" for rto in soak.restart_rtos))
    log(f"source holds {sum(on_source.values())} ({source_dups} stored twice by producer retries), target "
        f"{sum(on_target.values())} ({duplicates} written twice by the replicator, {id_duplicates} copies beyond one "
        f"per message id); worst RSS growth {rss_name}, worst fd growth {fd_name} (from minute "
        f"{baseline / 60:g}, or the first sample); {len(outside)} lag samples outside {len(soak.windows)} fault "
        f"windows, max {max(outside, default=float('nan')):.2f} s")
    for name, pct in sorted(rss_growths.items()):
        last = max((s for s in soak.procs if s.name == name), key=lambda s: s.t)
        log(process_line(last, pct, fd_growths[name], broker_roles.get(name, ""), STORE_FD_CAP))
    log(f"plot: {png}")
    log.close()
    return summary_line(run_minutes, len(soak.windows), len(soak.acked), replicated, lost, duplicates,
                        rss_growth, fd_growth, p99)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--fault-every", type=float, default=180.0, help="seconds between faults")
    parser.add_argument("--kinds", default=",".join(KINDS), help="faults in rotation (comma-separated)")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--batch", type=int, default=10, help="messages per send")
    parser.add_argument("--body", type=int, default=256, help="message body bytes")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--down", type=float, default=3.0, help="seconds a killed broker stays down")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds a primary stays SIGSTOPped")
    parser.add_argument("--sample-every", type=float, default=60.0, help="seconds between RSS / fd samples")
    parser.add_argument("--lag-every", type=float, default=2.0, help="seconds between lag samples")
    parser.add_argument("--heal-timeout", type=float, default=180.0,
                        help="longest wait for the link to be healthy after a fault")
    parser.add_argument("--fault-grace", type=float, default=10.0, help="seconds a fault window lasts past health")
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--start-timeout", type=float, default=240.0, help="for the job's first replication")
    parser.add_argument("--out", type=Path, help="directory for the log, plot and process files")
    args = parser.parse_args(argv)
    unknown = set(args.kinds.split(",")) - set(KINDS)
    if unknown:
        parser.error(f"--kinds: unknown {sorted(unknown)} (known: {', '.join(KINDS)})")
    out = (args.out or Path("run") / f"soak-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    line = run(args, out)
    with (out / "soak.log").open("a") as f:
        f.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
