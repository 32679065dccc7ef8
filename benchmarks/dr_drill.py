"""Disaster-recovery drill (docs/benchmarks.md, "Disaster recovery drill"; docs/operations.md "Disaster recovery" is
the runbook it follows): an application keeps producing and consuming while an operator moves it between two
clusters with ``python -m jobs.dr``, planned and unplanned, and the drill checks by key what it lost, missed and
read twice.

    .venv/bin/python benchmarks/dr_drill.py                # 1,000 msg/s, 30 s on each side
    .venv/bin/python benchmarks/dr_drill.py --quick        # 10 s on each side
    .venv/bin/python benchmarks/dr_drill.py --until 3      # steps (1)-(3) only

What runs, all local processes on 127.0.0.1 (``tests.support.processes.LocalCluster``, the test harness):

* cluster A (two broker groups) and cluster B (``--b-groups``, one by default), one topic with ``--queues``
  queues per broker group of A (as many on B in all), the application's subscription group and its retry topic
  on both;
* links A -> B (``dr-ab``) and B -> A (``dr-ba``), config sync off (the topics and the group are made up front:
  config sync would copy the fence's read-only permission of A's topics to B); the forward link's main job
  (``spark-submit jobs/run_all.py --link dr-ab``: replication and checkpoints every ``--checkpoint-interval`` s)
  and the reverse link's (``spark-submit jobs/replicate.py --link dr-ba``) from the start, the reverse one held
  by the link stop marker (``connectors.replication.link_stop``) until the switchover (``--reverse dr-ba``)
  starts it exactly from B's end, so A is a warm standby at the failback; held again while A is down after the
  kill and released at the second failback's ``reopen``. ``--cold-reverse``: the runbook's way without
  ``--reverse``, the reverse link's job started only at the first failback's ``reopen``;
* the application (``benchmarks.dr_drill_apps``): a producer of unique keys at ``--rate`` msg/s and a consumer
  group pulling and committing all the time, each on the active side.

The steps, each a ``python -m jobs.dr`` command run as an operator runs it, the drill watching its journal:

1. ``switchover --reverse dr-ba`` A -> B under load: once ``fence`` is done the consumer reads A to its end (A
   takes no more writes), commits and leaves; once ``groups`` is done the producer moves to B; when the command
   is done the consumer moves to B.
2. ``--dwell`` s on B.
3. ``failback`` B -> A: ``fence`` done -> the consumer drains B and leaves; ``reopen`` done -> the reverse link's
   job starts (unless running) or is released; when the command is done both move to A.
4. ``--dwell`` s on A, then kill -9 of every process of A (name server and brokers) under load; the consumer and
   the reverse link's job are stopped; ``failover`` (its audit: the RPO), producer and consumer move to B; A is
   started again; ``recover`` (what A acknowledged beyond the replicated point copied to B).
5. ``--dwell`` s on B, then ``failback`` again.

At the end the producer stops, the consumer reads until it has every acknowledged key (at most
``--settle-timeout`` s) and the active side (A) is read whole. The accounting is ``benchmarks.dr_drill_tally``:
*lost* acknowledged keys not on A, *gaps* acknowledged keys the consumer never read, *read twice* reads beyond
the first charged to the move that started the consumer's stint (planned: switchover and failbacks; failover).
RTOs run from the fence step's start (the journal) to the consumer's first pull answer on the other side; the
failback's is the slower of the two. The log (``drill.log``), the commands' and jobs' output and the processes'
logs are in ``--out`` (default ``run/dr-drill-<time>``).

The last line is exactly ``dr drill: switchover rto X s, failback rto Y s, failover rpo R, recovered C, lost L,
gaps G, read twice planned P, read twice failover F`` (``-`` for a step not run). Targets: L = 0, G = 0, P = 0,
C >= R, X <= 10 s and Y <= 10 s at 1,000 msg/s, F no more than the consumer read in one checkpoint interval
before the kill.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.dr_drill_apps import ConsumerApp, ProducerApp, Side
from benchmarks.dr_drill_tally import Stint, missed_targets, read_within, rto, summary_line, tally
from benchmarks.soak import Log
from broker_store.client import Admin, MessageQueue, Producer, new_message
from broker_store.protocol.topic import RETRY_GROUP_TOPIC_PREFIX
from connectors.core.config import load_replicator_config
from connectors.core.errors import TableError
from connectors.replication.link_stop import LinkStop, resume_link, stop_link
from jobs.dr.journal import FileJournal
from jobs.dr.operation import OperationRecord, StepState
from tests.spark.spark_processes import (
    PROJECT_ROOT,
    TaggedProcess,
    read_topic,
    spark_env,
    submit_job,
    submit_replicate,
    write_replicator_config,
)
from tests.support.processes import LocalCluster

A, B = "dra", "drb"
LINK, REVERSE = "dr-ab", "dr-ba"
TOPIC, GROUP = "DrDrillTopic", "GID_dr_drill"
RTO_TARGET_S = 10.0


class DrillError(RuntimeError):
    """A step of the drill could not be done (a command refused, the application did not run): the message says
    which and where its output is."""


def step_result(document: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The result of step ``name`` in a ``jobs.dr --json`` document."""
    for step in document["steps"]:
        if step["name"] == name:
            return dict(step["result"])
    raise DrillError(f"no step {name!r} in the {document.get('kind')} record")


