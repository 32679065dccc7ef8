"""The one logging set-up of the replicator's processes: the job's own and the Python workers Spark starts.

An operator reads the console, a developer the log file, so there are two handlers:

* console (stderr): ``HH:MM:SS LEVEL message``, one line per record, never a traceback (``--log-level
  DEBUG`` keeps them); a failure is one readable line naming the link, the cluster and the address;
* ``<log dir>/replicator.log`` (when a log dir is set): ``LOG_FORMAT`` with every traceback, appended to
  by the job and by each of its Python workers, rolled by size (``LogRotation``: ``replicator.log.1`` is the
  newest older file, a bounded number kept). Every one of those processes may roll it, so the roll is taken
  under a lock file beside it and a process whose file was rolled by another reopens the new one before it
  writes (``SharedRotatingFileHandler``).

The job calls ``configure(log_dir, level, rotation)`` once (``jobs/job_logging.setup``); that also exports the
log dir, level and rotation in the environment (``LOG_DIR_ENV`` / ``LOG_LEVEL_ENV`` / ``LOG_ROTATION_ENV``), which
Spark's JVM and the Python workers it starts inherit (the JVM's ``spark.log`` rolls by the same ``LogRotation``:
``jobs.job_logging.spark_java_options``). Those workers run a data source's driver half (a reader's ``initialOffset`` /
``latestOffset`` / ``commit``, a writer's ``commit`` / ``abort``) and the executor tasks without the job's
logging configuration; ``driver_logging()``, called at the top of those methods, configures the same two
handlers there from the environment (stderr alone at INFO when no job set one, e.g. a user's own query).
In a process that has handlers already (the job itself, tests) it does nothing.

In a worker it also takes the worker's uncaught exceptions (``sys.excepthook``): at a job's stop Spark
closes the socket of a driver-side runner (the source's streaming runner) and then destroys the process, so
the runner's own error about the closed socket escapes and Python starts printing it on the shared stderr,
often cut off after "Traceback (most recent call last):" by the kill. While the job is stopping
(``job_stop.stopping``) such a socket error goes to the log file at DEBUG; anything else, and any error
while the job runs, is printed as Python would.
"""

from __future__ import annotations

import fcntl
import logging
import logging.handlers
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TextIO

from connectors.core import job_stop

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The log file's line format."""
CONSOLE_FORMAT = "%(asctime)s %(levelname)s %(message)s"
CONSOLE_DATE_FORMAT = "%H:%M:%S"
PYTHON_LOG = "replicator.log"
"""File name of the Python log inside the log dir."""
FILE_ONLY = {"file_only": True}
"""``extra=FILE_ONLY`` keeps a record (e.g. a whole JVM exception text) out of the console."""
LOG_DIR_ENV = "ROCKETMQ_REPLICATOR_LOG_DIR"
LOG_LEVEL_ENV = "ROCKETMQ_REPLICATOR_LOG_LEVEL"
LOG_ROTATION_ENV = "ROCKETMQ_REPLICATOR_LOG_ROTATION"
"""``<max bytes>:<older files kept>`` of the job's log files, for the processes it starts (``LogRotation``)."""
SPARK_WORKER_ENV = "PYTHON_WORKER_FACTORY_SECRET"
"""Set by Spark's JVM in every Python worker it starts (their connection back to it): a worker process."""


@dataclass(frozen=True)
class LogRotation:
    """How a job's log files (``replicator.log``, and the JVM's ``spark.log``) roll: the one owner of the
    setting (the jobs' ``--log-file-mb`` / ``--log-files``). At most ``(older_files + 1) * max_bytes`` per file."""

    max_bytes: int = 100 * 1024 * 1024
    """A file is rolled before it would grow past this many bytes."""
    older_files: int = 5
    """Rolled files kept (``<name>.1`` newest .. ``<name>.<older_files>``); older ones are deleted."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1024:
            raise ValueError(f"log rotation: max_bytes {self.max_bytes} is below 1024")
        if not 1 <= self.older_files <= 100:
            raise ValueError(f"log rotation: older_files {self.older_files} is outside 1..100")

    def to_env(self) -> str:
        return f"{self.max_bytes}:{self.older_files}"

    @classmethod
    def from_env(cls, value: str | None) -> LogRotation:
        """The rotation ``to_env`` wrote; the default when ``value`` is unset or malformed (a worker must log)."""
        try:
            max_bytes, older = (value or "").split(":")
            return cls(int(max_bytes), int(older))
        except ValueError:
            return cls()


class SharedRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A ``RotatingFileHandler`` for one file that several processes append to (the job and its Python
    workers). Python's handler assumes it is the file's only writer: a process rolling the file would leave
    the others writing into ``.1`` and rolling it again. Here, before each record, a process whose open file is
    no longer the one at the path reopens the path; a roll is done under an exclusive ``flock`` of
    ``<file>.lock`` and only if the file at the path is still the one found full, so one process rolls it once."""

    def __init__(self, filename: Path, rotation: LogRotation) -> None:
        super().__init__(filename, maxBytes=rotation.max_bytes, backupCount=rotation.older_files, encoding="utf-8")
        self._lock_path = f"{self.baseFilename}.lock"
        self._opened = self._identity()

    def _identity(self) -> tuple[int, int] | None:
        if self.stream is None:
            return None
        st = os.fstat(self.stream.fileno())
        return st.st_dev, st.st_ino

    def _reopen_if_rolled(self) -> None:
        try:
            st = os.stat(self.baseFilename)
            current: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            current = None
        if current is None or current != self._opened:
            if self.stream is not None:
                self.stream.close()
            self.stream = self._open()
            self._opened = self._identity()

    def shouldRollover(self, record: logging.LogRecord) -> bool:  # logging's API
        self._reopen_if_rolled()
        return bool(super().shouldRollover(record))

    def doRollover(self) -> None:  # logging's API
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            full = self._opened
            self._reopen_if_rolled()
            if self._opened == full:  # else another process rolled it since shouldRollover looked
                super().doRollover()
                self._opened = self._identity()


