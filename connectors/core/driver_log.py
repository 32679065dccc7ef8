"""The one logging set-up of the connectors' driver-side Python workers.

Spark runs a Python data source's driver half (a reader's ``initialOffset`` / ``latestOffset`` /
``commit``, a writer's ``commit`` / ``abort``) in Python workers it starts itself, without the logging
configuration of the job that registered the source, so records of the ``connectors`` loggers would be
dropped there. ``driver_logging()`` is called at the top of those methods; in a process that configured
logging already (the job itself, tests) it does nothing.
"""

from __future__ import annotations

import logging

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The driver log's line format, also used by the jobs' own handler (``jobs/replicate.py``), so the
job's lines and its Python workers' lines read alike."""


def driver_logging() -> None:
    """Give the ``connectors`` loggers a stderr handler at INFO unless this process has a handler
    already (on the package or the root logger). Idempotent and cheap: call it per driver-side call."""
    package = logging.getLogger("connectors")
    if not package.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        package.addHandler(handler)
        package.setLevel(logging.INFO)
