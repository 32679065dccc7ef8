"""`make demo`: the replicator's main job end to end on two local clusters, then a summary, then everything
stopped.

1. `python -m broker_store up --config conf/cluster-local.yaml` as a child (stores in a temporary dir).
2. Create the topics the link names (`Orders`, `Payments`, `OrdersEU`, `OrdersUS`) on the source only, and
   start the main job, `jobs/run_all.py`, on local Spark for the `source-to-target` link of
   conf/replicator.yaml (checkpoint and Delta dirs moved into the temporary dir, a free metrics port, the
   demo's short intervals): replication, heartbeat, checkpoints and config sync. Config sync creates the
   topics on the target (`Payments` as `PaymentsReplica`, the link's rename, `OrdersEU` and `OrdersUS` into
   `OrdersGlobal`).
3. Produce a sample load to `Orders` while a consumer group (`DEMO_GROUP`) reads part of it and stops, and
   print the live lag table of `jobs.lag` (from the job's Prometheus endpoint) every few seconds.
4. Once the load is through: the summary (messages replicated and byte-exact, heartbeat lag p50/p99, the
   group's translated offsets and a consumer on the target finishing the topic with nothing missed or
   repeated, the topics config sync created), then SIGTERM to the job and the clusters.

Bounded by default (about a minute after start-up); `--forever` produces until Ctrl-C, then the summary.
Exit code 0 when every check of the summary holds, 1 otherwise.

`--failover` (`make demo DEMO_ARGS=--failover`): the source cluster runs in controller mode instead (a name
server with the embedded controller and one group of three brokers, ``jobs.demo_failover``; `up` starts it
with the other clusters), the producer keeps going through failed sends, and its primary is killed with SIGKILL once,
`--kill-after` seconds into the load (after the consumer stopped). The summary adds
`failover: election X s, N missing`: the time from the kill to the first acknowledged send, and the
acknowledged messages not on the target (0 is the check; copies re-sent across the failover are counted).

`--dr` (`make demo DEMO_ARGS=--dr`, ``jobs.demo_dr``): a planned switchover to the target and a failback to the
source with the runbook's ``python -m jobs.dr`` commands while an application produces and consumes, then checks by
key: nothing acknowledged lost, nothing missed, nothing read twice.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from rich.console import Console

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.config import LocalClustersConfig, load_yaml
from broker_store.deploy.launcher import free_port, poll_until
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.tables import CheckpointTables
from connectors.core.config import load_replicator_config
from connectors.core.topic_mapping import TopicMapper
from jobs import demo_report
from jobs.demo_failover import ControlledSource, Nemesis, controlled_clusters, election_seconds
from jobs.lag import EndpointUnreachableError, link_lags, render, scrape

TOPIC = "Orders"
LINK = "source-to-target"
GROUP = "DEMO_GROUP"
REPLICATOR_CONFIG = Path(__file__).resolve().parents[1] / "conf" / "replicator.yaml"
"""The example config the demo runs (with ``DEMO_INTERVALS``); it shows the production defaults."""
DEMO_INTERVALS = {"trigger_interval": 1.0, "checkpoints": 2.0, "config_sync": 2.0, "heartbeat": 1.0}
"""Seconds; the demo's own, not the example config's (defaults 5, 5, 10 and RIP-45's 10): a bounded run of
about a minute must show the heartbeat lag, a translated checkpoint and the topics config sync created."""


CLUSTERS_LOG = "clusters.log"
"""The name servers' and brokers' log (``up``'s stderr) in the demo's ``logs`` directory, beside the job's: the
demo's console carries only its own lines."""


def start_clusters(config: Path, data_dir: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """``up`` for ``config`` with its stores under ``data_dir``, its log in ``data_dir/logs/clusters.log``."""
    log_path = data_dir / "logs" / CLUSTERS_LOG
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # own session: a Ctrl-C of --forever reaches the demo, which then stops the children in order
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "broker_store", "up", "--config", str(config),
                                 "--data-dir", str(data_dir), "--run-dir", str(data_dir / "run")],
                                stdout=subprocess.PIPE, stderr=log_file, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.wait(10)
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-20:])
        raise SystemExit(f"{tail}local clusters did not start (exit {proc.returncode}; their log: {log_path}); is "
                         f"something already listening on the ports of {config}?")
    return proc, line.split()[1:]