class ConsoleFormatter(logging.Formatter):
    """``HH:MM:SS LEVEL message``; tracebacks are left to the log file unless ``keep_tracebacks``."""

    def __init__(self, keep_tracebacks: bool = False) -> None:
        super().__init__(CONSOLE_FORMAT, datefmt=CONSOLE_DATE_FORMAT)
        self.keep_tracebacks = keep_tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self.keep_tracebacks:
            return super().format(record)
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def parse_level(level: str) -> int:
    """``DEBUG`` / ``INFO`` / ``WARNING`` / ``ERROR`` (any case) as a logging level; ValueError otherwise."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level {level!r}: expected DEBUG, INFO, WARNING or ERROR")
    return numeric


def configure(log_dir: str | Path | None, level: str = "INFO", console: TextIO | None = None,
              rotation: LogRotation | None = None) -> Path | None:
    """Replace the root logger's handlers by the console handler and, with ``log_dir``, the file handler
    (see the module docstring; ``rotation`` default ``LogRotation()``); export the settings for the processes
    started after this. Returns the resolved log dir."""
    numeric = parse_level(level)
    rotation = rotation or LogRotation()
    directory = None
    if log_dir is not None:
        directory = Path(log_dir).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        os.environ[LOG_DIR_ENV] = str(directory)
    os.environ[LOG_LEVEL_ENV] = logging.getLevelName(numeric)
    os.environ[LOG_ROTATION_ENV] = rotation.to_env()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    to_console = logging.StreamHandler(console if console is not None else sys.stderr)
    to_console.setLevel(numeric)
    to_console.setFormatter(ConsoleFormatter(keep_tracebacks=numeric <= logging.DEBUG))
    to_console.addFilter(lambda record: not getattr(record, "file_only", False))
    root.addHandler(to_console)
    if directory is not None:
        to_file = SharedRotatingFileHandler(directory / PYTHON_LOG, rotation)
        to_file.setLevel(min(numeric, logging.INFO))
        to_file.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(to_file)
    root.setLevel(min(numeric, logging.INFO))
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return directory


def driver_logging() -> None:
    """In a process without logging handlers (a Python worker Spark started), set up the job's handlers
    from the environment, or stderr at INFO when there is no job's. Idempotent and cheap: call it per
    driver-side call."""
    if SPARK_WORKER_ENV in os.environ and sys.excepthook is sys.__excepthook__:
        sys.excepthook = worker_excepthook
    if logging.getLogger().handlers or logging.getLogger("connectors").handlers:
        return
    try:
        level = parse_level(os.environ.get(LOG_LEVEL_ENV, "INFO"))
    except ValueError:
        level = logging.INFO
    configure(os.environ.get(LOG_DIR_ENV), logging.getLevelName(level),
              rotation=LogRotation.from_env(os.environ.get(LOG_ROTATION_ENV)))


def worker_excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """A Python worker's uncaught exception (see the module docstring): a closed socket while the job stops
    is the stop's doing and goes to the log file at DEBUG; everything else is printed as Python does."""
    if issubclass(kind, (OSError, EOFError)) and job_stop.stopping():
        logging.getLogger(__name__).debug("Python worker ended by the job's stop: %s", exc, exc_info=(kind, exc, tb),
                                          extra=FILE_ONLY)
        return
    sys.__excepthook__(kind, exc, tb)
