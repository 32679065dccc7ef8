"""The driver JVM's class-data-sharing (CDS) archive: Spark's classes pre-parsed once, mapped by every launch.

``jobs.spark_session.build_spark`` adds ``java_options()`` to the driver JVM it launches and, when no archive
exists yet for the installed Spark and Java, starts ``build`` in the background (niced, after its own launch);
``make jvm-archive`` / ``python -m jobs.jvm_archive build`` build it up front; under spark-submit pass
``--driver-java-options "$(python -m jobs.jvm_archive options)"`` (docs/replicator.md, "Running the jobs").
A static archive (JDK 17: ``-XX:DumpLoadedClassList`` during one session, then ``java -Xshare:dump``) halves
the JVM's part of a launch (figures in benchmarks/MEASUREMENTS.md).

The JVM maps an archive only when its class path is the one the archive was dumped with and every jar on it
has the dumped size and mtime; otherwise it logs "shared class paths mismatch" and starts without. So an
archive is keyed by (``ArchiveKey``) the class path Spark's launcher builds (``launcher_class_path``), the size
and mtime of every file on it, ``java -version`` and the pyspark version: a changed jar, JDK or pyspark is a new
key (the old archive is stale and a new one gets built). Files in ``archive_dir()``, never in git::

    <key>.jsa        the archive (~190 MB), renamed into place only once complete and verified
    <key>.json       {"version": 1, "key": ..., "class_path": ..., "java_version": ..., "pyspark": ...}
    <key>.refused    one line: why this key's archive cannot be built or used (not retried; delete to retry)
    build.lock       held (flock) by the one builder at a time
    build.log        the last background build's output

Whatever goes wrong (no java, an unwritable directory, a refused archive) the job runs without an archive and
says so in one log line (``ArchiveDecision.note``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_store.durable_file import fsync_directory, replace_file

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Version of ``<key>.json`` and of the key's derivation (a change here makes every key new)."""
DIR_ENV = "RMQ_JVM_ARCHIVE_DIR"
"""Where archives live; default ``$XDG_CACHE_HOME/rocketmq-replicator/jvm-archive`` (``~/.cache/...``)."""
SWITCH_ENV = "RMQ_JVM_ARCHIVE"
"""``off`` (or ``0``, ``no``): never use nor build an archive."""
KEPT_ARCHIVES = 2
"""Archives of other keys (another venv, an older JDK) beyond this many, least recently used first, are
removed after a build: each is ~190 MB."""
BACKGROUND_DELAY = 30.0
"""Seconds a background build waits before it starts, so the job whose launch found no archive has its own start-up
(JVM, session, first batches) to itself."""
BUILD_TIMEOUT = 900.0
"""Seconds a build's session and dump may take together (niced on a busy machine: minutes)."""


def archive_dir(env: Mapping[str, str] | None = None) -> Path:
    """The archive directory (``DIR_ENV``, else the user's cache directory)."""
    env = os.environ if env is None else env
    if env.get(DIR_ENV):
        return Path(env[DIR_ENV])
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "rocketmq-replicator" / "jvm-archive"


