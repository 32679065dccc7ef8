"""What a replicator job prints and where its details go: short lines on the console, everything in a log dir.

Used by the spark-submit entry points (``jobs/replicate.py`` and the jobs after it). An operator reads
the console; a developer reads the log files. So:

* console (stderr): one line per event, never a traceback (``connectors.core.driver_log`` owns the Python
  side, for the job and for the Python workers Spark starts); a failing link says
  ``link <name> failed: <reason>`` (``failure_line``), the reason being the error our code raised (which
  names the cluster and the address), not the Python/JVM stack it travelled through.
* ``<log dir>/replicator.log``: the Python log of the job and its workers, with every traceback.
* ``<log dir>/spark.log``: the Spark JVM's log4j output (``spark_java_options`` points log4j at a
  configuration in ``conf/log4j2.properties``); only FATAL reaches the console from the JVM, so
  Spark's own ERROR lines and stacks for a failed or stopped query stay in the file.
* ``<log dir>/spark-console.log``: when the job launches its driver JVM (the ``python jobs/...`` launch), the
  JDK launcher's and Spark's start-up notices ("Using incubator modules", "Setting default log level"), which
  log4j does not route and which would otherwise interleave with the job's console lines (and the demo's
  output). The rest of the JVM's stdout and stderr still reaches the console: the Python workers it forks write
  there (the sink's batch lines, their tracebacks), as do the FATAL lines of the console appender.
* both logs roll by size (``--log-file-mb``, ``--log-files``: ``connectors.core.driver_log.LogRotation``), so a job
  running for months keeps a bounded amount of log on disk.

Runs on the driver only.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from connectors.core import driver_log
from connectors.core.disk_full import DiskFull, find_disk_full
from connectors.core.driver_log import LOG_ROTATION_ENV, PYTHON_LOG, LogRotation

SPARK_LOG = "spark.log"
JVM_CONSOLE_LOG = "spark-console.log"
LOG4J_CONFIG = "log4j2.properties"
__all__ = ["PYTHON_LOG", "SPARK_LOG", "JVM_CONSOLE_LOG", "LOG4J_CONFIG", "LOG4J_PROPERTIES", "setup",
           "spark_java_options", "add_rotation_arguments", "rotation_of", "failure_reason", "failure_line",
           "disk_full_reason", "full_locations"]
MIB = 1024 * 1024

LOG4J_PROPERTIES = Path(__file__).resolve().parents[1] / "conf" / LOG4J_CONFIG
"""The driver JVM's log4j2 configuration (console: FATAL only; ``${sys:replicator.log.dir}/spark.log``: the
rest). One file for both launches: ``spark_java_options`` names it to a JVM this job launches, and the
spark-submit command of docs/replicator.md names it with ``--driver-java-options``."""


def add_rotation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-file-mb`` / ``--log-files``: how ``replicator.log`` and ``spark.log`` roll (``rotation_of``)."""
    default = LogRotation()
    parser.add_argument("--log-file-mb", type=int, default=default.max_bytes // MIB,
                        help="replicator.log and spark.log each roll at this size, in MiB (default %(default)s)")
    parser.add_argument("--log-files", type=int, default=default.older_files,
                        help="rolled files kept of each (<name>.1 newest; default %(default)s)")


def rotation_of(args: argparse.Namespace) -> LogRotation:
    """The ``LogRotation`` of a job's ``add_rotation_arguments``; ValueError naming the option when out of range."""
    try:
        return LogRotation(args.log_file_mb * MIB, args.log_files)
    except ValueError as exc:
        raise ValueError(f"--log-file-mb {args.log_file_mb} / --log-files {args.log_files}: {exc}") from exc


def setup(log_dir: str | Path, level: str = "INFO", console: TextIO | None = None,
          rotation: LogRotation | None = None) -> Path:
    """Route the job's Python logging (``connectors.core.driver_log.configure``: concise console lines,
    ``<log_dir>/replicator.log`` with tracebacks, rolled by ``rotation``, inherited by Spark's Python workers).
    The JVM's log4j goes to ``<log_dir>/spark.log`` by ``spark_java_options``, rolled the same way. Returns the
    log dir. ValueError for an unknown level."""
    directory = driver_log.configure(log_dir, level, console, rotation)
    assert directory is not None
    return directory


def spark_java_options(log_dir: Path, rotation: LogRotation | None = None) -> str:
    """Driver JVM options that send Spark's log4j output to ``<log_dir>/spark.log``, rolled by ``rotation``
    (default: the one ``setup`` exported, else ``LogRotation()``); ``conf/log4j2.properties`` reads them."""
    rotation = rotation or LogRotation.from_env(os.environ.get(LOG_ROTATION_ENV))
    return (f"-Dlog4j.configurationFile=file:{LOG4J_PROPERTIES} "
            f"-Dlog4j2.configurationFile=file:{LOG4J_PROPERTIES} -Dreplicator.log.dir={log_dir} "
            f"-Dreplicator.log.maxBytes={rotation.max_bytes} -Dreplicator.log.files={rotation.older_files}")


