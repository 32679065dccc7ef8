"""Spark as separate processes for the fault-tolerance tests: ``spark-submit jobs/replicate.py`` drivers,
a standalone master and worker, and the bookkeeping that kills every process they spawned.

Spark forks processes that leave the process group they were started in (``pyspark.daemon`` calls
``setpgid``; standalone executors are children of the worker). So every process started here carries
a unique ``RMQ_TEST_PROCESS_TAG`` in its environment, which children inherit, and ``kill`` SIGKILLs
the process group *and* every live process whose environment holds the tag. Nothing else is touched.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from broker_store.client import MessageQueue, Producer, PullConsumer, PullStatus, StoredMessage, new_message
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import RocketMQError
from connectors.core.offsets import SourceOffset
from connectors.core.spark_checkpoint import read_offset_log
from jobs import jvm_archive
from tests.support.processes import free_port
from tests.support.tcp_table import LISTEN, tcp_sockets

PROJECT_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SPARK_SUBMIT = VENV_BIN / "spark-submit"
SPARK_CLASS = VENV_BIN / "spark-class"
TAG_VARIABLE = "RMQ_TEST_PROCESS_TAG"


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment holds ``RMQ_TEST_PROCESS_TAG=<tag>`` (Linux /proc)."""
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_addresses(pids: Iterable[int]) -> set[str]:
    """TCP addresses the given processes listen on (state LISTEN in /proc/net/tcp and tcp6)."""
    inodes = set().union(*(_socket_inodes(p) for p in pids))
    return {address for inode, address in tcp_sockets(LISTEN).items() if str(inode) in inodes}


def non_loopback(addresses: Iterable[str]) -> list[str]:
    return sorted(a for a in addresses if not (a.startswith("127.") or a.startswith("::1:")
                                               or a.startswith("::ffff:127.")))


class TaggedProcess:
    """A command started in its own session with a unique tag; ``kill`` ends it and all it spawned."""

    def __init__(self, argv: Sequence[str], log_file: Path, env: Mapping[str, str] | None = None,
                 cwd: Path = PROJECT_ROOT) -> None:
        self.tag = uuid.uuid4().hex
        self.log_file = log_file
        full_env = {**os.environ, **(env or {}), TAG_VARIABLE: self.tag}
        with log_file.open("ab") as log:
            self.proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=full_env, cwd=cwd, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        return tagged_pids(self.tag)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the process group and every process carrying the tag; reap the leader."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for _ in range(50):
            left = [p for p in tagged_pids(self.tag) if p != os.getpid()]
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)


def spark_env(**extra: str) -> dict[str, str]:
    """Environment of spark-submit / spark-class children: this venv's Python, loopback only, the
    project (and its tests package, for failure hooks) importable."""
    paths = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost",
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), **extra}


LOOPBACK_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stopTimeout": "20s",
}


@functools.cache
def driver_archive_options() -> str:
    """The JVM class-data archive's driver options (jobs/jvm_archive.py), '' when there is none yet (one is then
    built in the background for the suite's later launches): every spark-submit driver here starts faster."""
    return jvm_archive.java_options_for_launch()


def submit_job(script: str, config: Path, log_file: Path, *, links: Sequence[str] = (), master: str = "local[2]",
               args: Sequence[str] = (), conf: Mapping[str, str] | None = None,
               env: Mapping[str, str] | None = None, job_log4j: bool = False) -> TaggedProcess:
    """``spark-submit jobs/<script> --config <config> --log-dir <log_file>.logs --link ... <args>`` as a tagged
    process; ``job_log4j``: with docs/replicator.md's ``--driver-java-options`` naming ``conf/log4j2.properties`` (the
    JVM's log in ``<log dir>/spark.log``, not on the console)."""
    argv = [str(SPARK_SUBMIT), "--master", master]
    for key, value in {**LOOPBACK_CONF, **(conf or {})}.items():
        argv += ["--conf", f"{key}={value}"]
    java_options = [driver_archive_options()] if "spark.driver.extraJavaOptions" not in (conf or {}) else []
    if job_log4j:
        java_options += [f"-Dlog4j2.configurationFile={PROJECT_ROOT / 'conf' / 'log4j2.properties'}",
                         f"-Dreplicator.log.dir={log_file.with_suffix('.logs')}"]
    if any(java_options):
        argv += ["--driver-java-options", " ".join(o for o in java_options if o)]
    argv += [str(PROJECT_ROOT / "jobs" / script), "--config", str(config),
             "--log-dir", str(log_file.with_suffix(".logs"))]
    for link in links:
        argv += ["--link", link]
    return TaggedProcess([*argv, *args], log_file, spark_env(**(env or {})))