def enabled(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(SWITCH_ENV, "").strip().lower() not in {"off", "0", "no", "false"}


def java_binary(env: Mapping[str, str] | None = None) -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH; None when absent."""
    env = os.environ if env is None else env
    if env.get("JAVA_HOME"):
        candidate = Path(env["JAVA_HOME"]) / "bin" / "java"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("java", path=env.get("PATH"))


def launcher_class_path(spark_home: Path, env: Mapping[str, str], extra_class_path: str = "") -> str | None:
    """The driver's ``-cp`` as Spark's launcher (``AbstractCommandBuilder.buildClassPath``) builds it: the
    driver's extra class path, the conf dir, ``slf4j-api-*.jar`` of the jars dir, ``<jars>/*``,
    HADOOP_CONF_DIR, YARN_CONF_DIR, SPARK_DIST_CLASSPATH, duplicates dropped. None for the launcher's
    developer modes (SPARK_PREPEND_CLASSES, SPARK_TESTING), which this does not predict. ``build`` checks the
    prediction against the launcher itself before dumping an archive for it."""
    if env.get("SPARK_PREPEND_CLASSES") or env.get("SPARK_TESTING") == "1":
        return None
    jars = spark_home / "jars"
    if not jars.is_dir():
        jars = spark_home / "assembly" / "target" / f"scala-{env.get('SPARK_SCALA_VERSION', '2.13')}" / "jars"
        if not jars.is_dir():
            return None
    entries: list[str] = []

    def add(value: str | None) -> None:
        for entry in (value or "").split(os.pathsep):
            if entry and entry not in entries:
                entries.append(entry)

    add(extra_class_path)
    add(env.get("SPARK_CONF_DIR") or str(spark_home / "conf"))
    add(os.pathsep.join(sorted(str(jars / n) for n in os.listdir(jars) if n.startswith("slf4j-api-"))))
    add(str(jars / "*"))
    add(env.get("HADOOP_CONF_DIR"))
    add(env.get("YARN_CONF_DIR"))
    add(env.get("SPARK_DIST_CLASSPATH"))
    return os.pathsep.join(entries)


def class_path_files(class_path: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every file the JVM would open from ``class_path`` (``dir/*`` expanded to the
    directory's jars, sorted); missing entries and directories are left out (the JVM checks only jars)."""
    found: list[tuple[str, int, int]] = []
    for entry in class_path.split(os.pathsep):
        if entry.endswith("*"):
            directory = Path(entry[:-1] or ".")
            names = sorted(n for n in os.listdir(directory) if n.lower().endswith(".jar")) \
                if directory.is_dir() else []
            paths = [directory / n for n in names]
        else:
            paths = [Path(entry)]
        for path in paths:
            with contextlib.suppress(OSError):
                st = path.stat()
                if path.is_file():
                    found.append((str(path), st.st_size, st.st_mtime_ns))
    return found


@dataclass(frozen=True)
class ArchiveKey:
    """What an archive is valid for; ``digest`` names its files."""

    class_path: str
    """The driver JVM's ``-cp`` (``launcher_class_path``)."""
    files: tuple[tuple[str, int, int], ...]
    """(path, size, mtime_ns) of every jar on it (``class_path_files``)."""
    java_version: str
    """``java -version``'s output."""
    pyspark: str
    """``pyspark.__version__``."""

    @property
    def digest(self) -> str:
        payload = json.dumps([FORMAT_VERSION, self.class_path, self.files, self.java_version, self.pyspark])
        return hashlib.sha256(payload.encode()).hexdigest()[:24]


def java_version(java: str) -> str | None:
    """``java -version``'s output (it goes to stderr), None when it does not run."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stderr.decode(errors="replace").strip() if done.returncode == 0 else None


def spark_home() -> Path:
    """SPARK_HOME as pyspark finds it (the installed package for a pip-installed pyspark)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


@dataclass(frozen=True)
class ArchiveDecision:
    """What a launch does about the archive."""

    options: str
    """Driver JVM options to add ('' for none)."""
    build: bool
    """No archive for this key yet: build one (in the background)."""
    note: str
    """One line for the log ('' when there is nothing to say)."""


def decide(directory: Path, key: ArchiveKey | None, why_no_key: str, *,
           writable: Callable[[Path], bool] = lambda d: os.access(d, os.W_OK)) -> ArchiveDecision:
    """The pure choice from what exists: ``<key>.jsa`` -> use it; ``<key>.refused`` -> go without (its reason);
    neither -> go without and build, if ``directory`` is writable. ``key`` None: no archive (``why_no_key``)."""
    if key is None:
        return ArchiveDecision("", False, f"JVM class-data archive not used: {why_no_key}")
    base = directory / key.digest
    refused = base.with_suffix(".refused")
    if refused.exists():
        reason = _read_line(refused)
        return ArchiveDecision("", False, f"JVM class-data archive not used: {reason} (delete {refused} to retry)")
    archive = base.with_suffix(".jsa")
    if archive.exists():
        return ArchiveDecision(archive_options(archive), False, "")
    existing = directory if directory.exists() else directory.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not writable(existing):
        return ArchiveDecision("", False, f"JVM class-data archive not used: {directory} is not writable")
    return ArchiveDecision("", True, f"JVM class-data archive: none yet for this Spark and Java, building one "
                                     f"in the background in {directory} (later launches use it)")


def archive_options(archive: Path) -> str:
    """The driver JVM options that map ``archive``. -Xshare:auto: a JVM that cannot map it starts without
    (``check_mapped`` notices); its "shared class paths mismatch" warnings are silenced (-Xlog:cds=off), the
    one line is ours."""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def _read_line(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip().splitlines()[0]
    except (OSError, IndexError):
        return "refused earlier"


def current_key(env: Mapping[str, str] | None = None, extra_class_path: str = "") -> tuple[ArchiveKey | None, str]:
    """This machine's key, or None and why there is none."""
    env = os.environ if env is None else env
    java = java_binary(env)
    if java is None:
        return None, "no java (JAVA_HOME/bin/java or java on PATH)"
    version = java_version(java)
    if version is None:
        return None, f"{java} -version failed"
    import pyspark

    home = spark_home()
    class_path = launcher_class_path(home, env, extra_class_path)
    if class_path is None:
        return None, f"cannot predict the class path of Spark's launcher for {home} (developer mode?)"
    return ArchiveKey(class_path, tuple(class_path_files(class_path)), version, pyspark.__version__), ""


_noted: set[str] = set()


def java_options_for_launch(env: Mapping[str, str] | None = None, *, start_build: bool = True,
                            extra_class_path: str = "") -> str:
    """The options a driver JVM about to be launched should get ('' when none), the decision's note logged once
    per process, and with ``start_build`` a background ``build`` started when one is due."""
    env = os.environ if env is None else env
    if not enabled(env):
        return ""
    directory = archive_dir(env)
    key, why = current_key(env, extra_class_path)
    decision = decide(directory, key, why)
    if decision.note and decision.note not in _noted:
        _noted.add(decision.note)
        log.info("%s", decision.note)
    if decision.build and start_build:
        start_background_build(directory)
    if decision.options:
        with contextlib.suppress(OSError):  # least recently used archives are the ones pruned
            os.utime(directory / f"{key.digest}.jsa" if key else directory)
    return decision.options


def start_background_build(directory: Path) -> None:
    """``python -m jobs.jvm_archive build`` detached, at nice 19 and after ``BACKGROUND_DELAY``, so the job it
    follows keeps the cores while it starts; its output in ``<directory>/build.log``. A builder already running
    (``build.lock``) makes it exit."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        out = (directory / "build.log").open("ab")
    except OSError as exc:
        log.info("JVM class-data archive not built: %s", exc)
        return
    with out:
        project = str(Path(__file__).resolve().parents[1])
        paths = [project, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), DIR_ENV: str(directory)}
        for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):  # its own JVM, not spark-submit's
            env.pop(name, None)
        subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "jobs.jvm_archive", "build",
                          "--delay", str(BACKGROUND_DELAY)],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True, close_fds=True)


def check_mapped(vm_info: str, options: str) -> str:
    """The one line to log when the driver JVM was given the archive (``options``) but does not share
    (``java.vm.info`` lacks "sharing": a static archive that fails to map leaves the JVM without any); ''
    otherwise."""
    if not options or "sharing" in vm_info:
        return ""
    return f"JVM class-data archive not used: the driver JVM did not map it ({vm_info!r})"


# -- building --------------------------------------------------------------------------------------------

def launcher_command(java: str, home: Path, env: Mapping[str, str]) -> list[str]:
    """The driver command Spark's launcher prints for spark-submit (what ``bin/spark-class`` executes)."""
    # what bin/spark-class and bin/load-spark-env.sh export before they run the launcher
    launch_env = {"SPARK_SCALA_VERSION": "2.13", "SPARK_CONF_DIR": str(home / "conf"), **env,
                  "SPARK_HOME": str(home)}
    done = subprocess.run([java, "-Xmx128m", "-cp", str(home / "jars" / "*"), "org.apache.spark.launcher.Main",
                           "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"],
                          capture_output=True, timeout=120, check=False, env=launch_env)
    if done.returncode != 0:
        raise BuildRefused(f"Spark's launcher failed ({done.returncode}): {_last_line(done.stderr)}")
    return [a.decode() for a in done.stdout.split(b"\0") if a]


CLASS_LIST_SESSION = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("jvm-archive-class-list")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.extraJavaOptions", "-XX:DumpLoadedClassList=" + sys.argv[1]).getOrCreate())
spark.range(100).selectExpr("id % 3 AS k").groupBy("k").count().collect()
query = spark.readStream.format("rate").load().writeStream.format("noop").start()
deadline = time.monotonic() + 120
while query.lastProgress is None and time.monotonic() < deadline:
    time.sleep(0.2)
query.stop()
spark.stop()
"""
"""One short session (batch and streaming) whose driver writes the classes it loaded: the archive's contents."""


class BuildRefused(Exception):
    """The archive cannot be built or used for this key; the message is the ``.refused`` line."""


def build(directory: Path, env: Mapping[str, str] | None = None) -> Path | None:
    """Build this key's archive unless it exists or another builder holds ``build.lock``; the archive's path,
    or None when nothing was built. The dump goes to a temporary file renamed into place only when the JVM
    has mapped it with -Xshare:on (which refuses a mismatch), so a concurrent launch sees the whole archive
    or none. A refusal writes ``<key>.refused``; an interrupted or failed build (a timeout, a crash) leaves
    nothing, and the next launch tries again."""
    env = dict(os.environ if env is None else env)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "build.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        remove_leftovers(directory)
        key, why = current_key(env)
        if key is None:
            raise BuildRefused(why)
        base = directory / key.digest
        if base.with_suffix(".jsa").exists() or base.with_suffix(".refused").exists():
            return None
        try:
            archive = _build_locked(directory, key, env)
        except BuildRefused as exc:
            replace_file(base.with_suffix(".refused"), f"{exc}\n".encode())
            raise
        prune(directory, keep=KEPT_ARCHIVES)
        return archive


def _build_locked(directory: Path, key: ArchiveKey, env: dict[str, str]) -> Path:
    java = java_binary(env)
    assert java is not None
    command = launcher_command(java, spark_home(), env)
    actual = command[command.index("-cp") + 1] if "-cp" in command else ""
    if actual != key.class_path:
        raise BuildRefused(f"Spark's launcher builds the class path {actual!r}, not the predicted "
                           f"{key.class_path!r}")
    with tempfile.TemporaryDirectory(dir=directory, prefix=BUILD_PREFIX) as work:
        class_list = Path(work) / "classes.list"
        started = time.monotonic()
        session = subprocess.run([sys.executable, "-c", CLASS_LIST_SESSION, str(class_list)], env=env,
                                 capture_output=True, timeout=BUILD_TIMEOUT, check=False)
        if session.returncode != 0 or not class_list.exists():
            raise RuntimeError(f"the class-list session failed ({session.returncode}): "
                               f"{session.stderr.decode(errors='replace')[-2000:]}")
        dumped = Path(work) / "archive.jsa"
        dump = subprocess.run([java, "-Xshare:dump", f"-XX:SharedClassListFile={class_list}",
                               f"-XX:SharedArchiveFile={dumped}", "-cp", key.class_path],
                              capture_output=True, timeout=BUILD_TIMEOUT, check=False)
        if dump.returncode != 0 or not dumped.exists():
            raise BuildRefused(f"java -Xshare:dump failed ({dump.returncode}): "
                               f"{_last_line(dump.stdout + dump.stderr)}")
        check = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={dumped}", "-cp", key.class_path,
                                "-version"], capture_output=True, timeout=120, check=False)
        if check.returncode != 0:
            raise BuildRefused(f"the JVM refuses the archive it dumped: {_last_line(check.stdout + check.stderr)}")
        meta = {"version": FORMAT_VERSION, "key": key.digest, "class_path": key.class_path,
                "java_version": key.java_version, "pyspark": key.pyspark, "classes": _count_lines(class_list),
                "build_seconds": round(time.monotonic() - started, 1)}
        replace_file(directory / f"{key.digest}.json", json.dumps(meta, indent=2).encode())
        archive = directory / f"{key.digest}.jsa"
        os.replace(dumped, archive)
        fsync_directory(directory)
        return archive


