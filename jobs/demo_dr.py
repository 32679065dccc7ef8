"""`make demo DEMO_ARGS=--dr`: a planned switchover of the demo's link from the source cluster (A) to the target
(B) and a failback to A, done with the runbook's own commands (docs/operations.md, "Disaster recovery") while an
application keeps producing and consuming, then checked by key.

Used by ``jobs/demo.py`` (which imports it only for ``--dr``) on the clusters it started:

1. The demo's replicator config plus the reverse link ``target-to-source`` (B -> A, ``Orders`` only, replication
   only: its checkpoint and config-sync queries off, as the runbook says for a failback's reverse link). The
   topics the forward link names and the application's subscription group ``DEMO_GROUP`` are created on A;
   the main job (``jobs/run_all.py``, the forward link) creates them on B (config sync).
2. The application (``benchmarks.dr_drill_apps``, the disaster-recovery drill's): a producer of unique keys at
   ``--rate`` msg/s and a consumer of ``DEMO_GROUP`` (online: it heartbeats) pulling and committing, on A.
3. The reverse link's job (``jobs/replicate.py``), started with the main job and held by the link stop marker;
   ``python -m jobs.dr status`` and ``python -m jobs.dr switchover --reverse target-to-source``, each run as its
   own process with its output on the console, as an operator runs them. The demo watches the operation's journal
   as the operator watches the command: once ``fence`` is done the consumer reads A to its end, commits and
   leaves; once the command is done (the reverse link released from B's end) producer and consumer move to B.
4. On B for a while; then ``python -m jobs.dr failback``: ``fence`` done -> the consumer drains B and leaves;
   done -> both move back to A, which they use for a while.
5. The checks, by key (``benchmarks.dr_drill_tally``): every acknowledged send is on A (nothing lost), the
   group read every one (nothing missed) and none twice; and B, the standby again, holds each one once (the
   forward link resumed after the failback, B's own messages not copied back). Exit 0 when all hold, else 1
   with one line naming the check that failed.

Imports the application from ``benchmarks/`` (run from the repository's root, like the rest of the demo, which
also runs ``jobs/run_all.py`` by its path).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from benchmarks.dr_drill_apps import ConsumerApp, ProducerApp, Side
from benchmarks.dr_drill_tally import Stint, Tally, rto, tally
from broker_store.client import Admin, PullConsumer, PullStatus
from broker_store.deploy.launcher import free_port
from connectors.core.config import load_replicator_config
from connectors.core.errors import TableError
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.replication.link_stop import LinkStop, stop_link
from connectors.replication.tables import FAILURES
from jobs import demo_report
from jobs.demo import GROUP, LINK, TOPIC, create_source_topics, start_job, stop_job, wait_until, write_config
from jobs.dr.journal import FileJournal
from jobs.dr.operation import OperationRecord, StepState

A, B = "source", "target"
REVERSE = "target-to-source"
"""The reverse link the failback runs over (conf/replicator.yaml shows it, commented out)."""
BODY_BYTES, BATCH = 1024, 10
COMMAND_TIMEOUT = 300.0
"""Seconds one ``jobs.dr`` command may take (its own waits: drain 120 s, groups 60 s by default)."""
JOB_CONSOLE = "ERROR"
"""The jobs' console level: while a side is fenced, the heartbeat job's sends to it are refused, a WARNING a
second on the console (they stay in the jobs' logs); the summary counts what the failures tables recorded."""
SETTLE_TIMEOUT = 60.0
"""Seconds, at the end, for the consumer to read every acknowledged key and for B to hold each one."""


class DrDemoError(Exception):
    """A step could not be done (a command refused, the application got no answer): the demo exits 1 with
    this line."""


def write_dr_config(workdir: Path, port: int, namesrvs: Mapping[str, str]) -> Path:
    """``jobs.demo.write_config``'s config with the reverse link B -> A added."""
    path = write_config(workdir, port, dict(namesrvs))
    config = yaml.safe_load(path.read_text())
    config["links"].append({
        "name": REVERSE, "source": B, "target": A, "topics": {"explicit": [{"source": TOPIC}]},
        "trigger_interval": 1.0, "checkpoint_location": str(workdir / "checkpoints" / REVERSE),
        "delta_location": str(workdir / "delta"),
        # the failback moves the group by its offsets on B; a checkpoint query of this link would translate
        # through this link's offset map alone (docs/operations.md, failback)
        "checkpoints": {"enabled": False, "groups": {"explicit": [GROUP]}},
        "config_sync": {"enabled": False},
    })
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Operator:
    """Runs ``python -m jobs.dr`` commands on the forward link as an operator does, the output on the console,
    and acts when the operation's journal shows a step done."""

    def __init__(self, config: Path, jobs: list[subprocess.Popen[bytes]]) -> None:
        self.config = config
        self.journal = FileJournal(load_replicator_config(config).link(LINK).tables_location)
        self.jobs = jobs
        """The replication jobs: a command waiting on a dead one is stopped (a demo check fails)."""

    def _current(self) -> OperationRecord | None:
        try:
            return self.journal.load()
        except TableError:
            return None  # caught between two writes: read again

    def run(self, command: str, *extra: str,
            when_done: Mapping[str, Callable[[], None]] | None = None) -> OperationRecord | None:
        """The command to its end; ``when_done[step]`` once this operation's journal shows that step done (or
        after the command, if it was too quick to be seen). The operation's record (None for ``status``)."""
        before = self._current()
        argv = ["-m", "jobs.dr", command, "--link", LINK, "--config", str(self.config), *extra]
        print(f"\n$ python {' '.join(argv)}", flush=True)
        proc = subprocess.Popen([sys.executable, *argv])
        pending = dict(when_done or {})
        deadline = time.monotonic() + COMMAND_TIMEOUT
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise DrDemoError(f"jobs.dr {command} did not finish within {COMMAND_TIMEOUT:g} s")
                dead = [job for job in self.jobs if job.poll() is not None]
                if dead:
                    raise DrDemoError(f"a replication job exited (code {dead[0].returncode}) during jobs.dr {command}")
                record = self._current()
                if record is not None and record.kind == command and (before is None or record.id != before.id):
                    for name in [n for n in pending if record.step(n).state is StepState.DONE]:
                        pending.pop(name)()
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        print(flush=True)
        if proc.returncode != 0:
            raise DrDemoError(f"jobs.dr {command} exited {proc.returncode} (its last line above says why)")
        for action in pending.values():
            action()
        return self._current() if command != "status" else None


def fence_started(record: OperationRecord | None) -> float | None:
    return None if record is None else record.step("fence").started_at


def total_on(namesrv: str) -> int:
    with Admin(namesrv) as admin:
        return sum(admin.max_offset(q) for q in demo_report.queues_of(admin, TOPIC))


def keys_on(namesrv: str) -> Counter[str]:
    """How many times each message (its unique key) is stored in TOPIC on a cluster."""
    keys: Counter[str] = Counter()
    with Admin(namesrv) as admin, PullConsumer(namesrv, "DEMO_VERIFY", heartbeat_interval=None) as consumer:
        for mq in demo_report.queues_of(admin, TOPIC):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 256)
                if result.status is not PullStatus.FOUND:
                    break
                keys.update(m.msg_id for m in result.messages)
                offset = result.next_begin_offset
    return keys


