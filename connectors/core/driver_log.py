"""The one logging set-up of the replicator's processes: the job's own and the Python workers Spark starts.

An operator reads the console, a developer the log file, so there are two handlers:

* console (stderr): ``HH:MM:SS LEVEL message``, one line per record, never a traceback (``--log-level
  DEBUG`` keeps them); a failure is one readable line naming the link, the cluster and the address;
* ``<log dir>/replicator.log`` (when a log dir is set): ``LOG_FORMAT`` with every traceback, appended to
  by the job and by each of its Python workers.

The job calls ``configure(log_dir, level)`` once (``jobs/job_logging.setup``); that also exports the log
dir and level in the environment (``LOG_DIR_ENV`` / ``LOG_LEVEL_ENV``), which Spark's JVM and the Python
workers it starts inherit. Those workers run a data source's driver half (a reader's ``initialOffset`` /
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

import logging
import os
import sys
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
SPARK_WORKER_ENV = "PYTHON_WORKER_FACTORY_SECRET"
"""Set by Spark's JVM in every Python worker it starts (their connection back to it): a worker process."""


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


def configure(log_dir: str | Path | None, level: str = "INFO", console: TextIO | None = None) -> Path | None:
    """Replace the root logger's handlers by the console handler and, with ``log_dir``, the file handler
    (see the module docstring); export both settings for the processes started after this. Returns the
    resolved log dir."""
    numeric = parse_level(level)
    directory = None
    if log_dir is not None:
        directory = Path(log_dir).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        os.environ[LOG_DIR_ENV] = str(directory)
    os.environ[LOG_LEVEL_ENV] = logging.getLevelName(numeric)
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
        to_file = logging.FileHandler(directory / PYTHON_LOG)
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
    configure(os.environ.get(LOG_DIR_ENV), logging.getLevelName(level))


def worker_excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """A Python worker's uncaught exception (see the module docstring): a closed socket while the job stops
    is the stop's doing and goes to the log file at DEBUG; everything else is printed as Python does."""
    if issubclass(kind, (OSError, EOFError)) and job_stop.stopping():
        logging.getLogger(__name__).debug("Python worker ended by the job's stop: %s", exc, exc_info=(kind, exc, tb),
                                          extra=FILE_ONLY)
        return
    sys.__excepthook__(kind, exc, tb)