def _last_line(output: bytes) -> str:
    lines = [line for line in output.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


BUILD_PREFIX = "build-"
"""A build's temporary directory in ``archive_dir()``: ``<prefix><random>``."""


def remove_leftovers(directory: Path) -> list[Path]:
    """Remove the temporary directories of builds that were killed (a job's whole process group or cgroup killed
    with the background builder in it: its class list, or a partly dumped ~190 MB archive); the removed. Called by
    the holder of ``build.lock``, so no build of this directory is running."""
    removed = [d for d in directory.glob(f"{BUILD_PREFIX}*") if d.is_dir()]
    for leftover in removed:
        shutil.rmtree(leftover, ignore_errors=True)
    return removed


def prune(directory: Path, keep: int) -> list[Path]:
    """Remove the archives (and their ``.json``) beyond the ``keep`` most recently used (mtime); the removed."""
    archives = sorted(directory.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    removed = archives[keep:]
    for archive in removed:
        with contextlib.suppress(OSError):
            archive.unlink()
            archive.with_suffix(".json").unlink()
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.jvm_archive", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "options", "path"],
                        help="build: build the archive now unless it exists; options: print the driver JVM "
                             "options that use it ('' when there is none yet); path: print its directory")
    parser.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                        help="build: wait this long first (a background build leaves a starting job the cores)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    directory = archive_dir()
    if args.command == "path":
        print(directory)
        return 0
    if args.command == "options":
        print(java_options_for_launch(start_build=False))
        return 0
    if not enabled():
        log.info("JVM class-data archive: off (%s)", SWITCH_ENV)
        return 0
    time.sleep(max(0.0, args.delay))
    try:
        archive = build(directory)
    except BuildRefused as exc:
        log.warning("JVM class-data archive not built: %s", exc)
        return 1
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log.warning("JVM class-data archive not built: %s", exc)
        return 1
    log.info("JVM class-data archive: %s", archive or f"up to date (or being built) in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