def submit_replicate(config: Path, links: Sequence[str], log_file: Path, *, master: str = "local[2]",
                     available_now: bool = False, conf: Mapping[str, str] | None = None,
                     env: Mapping[str, str] | None = None) -> TaggedProcess:
    """``spark-submit jobs/replicate.py --config <config> --link ...`` as a tagged process."""
    return submit_job("replicate.py", config, log_file, links=links, master=master, conf=conf, env=env,
                      args=["--available-now"] if available_now else [])


def python_driver_pid(job: TaggedProcess, script: str) -> int:
    """The Python driver process of a ``spark-submit jobs/<script>`` job (the JVM's child running the script).
    Signal it, not the process group, to stop the job as the script does on SIGTERM / SIGINT: the JVM would
    start its own shutdown on the signal (stopping the SparkContext under the script's queries) and exit
    with the signal's status, whatever the script does."""
    for pid in job.pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and b"python" in os.path.basename(argv[0]) and argv[1].endswith(os.fsencode(script)):
            return pid
    raise AssertionError(f"no Python driver running {script} among {job.pids()}")


@dataclass
class StandaloneCluster:
    """A Spark standalone master and one worker on 127.0.0.1, started with pyspark's ``spark-class``."""

    work: Path
    worker_cores: int = 1
    worker_memory: str = "1g"
    master: TaggedProcess | None = None
    worker: TaggedProcess | None = None
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        # the master's REST submission server would take the fixed port 6066: not needed, off
        env = spark_env(SPARK_WORKER_DIR=str(self.work / "worker"), SPARK_LOG_DIR=str(self.work),
                        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self.master = TaggedProcess(
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.port), "--webui-port", str(free_port())], self.work / "master.log", env)
        self._await(self.master, "I have been elected leader", timeout)
        self.worker = TaggedProcess(
            [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
             "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(self.worker_cores),
             "--memory", self.worker_memory, "--work-dir", str(self.work / "worker")],
            self.work / "worker.log", env)
        self._await(self.worker, "Successfully registered with master", timeout)
        return self

    @staticmethod
    def _await(proc: TaggedProcess, line: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while line not in proc.log():
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{proc.log_file.name}: no {line!r}:\n{proc.log()[-3000:]}")
            time.sleep(0.2)

    def pids(self) -> list[int]:
        return [p for proc in (self.master, self.worker) if proc is not None for p in proc.pids()]

    def stop(self) -> None:
        for proc in (self.worker, self.master):
            if proc is not None:
                proc.kill()


def write_replicator_config(path: Path, *, source: tuple[str, str], target: tuple[str, str],
                            links: Mapping[str, Mapping[str, Any]], metrics_port: int = 0,
                            heartbeat: Mapping[str, Any] | None = None) -> Path:
    """replicator.yaml with clusters ``(name, namesrv)`` and links ``{name: {field: value}}``; each link
    gets explicit ``topics`` from its ``topic`` key and checkpoint/delta dirs next to ``path``. No metrics
    endpoint unless ``metrics_port`` is given (jobs of parallel tests would share the default port);
    ``heartbeat``: the config's heartbeat section (its checkpoint next to ``path``)."""
    work = path.parent
    entries = []
    for name, fields in links.items():
        extra = {k: v for k, v in fields.items() if k != "topic"}
        entries.append({"name": name, "source": source[0], "target": target[0],
                        "topics": {"explicit": [{"source": fields["topic"]}]},
                        "checkpoint_location": str(work / "checkpoints" / name),
                        "delta_location": str(work / "delta"), **extra})
    sections: dict[str, Any] = {"metrics": {"port": metrics_port}}
    if heartbeat is not None:
        sections["heartbeat"] = {"checkpoint_location": str(work / "checkpoints" / "heartbeat"), **heartbeat}
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": source[0], "namesrv": [source[1]]}, {"name": target[0], "namesrv": [target[1]]}],
        "links": entries, **sections}))
    return path


# -- test traffic ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Produced:
    """One message as the test producer sent it (what the target must hold)."""

    uniq_key: str
    queue: MessageQueue
    offset: int
    body: bytes
    properties: Mapping[str, str]
    """User properties plus TAGS / KEYS as given to ``new_message``."""