class DrDemo:
    """The application, the operator and the jobs of one ``--dr`` run."""

    def __init__(self, namesrvs: Mapping[str, str], workdir: Path, config: Path, *, rate: float,
                 dwell: float) -> None:
        self.workdir, self.config, self.dwell = workdir, config, dwell
        self.a, self.b = Side(A, namesrvs[A]), Side(B, namesrvs[B])
        self.producer = ProducerApp(TOPIC, self.a, rate=rate, batch=BATCH, body=BODY_BYTES)
        self.consumer = ConsumerApp(TOPIC, GROUP)
        self.jobs: list[subprocess.Popen[bytes]] = []
        self.operator = Operator(config, self.jobs)
        self.rtos: dict[str, float | None] = {}

    def start_forward(self) -> subprocess.Popen[bytes]:
        job = start_job("run_all.py", self.config, LINK, self.workdir / "logs", console_level=JOB_CONSOLE)
        self.jobs.append(job)
        return job

    def start_reverse(self) -> None:
        """The reverse link's job, warm and held (the link stop marker) until ``switchover --reverse`` starts it
        exactly from B's end: the failback does not wait for a Spark job's start-up."""
        reverse = load_replicator_config(self.config).link(REVERSE).tables_location
        stop_link(reverse, LinkStop("demo", "held until the switchover starts it from B's end", time.time()))
        print(f"(the operator:) starting link {REVERSE}'s job, held until the switchover", flush=True)
        self.jobs.append(start_job("replicate.py", self.config, REVERSE, self.workdir / "logs" / REVERSE,
                                   "--metrics-port", "0", console_level=JOB_CONSOLE))

    def stop_jobs(self) -> list[int]:
        return [stop_job(job) for job in self.jobs]

    # -- the application ----------------------------------------------------------------------------------

    def leave(self) -> None:
        """The consumer reads its side to the end (fenced: that is all there is), commits and stops."""
        if not self.consumer.leave(drain=True, timeout=90):
            raise DrDemoError("the consumer did not leave its side within 90 s")
        print(f"  (the operator:) the consumer of {GROUP} read its side to the end, committed and stopped "
              f"({len(self.consumer.reads)} read so far)", flush=True)

    def move(self, side: Side, move: str) -> Stint:
        self.producer.move(side)
        index = self.consumer.join(side, move)
        if not self.consumer.wait_running(60):
            raise DrDemoError(f"the consumer got no answer on {side.name} within 60 s (errors "
                              f"{dict(self.consumer.errors)})")
        print(f"(the operator:) producer and consumer pointed at {side.name} ({side.namesrv})", flush=True)
        return self.consumer.stints[index]

    def run_on(self, side: Side) -> None:
        print(f"producing {self.producer.rate:.0f} msg/s to {TOPIC} on {side.name}, {GROUP} consuming there, for "
              f"{self.dwell:.0f} s", flush=True)
        time.sleep(self.dwell)
        print(f"  so far: {len(self.producer.acked)} acknowledged, {len(self.consumer.reads)} read", flush=True)

    def caught_up(self, job: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
        """Until B holds all but two seconds of the load (the switchover's lag gate is 1000 messages)."""
        print(f"(the operator:) waiting for the link to be under {2 * self.producer.rate:.0f} messages behind "
              f"before the switchover", flush=True)
        wait_until(lambda: total_on(self.a.namesrv) - total_on(self.b.namesrv) <= 2 * self.producer.rate, timeout,
                   f"the link to catch up with {TOPIC}", job)

    # -- the moves ----------------------------------------------------------------------------------------

    def switchover(self) -> Stint:
        record = self.operator.run("switchover", "--reverse", REVERSE, when_done={"fence": self.leave})
        stint = self.move(self.b, "switchover")
        self.rtos["switchover"] = rto(fence_started(record), stint)
        return stint

    def failback(self) -> Stint:
        record = self.operator.run("failback", when_done={"fence": self.leave})
        stint = self.move(self.a, "failback")
        self.rtos["failback"] = rto(fence_started(record), stint)
        return stint

    def settle(self) -> None:
        """Stop the producer; let the consumer read every acknowledged key (at most ``SETTLE_TIMEOUT``)."""
        self.producer.stop.set()
        self.producer.thread.join(30)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while set(self.producer.acked) - {r.key for r in self.consumer.reads} and time.monotonic() < deadline:
            time.sleep(0.5)
        self.consumer.leave(drain=True, timeout=60)
        self.consumer.stop.set()

    def standby_copies(self) -> tuple[int, int]:
        """Acknowledged keys B lacks and holds twice, once the forward link has had ``SETTLE_TIMEOUT`` to copy
        what A took after the failback."""
        acked = set(self.producer.acked)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            on_b = keys_on(self.b.namesrv)
            missing = len(acked - set(on_b))
            twice = sum(1 for k in acked if on_b.get(k, 0) > 1)
            if not missing or time.monotonic() > deadline:
                return missing, twice
            time.sleep(1.0)


def failures_by_topic(delta: Path) -> dict[str, Counter[str]]:
    """Per link (a directory of the demo's Delta location), its failures table's rows by source topic."""
    return {tables.name: Counter(str(r["topic"]) for r in demo_report.table_rows(tables, FAILURES))
            for tables in sorted(delta.iterdir()) if tables.is_dir()}


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counter.most_common()) or "none"