def json_document(output: str) -> dict[str, Any]:
    """The ``--json`` document in a command's output (stderr's progress lines come before it, interleaved)."""
    lines = output.splitlines()
    start = lines.index("{")
    document, _ = json.JSONDecoder().raw_decode("\n".join(lines[start:]))
    return dict(document)


def step_started(document: Mapping[str, Any], name: str) -> float | None:
    for step in document["steps"]:
        if step["name"] == name:
            return None if step["started_at"] is None else float(step["started_at"])
    return None


class Drill:
    def __init__(self, args: argparse.Namespace, out: Path, a: LocalCluster, b: LocalCluster, config: Path,
                 log: Log) -> None:
        self.args, self.out, self.a, self.b, self.config, self.log = args, out, a, b, config, log
        self.side_a, self.side_b = Side(A, a.namesrv_addr), Side(B, b.namesrv_addr)
        links = load_replicator_config(config)
        self.journal = FileJournal(links.link(LINK).tables_location)
        self.reverse_tables = links.link(REVERSE).tables_location
        self.producer = ProducerApp(TOPIC, self.side_a, rate=args.rate, batch=args.batch, body=args.body)
        self.consumer = ConsumerApp(TOPIC, GROUP)
        self.forward: TaggedProcess | None = None
        self.reverse: TaggedProcess | None = None
        self.commands = 0
        self.fence_at: dict[str, list[float | None]] = {"switchover": [], "failback": []}
        self.moved_to: dict[str, list[Stint]] = {"switchover": [], "failback": []}
        self.rpo: int | None = None
        self.recovered: int | None = None
        self.failover_bound: int | None = None

    # -- jobs --------------------------------------------------------------------------------------------

    def start_forward(self) -> None:
        self.forward = submit_job("run_all.py", self.config, self.out / "job-forward.log", links=[LINK],
                                  job_log4j=True)

    def hold_reverse(self) -> None:
        """The reverse link's job stays up but plans nothing (the link stop marker) while A cannot take its writes:
        before the switchover (which holds it itself from its ``hold`` step), and while A is down."""
        stop_link(self.reverse_tables, LinkStop("dr-drill", "held by the drill while A is fenced or down", time.time()))
        self.log(f"reverse link {REVERSE} held (stop marker)")

    def open_reverse(self) -> None:
        """At the failback's ``reopen``: the reverse link's hold lifted (after the kill of A; a no-op after a
        switchover with ``--reverse``) and its job started if it is not running (``--cold-reverse``: here)."""
        if not self.args.cold_reverse:
            resume_link(self.reverse_tables)
            self.log(f"reverse link {REVERSE} released")
        self.ensure_reverse()

    def ensure_reverse(self) -> None:
        if self.reverse is None or not self.reverse.alive():
            self.log(f"starting the reverse link's job ({REVERSE})")
            self.reverse = submit_replicate(self.config, [REVERSE], self.out / "job-reverse.log")

    def stop_jobs(self) -> None:
        for job in (self.forward, self.reverse):
            if job is not None:
                job.kill()

    # -- jobs.dr -----------------------------------------------------------------------------------------

    def current(self) -> OperationRecord | None:
        try:
            return self.journal.load()
        except TableError:
            return None  # caught between two writes: read again

    def run_dr(self, command: str, *extra: str, when_done: Mapping[str, Callable[[], None]] | None = None,
               timeout: float = 600.0) -> dict[str, Any]:
        """``python -m jobs.dr <command> --json`` as its own process; ``when_done[step]`` is called once the
        journal shows that step of this operation done (or after the command, if it was too quick to see)."""
        self.commands += 1
        log_file = self.out / f"dr-{self.commands}-{command}.log"
        before = self.current()
        argv = [sys.executable, "-m", "jobs.dr", command, "--link", LINK, "--config", str(self.config), "--json",
                *extra]
        self.log(f"jobs.dr {command} {' '.join(extra)} (output {log_file.name})")
        proc = TaggedProcess(argv, log_file, spark_env(), cwd=PROJECT_ROOT)
        pending = dict(when_done or {})
        deadline = time.monotonic() + timeout
        try:
            while proc.alive() and time.monotonic() < deadline:
                record = self.current()
                if record is not None and record.kind == command and (before is None or record.id != before.id):
                    for name in [n for n in pending if record.step(n).state is StepState.DONE]:
                        self.log(f"  {command}: {name} done")
                        pending.pop(name)()
                time.sleep(0.1)
            rc = proc.wait(5) if not proc.alive() else None
        finally:
            proc.kill()
        out = proc.log()
        if rc != 0:
            tail = "\n".join(out.strip().splitlines()[-5:])
            raise DrillError(f"jobs.dr {command} {'timed out' if rc is None else f'exited {rc}'} (see {log_file}):\n"
                             f"{tail}")
        for name, action in pending.items():
            self.log(f"  {command}: {name} done (seen after the command)")
            action()
        document = json_document(out)
        durations = {s["name"]: round((s["finished_at"] or 0) - (s["started_at"] or 0), 1) for s in document["steps"]}
        self.log(f"jobs.dr {command} done: steps {durations}")
        return document

    # -- the application ----------------------------------------------------------------------------------

    def leave(self, drain: bool) -> None:
        if not self.consumer.leave(drain=drain, timeout=90):
            raise DrillError("the consumer did not leave its side within 90 s")
        self.log(f"consumer left ({'drained, committed' if drain else 'dropped'}); read {len(self.consumer.reads)}")

    def move(self, side: Side, move: str) -> Stint:
        self.producer.move(side)
        index = self.consumer.join(side, move)
        if not self.consumer.wait_running(60):
            raise DrillError(f"the consumer got no answer on {side.name} within 60 s (errors "
                             f"{dict(self.consumer.errors)})")
        stint = self.consumer.stints[index]
        self.log(f"producer and consumer on {side.name} ({move})")
        return stint

    def dwell(self, where: str) -> None:
        self.log(f"running on {where} for {self.args.dwell:g} s: acknowledged {len(self.producer.acked)}, "
                 f"read {len(self.consumer.reads)}")
        time.sleep(self.args.dwell)

    def warm_up(self) -> None:
        """Ten messages through the forward link before the load starts (the job's start-up is not the drill's)."""
        with Producer(self.a.namesrv_addr, "PID_dr_drill_warmup") as producer:
            producer.send_batch([new_message(TOPIC, b"warm-up", keys="warm") for _ in range(10)])
        deadline = time.monotonic() + self.args.start_timeout
        while self.totals(self.b) < 10:
            job = self.forward
            assert job is not None
            if not job.alive() or time.monotonic() > deadline:
                raise DrillError(f"the forward link replicated nothing within {self.args.start_timeout:g} s "
                                 f"(alive {job.alive()}); see {self.out / 'job-forward.log'}")
            time.sleep(1.0)
        self.log("the forward link replicates")

    def caught_up(self, timeout: float = 180.0) -> None:
        """Until B holds all but two seconds of the load of what A holds (only the forward link writes to B
        before the switchover), as an operator waits for the lag before a planned move."""
        deadline = time.monotonic() + timeout
        while (behind := self.totals(self.a) - self.totals(self.b)) > 2 * self.args.rate:
            if time.monotonic() > deadline:
                raise DrillError(f"the forward link is still {behind} message(s) behind after {timeout:g} s")
            time.sleep(1.0)
        self.log(f"the forward link is {behind} message(s) behind")

    def totals(self, cluster: LocalCluster) -> int:
        with Admin(cluster.namesrv_addr) as admin:
            return sum(admin.max_offset(q) for q in queues_of(admin))

    # -- the steps ----------------------------------------------------------------------------------------

    def planned(self, command: str, source: Side, target: Side, *extra: str) -> None:
        actions: dict[str, Callable[[], None]] = {"fence": lambda: self.leave(drain=True),
                                                  "groups": lambda: self.producer.move(target)}
        if command == "failback":
            actions["reopen"] = self.open_reverse
        document = self.run_dr(command, *extra, when_done=actions)
        self.fence_at[command].append(step_started(document, "fence"))
        stint = self.move(target, command)
        self.moved_to[command].append(stint)
        self.log(f"{command} {source.name} -> {target.name}: rto {rto(self.fence_at[command][-1], stint)} s")

    def failover(self) -> None:
        before = len(self.consumer.stints) - 1
        killed_at = time.time()
        self.a.stop()  # SIGKILL: brokers first, then the name server
        self.log(f"kill -9 every process of {A}")
        self.leave(drain=False)
        if not self.args.cold_reverse:
            self.hold_reverse()
        elif self.reverse is not None:
            self.reverse.kill()  # its target is gone; started again by the next failback
        self.failover_bound = read_within(self.consumer.reads, before, killed_at - self.args.checkpoint_interval,
                                          killed_at)
        document = self.run_dr("failover")
        audit = step_result(document, "report")["audit"]
        self.rpo = int(audit["missing"])
        self.log(f"failover audit: at least {self.rpo} acknowledged message(s) not on {B}; unknown queues "
                 f"{audit['unknown_queues']}")
        if self.forward is not None:
            self.forward.kill()  # the link is stopped; its job is not needed until the next failback is done
        self.move(self.side_b, "failover")
        self.a.start(60)
        self.log(f"{A} started again")
        document = self.run_dr("recover")
        self.recovered = int(step_result(document, "report")["recovered"])
        self.log(f"recovered {self.recovered} message(s)")

    def step1(self) -> None:
        self.dwell(A)
        self.caught_up()
        extra = () if self.args.cold_reverse else ("--reverse", REVERSE)
        self.planned("switchover", self.side_a, self.side_b, "--max-lag", str(int(self.args.rate * 10)), *extra)

    def step2(self) -> None:
        self.dwell(B)

    def step3(self) -> None:
        self.planned("failback", self.side_b, self.side_a)

    def step4(self) -> None:
        self.dwell(A)
        self.failover()

    def step5(self) -> None:
        self.dwell(B)
        self.planned("failback", self.side_b, self.side_a)

    # -- the end ------------------------------------------------------------------------------------------

    def settle(self) -> None:
        """Stop the producer; let the consumer read every acknowledged key (or the timeout)."""
        self.producer.stop.set()
        self.producer.thread.join(30)
        deadline = time.monotonic() + self.args.settle_timeout
        while time.monotonic() < deadline:
            if not set(self.producer.acked) - {r.key for r in self.consumer.reads}:
                break
            time.sleep(1.0)
        self.consumer.leave(drain=True, timeout=60)
        self.consumer.stop.set()