class BackgroundProducer:
    """Writes ``total`` random messages (binary bodies, tags, keys, user properties) to ``topic`` from a
    thread, in batches of ``batch`` to a random queue, at about ``rate`` messages per second;
    ``oversize`` maps a message index to a body size (messages the target will refuse).

    ``tolerate_failures`` (a source failing over under the load): a batch whose send raises is not
    acknowledged and not repeated (it may or may not be stored); ``failed`` counts such batches and
    ``acked_at`` holds the monotonic time of every acknowledged batch, so a test can tell when the source
    took writes again. ``stop()`` ends the load before ``total``."""

    def __init__(self, namesrv: str, topic: str, queues: Sequence[MessageQueue], total: int, *, rate: float,
                 seed: int, max_body: int = 512, batch: int = 50, oversize: Mapping[int, int] | None = None,
                 tolerate_failures: bool = False, send_timeout: float = 10) -> None:
        self.namesrv, self.topic, self.queues, self.total = namesrv, topic, list(queues), total
        self.rate, self.batch, self.max_body = rate, batch, max_body
        self.oversize = dict(oversize or {})
        self.tolerate_failures, self.send_timeout = tolerate_failures, send_timeout
        self.rng = random.Random(seed)
        self.sent: list[Produced] = []
        self.failed = 0
        self.acked_at: list[float] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the load after the batch in flight (``join`` still waits for it)."""
        self._stop.set()

    def join(self, timeout: float) -> list[Produced]:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"producer of {self.topic} still running after {timeout}s")
        if self.error is not None:
            raise AssertionError(f"producer of {self.topic} failed: {self.error!r}") from self.error
        return self.sent

    def _message(self, index: int) -> tuple[Any, dict[str, str]]:
        rng = self.rng
        size = self.oversize.get(index) or rng.randint(1, self.max_body)
        body = rng.randbytes(size)
        props = {f"p{j}": f"v{rng.randint(0, 10**6)}" for j in range(rng.randint(0, 3))}
        tags = rng.choice(["TagA", "TagB", "TagC", None])
        keys = [f"k{rng.randint(0, 9999)}", f"i{index}"]
        expected = dict(props)
        if tags:
            expected["TAGS"] = tags
        expected["KEYS"] = " ".join(keys)
        return new_message(self.topic, body, tags=tags, keys=keys, properties=props), expected

    def _run(self) -> None:
        started = time.monotonic()
        try:
            with Producer(self.namesrv, f"PID_TEST_{uuid.uuid4().hex[:8]}",
                          send_timeout=self.send_timeout) as producer:
                index = 0
                while index < self.total and not self._stop.is_set():
                    n = min(self.batch, self.total - index)
                    oversized = [i for i in range(index, index + n) if i in self.oversize]
                    if oversized:  # alone, so the batch cap of the producer does not hit its neighbours
                        n = 1 if oversized[0] == index else oversized[0] - index
                    pairs = [self._message(i) for i in range(index, index + n)]
                    mq = self.rng.choice(self.queues)
                    try:
                        result = producer.send_batch([m for m, _ in pairs], mq)
                    except RocketMQError:
                        if not self.tolerate_failures:
                            raise
                        self.failed += 1
                        index += n
                        time.sleep(0.05)
                        continue
                    self.acked_at.append(time.monotonic())
                    for k, ((message, expected), uniq) in enumerate(zip(pairs, result.msg_ids, strict=True)):
                        self.sent.append(Produced(uniq, result.message_queue, result.queue_offset + k,
                                                  message.body, expected))
                    index += n
                    ahead = index / self.rate - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join() on the test thread
            self.error = exc
        finally:
            self.done.set()


def read_topic(namesrv: str, queues: Sequence[MessageQueue], *, credentials: SessionCredentials | None = None,
               tls: TlsClientSettings | None = None) -> dict[MessageQueue, list[StoredMessage]]:
    """Every stored message of ``queues`` (from the min offset), in queue order (signed with ``credentials``
    and over ``tls`` when given)."""
    from broker_store.client import Admin

    out: dict[MessageQueue, list[StoredMessage]] = {}
    with Admin(namesrv, credentials=credentials, tls=tls) as admin, \
            PullConsumer(namesrv, f"CID_TEST_{uuid.uuid4().hex[:8]}", heartbeat_interval=None,
                         credentials=credentials, tls=tls) as consumer:
        for mq in queues:
            offset, end = admin.min_offset(mq), admin.max_offset(mq)
            messages: list[StoredMessage] = []
            while offset < end:
                result = consumer.pull(mq, offset, 256)
                if result.status is PullStatus.FOUND:
                    messages.extend(result.messages)
                elif result.status is not PullStatus.NO_MATCHED_MSG:
                    raise AssertionError(f"{mq}: {result.status} at {offset}")
                offset = result.next_begin_offset
            out[mq] = messages
    return out


USER_PROPERTY_IGNORED = frozenset({"UNIQ_KEY", "WAIT", "CLUSTER", "ROCKETMQ_REPLICATOR_SOURCE",
                                   "ROCKETMQ_REPLICATOR_POSITION"})


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in USER_PROPERTY_IGNORED}


@dataclass
class Comparison:
    """The target's copy of the produced messages, keyed by UNIQ_KEY."""

    missing: list[str]
    mismatched: list[str]
    unexpected: list[str]
    duplicates: dict[str, int]
    """UNIQ_KEY -> extra copies on the target."""

    @property
    def duplicate_count(self) -> int:
        return sum(self.duplicates.values())