def write_config(workdir: Path, port: int, namesrvs: dict[str, str]) -> Path:
    """``REPLICATOR_CONFIG`` with the Spark checkpoints and Delta tables under ``workdir``, metrics on ``port``,
    each cluster's name server as the clusters actually started (cluster name -> address) and the demo's
    short ``DEMO_INTERVALS``."""
    config = yaml.safe_load(REPLICATOR_CONFIG.read_text())
    for cluster in config["clusters"]:
        if cluster["name"] in namesrvs:
            cluster["namesrv"] = [namesrvs[cluster["name"]]]
    for link in config["links"]:
        link["checkpoint_location"] = str(workdir / "checkpoints" / link["name"])
        link["delta_location"] = str(workdir / "delta")
        link["trigger_interval"] = DEMO_INTERVALS["trigger_interval"]
        for connector in ("checkpoints", "config_sync"):
            link.setdefault(connector, {})["interval"] = DEMO_INTERVALS[connector]
    config["heartbeat"]["checkpoint_location"] = str(workdir / "checkpoints" / "heartbeat")
    config["heartbeat"]["interval"] = DEMO_INTERVALS["heartbeat"]
    config["metrics"]["port"] = port
    path = workdir / "replicator.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def named_topics(config: Path) -> list[str]:
    """The source topics LINK names one by one: the demo creates them all, since a named topic the source
    lacks is a WARNING at every start of the job (probably a typo, in production)."""
    return sorted(TopicMapper(load_replicator_config(config).link(LINK).topics).explicit_topics)