# "package.module.SomeError: the message" as Python prints the last line of a traceback.
_RAISED = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)): (?P<message>.+)$",
                     re.MULTILINE)
_OURS = ("connectors.", "broker_store.")
_NOISE = re.compile(r"\s*SQLSTATE: \w+\s*$")


def failure_reason(text: str) -> str:
    """The reason worth one console line in the text of a failed query (a Spark exception that embeds
    Python tracebacks). The last error raised by the replicator's own code wins (``connectors.`` first,
    then ``broker_store.``: the replicator wraps client errors with the link, cluster and address), then
    the last Python error of any kind, then the text's first line."""
    raised = [(m.group("type"), _NOISE.sub("", m.group("message")).strip()) for m in _RAISED.finditer(text)]
    for prefix in _OURS:
        ours = [(t, msg) for t, msg in raised if t.startswith(prefix)]
        if ours:
            kind, message = ours[-1]
            return f"{message} ({kind.rsplit('.', 1)[-1]})"
    python = [(t, msg) for t, msg in raised if not t.startswith(("org.", "java.", "scala."))]
    if python:
        kind, message = python[-1]
        return f"{message} ({kind.rsplit('.', 1)[-1]})"
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return _NOISE.sub("", first).strip()


def failure_line(link: str, error: BaseException | str, log_dir: Path | None = None,
                 storage: Sequence[str] = ()) -> str:
    """``link <name> failed: <reason>`` (plus where the details are). A full disk anywhere in ``error``
    (``connectors.core.disk_full``) is the reason, whatever else the text says (``disk_full_reason``; ``storage``:
    the job's checkpoint and Delta locations, named when the error does not name its path)."""
    found = find_disk_full(error)
    reason = disk_full_reason(found, storage) if found is not None else failure_reason(str(error))
    line = f"link {link} failed: {reason.removeprefix(f'link {link}: ')}"
    if log_dir is not None:
        line += f" (details: {log_dir / PYTHON_LOG}, {log_dir / SPARK_LOG})"
    return line


FULL_BELOW = 64 * MIB
"""A location whose file system has less free space than this is named as the full one."""


def disk_full_reason(found: DiskFull, storage: Sequence[str] = ()) -> str:
    """``disk full: no space left on device for <path> (<the line that said so>); ...``: the path the error
    named, else those of ``storage`` that are on a full file system (``full_locations``)."""
    detail = f" ({found.detail})" if found.detail else ""
    return (f"disk full: no space left on device for {disk_full_where(found, storage)}{detail}; free space there "
            f"and start the job again: it resumes from its checkpoint")


def disk_full_where(found: DiskFull, storage: Sequence[str] = ()) -> str:
    """The location ``disk_full_reason`` names."""
    return found.path or " or ".join(full_locations(storage)) or "the job's checkpoint or Delta tables"


def disk_full_key(found: DiskFull, storage: Sequence[str] = ()) -> str:
    """What tells one full disk from another, for a job that reports each once however many of its queries meet
    it: the file system (device) of the location named, when it is local and found; else the location's text."""
    where = disk_full_where(found, storage)
    path = _nearest_existing(where)
    if path is None:
        return where
    try:
        return f"device {os.stat(path).st_dev}"
    except OSError:
        return where


def _nearest_existing(location: str) -> Path | None:
    """The nearest existing directory or file at or above a local ``location`` (a path or ``file:`` URI), or None
    for a remote one."""
    if "://" in location.removeprefix("file://"):
        return None
    path = Path(location.removeprefix("file://").removeprefix("file:")).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def full_locations(storage: Sequence[str]) -> list[str]:
    """Of ``storage`` (local paths or ``file:`` URIs), those on a file system with less than ``FULL_BELOW`` free,
    emptiest first; all of the local ones when none is (the space was freed meanwhile, or the quota is
    the user's). Runs on the driver: ``os.statvfs`` of each location's nearest existing directory."""
    free: dict[str, int] = {}
    for location in dict.fromkeys(storage):
        path = _nearest_existing(location)
        if path is None:
            continue  # not a local file system
        try:
            stat = os.statvfs(path)
        except OSError:
            continue
        free[location] = stat.f_bavail * stat.f_frsize
    full = sorted((n, loc) for loc, n in free.items() if n < FULL_BELOW)
    return [loc for _, loc in full] or list(free)