def compare(produced: Iterable[Produced], target: Mapping[MessageQueue, list[StoredMessage]],
            skip: Callable[[Produced], bool] = lambda p: False) -> Comparison:
    """Check every produced message (except ``skip``) is on the target once or more, byte-exact with its
    user properties; return what is missing, different, unexpected and duplicated."""
    copies: dict[str, list[StoredMessage]] = {}
    for messages in target.values():
        for m in messages:
            copies.setdefault(m.msg_id, []).append(m)
    expected = {p.uniq_key: p for p in produced if not skip(p)}
    missing, mismatched = [], []
    for key, p in expected.items():
        found = copies.get(key)
        if not found:
            missing.append(key)
            continue
        for m in found:
            if m.body != p.body or user_properties(m.properties) != dict(p.properties):
                mismatched.append(key)
                break
    unexpected = sorted(k for k in copies if k not in expected)
    duplicates = {k: len(v) - 1 for k, v in copies.items() if len(v) > 1}
    return Comparison(missing, mismatched, unexpected, duplicates)


# -- checkpoint inspection ---------------------------------------------------------------------------

def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def committed_batches(checkpoint: Path) -> list[int]:
    return _batch_ids(checkpoint / "commits")


def in_flight_ranges(checkpoint: Path) -> dict[MessageQueue, tuple[int, int]]:
    """Source ranges ``[start, end)`` of the batch planned in the offset log but not committed (the
    batch a restart re-runs), or {} when every planned batch was committed."""
    planned, committed = _batch_ids(checkpoint / "offsets"), set(committed_batches(checkpoint))
    if not planned or planned[-1] in committed:
        return {}
    last = planned[-1]
    end = read_offset_log(str(checkpoint), last)
    start = read_offset_log(str(checkpoint), last - 1) if last > 0 else None
    assert end is not None, f"offsets/{last} of {checkpoint} does not parse"
    begin = start or SourceOffset.of({})
    return {q: (begin.get(q) or 0, n) for q, n in end.queues.items() if n > (begin.get(q) or 0)}


def console_noise(console: str) -> list[str]:
    """Lines of a job's console an operator should not see: stacks, and JVM / Python error dumps."""
    return [line for line in console.splitlines()
            if "Traceback" in line or line.startswith(("\tat ", "  File ", "org.apache", "py4j"))]


def assert_failed_in_one_line(rc: int, console: str, naming: str) -> None:
    """A job that failed as an operator should see it: exit code 1, and exactly one ERROR line on its console,
    containing ``naming``, with no stack or error dump beside it (the details are in the log directory)."""
    assert rc == 1, console
    errors = [line for line in console.splitlines() if " ERROR " in line]
    assert len(errors) == 1, console
    assert naming in errors[0], errors
    assert console_noise(console) == [], console


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, *, interval: float = 0.25,
             alive: TaggedProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if alive is not None and not alive.alive():
            raise AssertionError(f"{what}: the job exited ({alive.proc.returncode}):\n{alive.log()[-4000:]}")
        if time.monotonic() > deadline:
            tail = f":\n{alive.log()[-4000:]}" if alive is not None else ""
            raise AssertionError(f"{what}: not after {timeout}s{tail}")
        time.sleep(interval)