class LoadProducer(threading.Thread):
    """Sends 1 KiB messages to TOPIC at ``rate`` per second, until ``total`` (None: until ``stop``).

    ``tolerate_failures`` (``--failover``): a batch whose send raises is not acknowledged and not repeated;
    its bodies go to ``unacknowledged`` (the dying primary may have stored them), and ``acked`` keeps the
    (started, acknowledged) monotonic times of every acknowledged batch, from which the election is timed."""

    def __init__(self, namesrv: str, rate: float, total: int | None, *, tolerate_failures: bool = False) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self.namesrv, self.rate, self.total = namesrv, rate, total
        self.tolerate_failures = tolerate_failures
        self.sent: dict[str, bytes] = {}
        self.unacknowledged: set[bytes] = set()
        self.acked: list[tuple[float, float]] = []
        self.failed_sends = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        started, i = time.monotonic(), 0
        try:
            with Producer(self.namesrv, "DEMO_PRODUCER") as producer:
                while not self.stop.is_set() and (self.total is None or i < self.total):
                    count = 50 if self.total is None else min(50, self.total - i)
                    batch = [new_message(TOPIC, os.urandom(1024), tags=("TagA", "TagB")[n % 2], keys=f"order-{n}",
                                         properties={"demo-seq": str(n)}) for n in range(i, i + count)]
                    sending = time.monotonic()
                    try:
                        result = producer.send_batch(batch)
                        self.acked.append((sending, time.monotonic()))
                        self.sent.update(zip(result.msg_ids, (m.body for m in batch), strict=True))
                    except RocketMQError:
                        if not self.tolerate_failures:
                            raise
                        self.failed_sends += 1
                        self.unacknowledged.update(m.body for m in batch)
                    i += count
                    self.stop.wait(max(0.0, started + i / self.rate - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


class PartialConsumer(threading.Thread):
    """GROUP reads TOPIC on the source for ``seconds`` (at most ``limit`` messages), commits, and stops.
    No client heartbeat: the group is never online, so the checkpoint connector may move it on the target."""

    def __init__(self, namesrv: str, seconds: float, limit: int) -> None:
        super().__init__(name="demo-consumer", daemon=True)
        self.namesrv, self.seconds, self.limit = namesrv, seconds, limit
        self.read: list[str] = []
        self.stopped_ms = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        try:
            with Admin(self.namesrv) as admin, PullConsumer(self.namesrv, GROUP, heartbeat_interval=None) as consumer:
                queues = demo_report.queues_of(admin, TOPIC)
                offsets: dict[MessageQueue, int] = dict.fromkeys(queues, 0)
                while time.monotonic() < deadline and len(self.read) < self.limit:
                    for mq in queues:
                        want = min(32, self.limit - len(self.read))
                        if want <= 0:
                            break
                        result = consumer.pull(mq, offsets[mq], want)
                        if result.status is PullStatus.FOUND:
                            self.read.extend(m.msg_id for m in result.messages)
                            offsets[mq] = result.next_begin_offset
                    for mq, offset in offsets.items():
                        consumer.update_consumer_offset(mq, offset)
                    time.sleep(0.5)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        self.stopped_ms = int(time.time() * 1000)


def show_lag(console: Console, url: str, threshold: float) -> None:
    try:
        rows = link_lags(scrape(url, 2), [LINK], lagging_threshold_s=threshold)
        console.print(render(rows, url, None))
    except EndpointUnreachableError as exc:
        console.print(f"lag table: endpoint not answering yet ({exc})")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, job: subprocess.Popen[bytes]) -> None:
    """``launcher.poll_until`` that also stops waiting when the main job exits (SystemExit naming it); a
    timeout is a failed demo check."""
    def done() -> bool:
        if predicate():
            return True
        if job.poll() is not None:
            raise SystemExit(f"the main job exited (code {job.returncode}) while waiting for {what}")
        return False

    try:
        poll_until(done, timeout, what, interval=0.5)
    except TimeoutError as exc:
        raise demo_report.DemoCheckError(str(exc)) from exc


LAG_TABLE_EVERY = 4.0
"""Seconds between two lag tables while the load runs."""


def run_load(producer: LoadProducer, consumer: PartialConsumer, show: Callable[[], None], *,
             every: float = LAG_TABLE_EVERY) -> bool:
    """The load phase: start ``producer`` and ``consumer``, ``show`` the lag table every ``every`` seconds while
    the producer runs (bounded: until its total is sent; ``--forever``: it has no total, so until Ctrl-C), then
    stop and join both. True when Ctrl-C ended it; the caller goes on to the summary either way.
    SystemExit when one of them failed."""
    producer.start()
    consumer.start()
    interrupted = False
    try:
        while producer.is_alive():
            time.sleep(every)
            show()
    except KeyboardInterrupt:
        interrupted = True
        print("Ctrl-C: stopping the load, then the summary", flush=True)
    producer.stop.set()
    producer.join()
    consumer.join()
    for thread in (producer, consumer):
        if thread.error is not None:
            raise SystemExit(f"{thread.name} failed: {thread.error}")
    return interrupted


def create_source_topics(source: str, config: Path) -> None:
    """The topics LINK names, on the source only: config sync creates them on the target."""
    with Admin(source) as admin:
        for topic in named_topics(config):
            admin.create_topic(topic, 2)
            admin.wait_for_route(topic)


def start_job(script: str, config: Path, link: str, log_dir: Path, *extra: str,
              console_level: str = "WARNING") -> subprocess.Popen[bytes]:
    """``python jobs/<script> --config <config> --link <link>`` on local Spark, printed first; its console at
    ``console_level``, its logs (INFO and up) in ``log_dir``. In a session of its own: a Ctrl-C reaches the demo,
    which stops it."""
    print(f"running: python jobs/{script} --config {config} --link {link}{''.join(f' {e}' for e in extra)}  "
          f"(logs: {log_dir})", flush=True)
    return subprocess.Popen([sys.executable, f"jobs/{script}", "--config", str(config), "--link", link, *extra,
                             "--log-level", console_level, "--log-dir", str(log_dir)], start_new_session=True)


def stop_job(job: subprocess.Popen[bytes], timeout: float = 120.0) -> int:
    """SIGTERM (the job stops its queries cleanly), SIGKILL after ``timeout`` s; the exit code."""
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
    try:
        return job.wait(timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        return job.wait()


def run_demo(namesrvs: dict[str, str], workdir: Path, *, forever: bool, rate: float, seconds: float,
             failover: ControlledSource | None = None, kill_after: float = 0.0) -> int:
    """The demo on running clusters (name server by cluster name); ``failover``: the controller-mode source
    cluster whose primary is killed ``kill_after`` seconds into the load."""
    source, target = namesrvs["source"], namesrvs["target"]
    port = free_port()
    config = write_config(workdir, port, namesrvs)
    create_source_topics(source, config)
    url = f"http://127.0.0.1:{port}/metrics"
    lagging = load_replicator_config(config).heartbeat.lagging_threshold
    started = time.monotonic()
    job = start_job("run_all.py", config, LINK, workdir / "logs")
    console = Console(width=None if sys.stdout.isatty() else 110)  # a pipe or a log file: room for every column
    ok = False
    try:
        with Admin(target) as admin:
            def created() -> bool:
                return TOPIC in admin.topic_list()
            wait_until(created, 120, f"config sync to create {TOPIC} on the target", job)
        print(f"main job up; {TOPIC} created on the target by config sync {time.monotonic() - started:.1f}s after "
              f"start-up (Spark included)")
        producer = LoadProducer(source, rate, None if forever else int(rate * seconds),
                                tolerate_failures=failover is not None)
        consumer = PartialConsumer(source, seconds / 2, int(rate * seconds / 2))
        print(f"producing 1 KiB messages to {TOPIC} at {rate:.0f} msg/s "
              f"({'until Ctrl-C' if forever else f'{seconds:.0f} s'}); {GROUP} reads part of them on the source")
        nemesis = Nemesis(failover, kill_after) if failover is not None else None
        if nemesis is not None:
            print(f"failover: the source primary is killed {kill_after:.0f} s into the load")
            nemesis.start()
        try:
            run_load(producer, consumer, lambda: show_lag(console, url, lagging))
        finally:
            if nemesis is not None:
                nemesis.stop.set()
                nemesis.join()
        sent = producer.sent
        not_acked = f" ({producer.failed_sends} batch(es) not acknowledged)" if producer.failed_sends else ""
        print(f"produced {len(sent)} messages{not_acked}; {GROUP} read {len(consumer.read)} of them on the source "
              f"and stopped")
        with Admin(target) as admin:
            def replicated() -> bool:
                return sum(admin.max_offset(mq) for mq in demo_report.queues_of(admin, TOPIC)) >= len(sent)
            wait_until(replicated, 120, "the load on the target", job)
        tables = workdir / "delta" / LINK
        checkpoints = CheckpointTables(tables)
        wait_until(lambda: (checkpoints.newest_translated_ms(GROUP) or 0) > consumer.stopped_ms, 60,
                   f"a checkpoint of {GROUP} after it stopped", job)
        show_lag(console, url, lagging)
        print("summary:")
        copy = demo_report.check_copy(target, TOPIC, sent, tables, maybe_stored=frozenset(producer.unacknowledged),
                                      repeats_allowed=nemesis is not None)
        if nemesis is not None:
            failover_summary(nemesis, producer, copy)
        demo_report.heartbeat_summary(tables)
        demo_report.translated_offsets(tables, GROUP)
        demo_report.finish_on_target(target, GROUP, TOPIC, consumer.read, sent, repeats_allowed=nemesis is not None)
        demo_report.created_topics(tables)
        ok = True
    except demo_report.DemoCheckError as exc:
        print(f"demo check failed: {exc}")
    finally:
        code = stop_job(job)
        print(f"stopped the main job (exit {code}) {time.monotonic() - started:.0f}s after its start")
    return 0 if ok and code == 0 else 1


def failover_summary(nemesis: Nemesis, producer: LoadProducer, copy: demo_report.CopyCheck) -> None:
    """The summary's failover line: election time and acknowledged messages missing on the target."""
    if nemesis.error is not None:
        raise demo_report.DemoCheckError(f"failover: {nemesis.error}")
    if nemesis.killed_at is None or nemesis.killed is None:
        raise demo_report.DemoCheckError("failover: the load ended before the source primary was killed "
                                         "(a longer --seconds or a shorter --kill-after)")
    election = election_seconds(nemesis.killed_at, producer.acked)
    if election is None:
        raise demo_report.DemoCheckError("failover: no send was acknowledged after the source primary was killed")
    new = nemesis.new_primary.name if nemesis.new_primary is not None else "?"
    print(f"  failover: election {election:.1f} s, {copy.missing} missing (source primary {nemesis.killed.name} "
          f"killed with SIGKILL, {new} listed as primary {nemesis.listed_after or 0:.2f} s later; "
          f"{producer.failed_sends} send(s) not acknowledged, {copy.unacknowledged} of their messages stored anyway "
          f"and replicated; {copy.repeated} extra copies from re-sent batches)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/cluster-local.yaml"))
    parser.add_argument("--forever", action="store_true", help="produce until Ctrl-C, then the summary")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second of the sample load")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the bounded load")
    parser.add_argument("--failover", action="store_true",
                        help="run the source cluster in controller mode and kill its primary once under the load")
    parser.add_argument("--kill-after", type=float, default=None,
                        help="with --failover: seconds into the load before the kill (default: 0.6 x --seconds)")
    parser.add_argument("--dr", action="store_true",
                        help="a planned switchover to the target and a failback with python -m jobs.dr while an "
                             "application produces and consumes, then checks by key (jobs/demo_dr.py)")
    args = parser.parse_args(argv)
    if args.dr and (args.forever or args.failover):
        parser.error("--dr runs on its own: not with --forever or --failover")
    clusters = load_yaml(args.config, LocalClustersConfig)
    kill_after = args.kill_after if args.kill_after is not None else 0.6 * args.seconds
    with tempfile.TemporaryDirectory(prefix="rmq-demo-") as tmp:
        failover: ControlledSource | None = None
        config = args.config
        if args.failover:
            # the source cluster in controller mode (jobs.demo_failover), started by `up` with the others
            clusters = controlled_clusters(clusters)
            config = Path(tmp) / "clusters-failover.yaml"
            config.write_text(yaml.safe_dump(clusters.model_dump(mode="json", exclude_unset=True), sort_keys=False))
            failover = ControlledSource(clusters, Path(tmp) / "run")
        proc, namesrvs = start_clusters(config, Path(tmp))
        try:
            print("local clusters up: " + ", ".join(f"{c.name}={addr}" for c, addr in zip(
                clusters.clusters, namesrvs, strict=True)) + f"  (logs: {Path(tmp) / 'logs' / CLUSTERS_LOG})")
            if failover is not None:
                print(f"source cluster up in controller mode: {failover.namesrv_addr} (embedded controller), group "
                      f"{', '.join(b.listen for b in failover.brokers)}")
            by_name = {c.name: addr for c, addr in zip(clusters.clusters, namesrvs, strict=True)}
            if args.dr:
                from jobs.demo_dr import run_dr_demo  # imports this module, and the application from benchmarks/

                return run_dr_demo(by_name, Path(tmp), rate=args.rate, seconds=args.seconds)
            return run_demo(by_name, Path(tmp), forever=args.forever, rate=args.rate, seconds=args.seconds,
                            failover=failover, kill_after=kill_after)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            print(f"stopped the local clusters (exit {proc.returncode})")

if __name__ == "__main__":
    raise SystemExit(main())