def queues_of(admin: Admin) -> list[MessageQueue]:
    route = admin.wait_for_route(TOPIC, timeout=30)
    return sorted(MessageQueue(TOPIC, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def write_config(out: Path, a: LocalCluster, b: LocalCluster, checkpoint_interval: float) -> Path:
    common: dict[str, Any] = {"topic": TOPIC, "trigger_interval": 1.0, "config_sync": {"enabled": False},
                              "retry_backoff_ms": 100, "retry_backoff_max_ms": 1000}
    groups = {"groups": {"explicit": [GROUP]}}
    return write_replicator_config(
        out / "replicator.yaml", source=(A, a.namesrv_addr), target=(B, b.namesrv_addr),
        heartbeat={"interval": 1.0},
        links={LINK: {**common, "checkpoints": {"interval": checkpoint_interval, **groups}},
               REVERSE: {**common, "source": B, "target": A, "checkpoints": {"enabled": False, **groups}}})


def prepare(args: argparse.Namespace, a: LocalCluster, b: LocalCluster) -> None:
    """The topic (``--queues`` per group of A, as many in all on B), the group and its retry topic (which the
    links replicate with the group), on both sides: what config sync would make, with it off."""
    for cluster, queues in ((a, args.queues), (b, args.queues * 2 // len(b.groups))):
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic(TOPIC, queues, cluster=cluster.name)
            admin.create_subscription_group({"groupName": GROUP}, cluster=cluster.name)
            admin.create_topic(f"{RETRY_GROUP_TOPIC_PREFIX}{GROUP}", 1, cluster=cluster.name)
            admin.wait_for_route(TOPIC, timeout=30)


def run(args: argparse.Namespace, out: Path) -> str:
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(LocalCluster(out, A, brokers=2))
        b = stack.enter_context(LocalCluster(out, B, brokers=args.b_groups))
        config = write_config(out, a, b, args.checkpoint_interval)
        log = Log(out / "drill.log", lambda: time.monotonic() - t0)
        t0 = time.monotonic()
        drill = Drill(args, out, a, b, config, log)
        stack.callback(drill.stop_jobs)
        prepare(args, a, b)
        log(f"clusters up: {A} {a.namesrv_addr} (2 broker groups), {B} {b.namesrv_addr} ({args.b_groups}); "
            f"starting the forward link's job")
        drill.start_forward()
        if not args.cold_reverse:
            drill.hold_reverse()
            drill.ensure_reverse()
        drill.warm_up()
        drill.producer.start()
        drill.consumer.start()
        drill.move(drill.side_a, "start")
        steps: list[Callable[[], None]] = [drill.step1, drill.step2, drill.step3, drill.step4, drill.step5]
        for n, step in enumerate(steps[:args.until], 1):
            log(f"-- step {n}")
            step()
        active = a if drill.consumer.stints[-1].side == A else b
        drill.settle()
        with Admin(active.namesrv_addr) as admin:
            queues = queues_of(admin)
        stored = read_topic(active.namesrv_addr, queues)
        drill.stop_jobs()
    on_active = [m.msg_id for msgs in stored.values() for m in msgs]
    t = tally(drill.producer.acked, on_active, drill.consumer.reads, drill.consumer.stints)
    x = rto(drill.fence_at["switchover"][0], drill.moved_to["switchover"][0]) if drill.moved_to["switchover"] \
        else None
    backs = [rto(f, s) for f, s in zip(drill.fence_at["failback"], drill.moved_to["failback"], strict=True)]
    y = max((v for v in backs if v is not None), default=None)
    log(f"acknowledged {t.acknowledged} (by side {_by_side(drill.producer.acked)}), failed sends "
        f"{dict(drill.producer.failed)}; read {len(drill.consumer.reads)}, consumer errors "
        f"{dict(drill.consumer.errors)}; {active.name} holds {len(on_active)}")
    log(f"read twice by move {dict(t.read_twice)}; failback rtos {backs}; failover bound (read in the "
        f"{args.checkpoint_interval:g} s before the kill) {drill.failover_bound}")
    if t.lost or t.gaps:
        log(f"lost e.g. {list(t.lost_sample)}; gaps e.g. {list(t.gap_sample)}")
    missed = missed_targets(x, y, drill.rpo, drill.recovered, t, drill.failover_bound, rto_target_s=RTO_TARGET_S)
    log("targets: " + ("all met" if not missed else "missed: " + "; ".join(missed)))
    log.close()
    return summary_line(x, y, drill.rpo, drill.recovered, t)


def _by_side(acked: Mapping[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for side in acked.values():
        counts[side] = counts.get(side, 0) + 1
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per second")
    parser.add_argument("--batch", type=int, default=10, help="messages per send")
    parser.add_argument("--body", type=int, default=128, help="message body bytes")
    parser.add_argument("--queues", type=int, default=4, help="queues per broker group of A")
    parser.add_argument("--b-groups", type=int, default=1, choices=(1, 2), help="broker groups of B")
    parser.add_argument("--dwell", type=float, default=30.0, help="seconds on a side between moves")
    parser.add_argument("--quick", action="store_true", help="a short run: --dwell 10")
    parser.add_argument("--cold-reverse", action="store_true",
                        help="switchover without --reverse: the reverse link's job started only at the first "
                             "failback's reopen, copying from B's first offset (the slow way)")
    parser.add_argument("--until", type=int, default=5, choices=range(1, 6), help="run steps 1..N")
    parser.add_argument("--checkpoint-interval", type=float, default=5.0,
                        help="seconds between the forward link's group checkpoints")
    parser.add_argument("--start-timeout", type=float, default=240.0, help="for the forward link's first copies")
    parser.add_argument("--settle-timeout", type=float, default=120.0,
                        help="at the end, the longest wait for the consumer to read every acknowledged key")
    parser.add_argument("--out", type=Path, help="directory for the log and the processes' output")
    args = parser.parse_args(argv)
    if args.quick:
        args.dwell = 10.0
    out = (args.out or Path("run") / f"dr-drill-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        line = run(args, out)
    except DrillError as exc:
        raise SystemExit(f"dr drill failed: {exc}") from exc
    with (out / "drill.log").open("a") as f:
        f.write(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