def _rto(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def summary(demo: DrDemo, t: Tally, standby: tuple[int, int]) -> str | None:
    """Print the summary; the first failed check as one line, or None when every check holds."""
    by_side = Counter(demo.producer.acked.values())
    stints = demo.consumer.stints
    print("summary:")
    print(f"  application: {t.acknowledged} message(s) acknowledged ({by_side[A]} by {A}, {by_side[B]} by {B}); "
          f"{sum(demo.producer.failed.values())} send(s) not acknowledged ({_counts(demo.producer.failed)}: a "
          f"fenced side refuses writes); "
          f"{GROUP} read {len(demo.consumer.reads)} in {len(stints)} stints ("
          + ", ".join(f"{s.move} on {s.side}" for s in stints) + ")")
    print(f"  switchover: {_rto(demo.rtos.get('switchover'))} from the fence to the consumer's first answer on {B}; "
          f"failback: {_rto(demo.rtos.get('failback'))} to its first answer on {A} (over the reverse link, warm "
          f"since the switchover)")
    print(f"  by key: {t.lost} lost (acknowledged, not on {A} at the end), {t.gaps} missed (acknowledged, never "
          f"read by {GROUP}), {sum(t.read_twice.values())} read twice")
    failures = failures_by_topic(demo.workdir / "delta")
    recorded = "; ".join(f"{link}: " + ", ".join(f"{n} of {topic}" for topic, n in sorted(c.items()))
                         for link, c in sorted(failures.items()) if c)
    print(f"  failures tables: {recorded or 'empty'}"
          + (" (heartbeats that reached a side while it was fenced: recorded, replayable)"
             if any(c[HEARTBEAT_TOPIC] for c in failures.values()) else ""))
    missing, twice = standby
    print(f"  standby: {B} holds {t.acknowledged - missing} of the {t.acknowledged} acknowledged message(s), "
          f"{twice} twice (the forward link resumed after the failback; {B}'s own messages not copied back)")
    return failed_check(t, failures, standby)


def failed_check(t: Tally, failures: Mapping[str, Counter[str]], standby: tuple[int, int]) -> str | None:
    """The first check that fails, as one line naming it; None when all hold. ``failures``: per link, its failures
    table's rows by source topic (heartbeats allowed: the heartbeat job writes to a fenced side); ``standby``:
    acknowledged keys B lacks and holds twice at the end."""
    if t.lost:
        return f"lost: {t.lost} acknowledged message(s) not on {A} (e.g. {', '.join(t.lost_sample)})"
    if t.gaps:
        return f"missed: {GROUP} never read {t.gaps} acknowledged message(s) (e.g. {', '.join(t.gap_sample)})"
    if twice := {move: n for move, n in t.read_twice.items() if n}:
        return f"read twice: {GROUP} read message(s) again, by the move that started the stint: {twice}"
    others = {link: n for link, c in failures.items() if (n := sum(c.values()) - c[HEARTBEAT_TOPIC])}
    if others:
        return f"failures: messages other than heartbeats recorded as failed, per link: {others}"
    missing, twice_on_b = standby
    if missing or twice_on_b:
        return f"standby: {B} lacks {missing} and holds {twice_on_b} twice of the acknowledged message(s)"
    return None


def run_dr_demo(namesrvs: Mapping[str, str], workdir: Path, *, rate: float, seconds: float) -> int:
    """The ``--dr`` demo on running clusters (name server by cluster name); ``seconds`` of load split over its
    three stints (A, B, A again). 0 when every check holds, 1 otherwise."""
    started = time.monotonic()
    config = write_dr_config(workdir, free_port(), namesrvs)
    create_source_topics(namesrvs[A], config)
    with Admin(namesrvs[A]) as admin:
        admin.create_subscription_group({"groupName": GROUP}, cluster=A)
    demo = DrDemo(namesrvs, workdir, config, rate=rate, dwell=seconds / 3)
    ok = False
    try:
        job = demo.start_forward()
        demo.start_reverse()  # its Spark start-up beside the forward job's, long before the failback needs it
        with Admin(namesrvs[B]) as admin:
            def created() -> bool:
                groups = set().union(*(admin.all_subscription_groups(addr) for addr in admin.primary_addrs(B).values()))
                return TOPIC in admin.topic_list() and GROUP in groups
            wait_until(created, 120, f"config sync to create {TOPIC} and {GROUP} on {B}", job)
        print(f"main job up; {TOPIC} and {GROUP} created on {B} by config sync {time.monotonic() - started:.1f}s after "
              "start-up (Spark included)", flush=True)
        demo.producer.start()
        demo.consumer.start()
        demo.move(demo.a, "start")
        demo.run_on(demo.a)
        demo.caught_up(job)
        demo.operator.run("status")
        demo.switchover()
        demo.run_on(demo.b)
        demo.failback()
        demo.run_on(demo.a)
        demo.settle()
        t = tally(demo.producer.acked, keys_on(demo.a.namesrv), demo.consumer.reads, demo.consumer.stints)
        failed = summary(demo, t, demo.standby_copies())
        if failed is None:
            ok = True
            print("dr demo: every check holds")
        else:
            print(f"demo check failed: {failed}")
    except (DrDemoError, demo_report.DemoCheckError) as exc:
        print(f"demo check failed: {exc}")
    except KeyboardInterrupt:
        print("Ctrl-C: stopping (an operation under way stays in the link's journal: python -m jobs.dr show)")
    finally:
        demo.producer.stop.set()
        demo.consumer.stop.set()
        codes = demo.stop_jobs()
        print(f"stopped the replication jobs (exit {', '.join(map(str, codes))}) {time.monotonic() - started:.0f}s "
              "after the start")
    if ok and any(codes):
        print(f"demo check failed: a replication job did not stop cleanly (exit {', '.join(map(str, codes))}; its "
              f"log in {workdir / 'logs'})")
    return 0 if ok and not any(codes) else 1
