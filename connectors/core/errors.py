"""The one exception hierarchy of ``connectors``.

Everything the replicator's connector layer raises derives from ``ReplicatorError``. Callers act on
the behaviour flag instead of matching types::

    ReplicatorError                 retriable
    +-- ReplicatorConfigError       (bad replicator config; names file, field path, reason)
    |   +-- CredentialError         (a credential's environment variable is unset at use time)
    |   +-- FailureHookError        (failure_hook "module:function" is not importable / callable)
    +-- TopicMappingError           (a mapping rule produced an invalid target topic name)
    +-- OffsetFormatError           (source-offset JSON that does not parse; names the bad key)
    +-- BatchFailedError            (the failure policy decided to fail the batch; .failed)
    +-- DataLossError               (a source queue no longer holds offsets the query must read)
    +-- TargetUnavailableError      yes   (the target cluster took no writes for retry_timeout_ms)
    +-- SourceUnavailableError      yes   (the source cluster served no reads for retry_timeout_ms)
    +-- TableError                  yes   (a Delta table could not be read or committed)
    +-- ClusterUnreachableError     yes   (a cluster polled by a monitor did not answer; the next poll retries)

This is a separate root from ``broker_store``'s ``RocketMQError``: the client's errors are
translated at the sink/source boundary (into failed-message records or ``raise X from exc``) so a
Spark job sees one hierarchy per layer. Lower-level exceptions (``OSError``, ``yaml.YAMLError``,
``json.JSONDecodeError``, ``deltalake`` errors, ``ImportError``) never leak; they are chained.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class ReplicatorError(Exception):
    retriable: ClassVar[bool] = False
    """Running the same operation again (e.g. re-running the batch) may succeed."""


class ClusterUnreachableError(ReplicatorError):
    """A cluster a monitor polls (the heartbeat tail) did not answer; the message has the client's error."""

    retriable = True


class ReplicatorConfigError(ReplicatorError):
    """Invalid replicator configuration (the replicator YAML, a Spark option, a job's argument).

    Not ``broker_store.protocol.errors.ConfigError``: that one is a broker's, name server's or client's setting
    (a ``RocketMQError``, caught by the broker CLI), while this one belongs to the connectors' own hierarchy
    (``ReplicatorError``, what a Spark job catches) and carries the file and field apart. The names differ so
    that a module seeing both, a test or a fuzz target, never needs an alias to tell them apart.

    ``str(err)`` reads ``<file>: <field.path>: <reason>``; the parts are kept as attributes so tools
    can point at the field.
    """

    def __init__(self, reason: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.reason = reason
        parts = [p for p in (file, field) if p]
        super().__init__(": ".join([*parts, reason]))


class CredentialError(ReplicatorConfigError):
    """A cluster's credentials name an environment variable that is unset or empty."""


class FailureHookError(ReplicatorConfigError):
    """``failure_hook`` does not resolve to a callable (import error, missing attribute, not callable)."""


class TopicMappingError(ReplicatorError):
    """A mapping rule turned a source topic into a target name that is not a valid topic."""


class OffsetFormatError(ReplicatorError):
    """A source-offset document (Spark checkpoint JSON) is not in the canonical format."""


class BatchFailedError(ReplicatorError):
    """The link's failure policy failed the batch; the query must stop so offsets do not advance.

    Spark re-runs the batch after a restart, so nothing is lost; the successful sends of the batch
    are repeated (at-least-once).
    """

    def __init__(self, message: str, *, failed: Sequence[str] = ()) -> None:
        self.failed = tuple(failed)
        """``topic/broker/queueId@offset`` of every failed message of the batch."""
        super().__init__(message)


class DataLossError(ReplicatorError):
    """Offsets the query still has to read are gone from a source queue (retention deleted them, or
    the queue was truncated / re-created). Raised only with ``failOnDataLoss=true``; with ``false``
    the source logs the lost range and skips to the queue's min offset."""


class TargetUnavailableError(ReplicatorError):
    """The target cluster stayed unreachable (or without a broker able to take writes) for the link's
    whole ``retry_timeout_ms``. Raised by a sink write task, so the batch is not committed and nothing
    is recorded as failed: a restart re-runs the batch (at-least-once)."""

    retriable = True


class SourceUnavailableError(ReplicatorError):
    """The source cluster stayed unreachable (connection refused or lost, timeouts, no route, a broker
    missing from the route) for the link's whole ``retry_timeout_ms``, on an executor's pull or a
    driver's admin call. The batch is not committed: a restart re-reads it (at-least-once). ``str(err)``
    is one line: ``link L: source cluster S (namesrv A) unavailable for 30.0s while ...: <last error>``."""

    retriable = True

    def __init__(self, message: str, *, link: str, cluster: str, namesrv: str) -> None:
        self.link = link
        self.cluster = cluster
        self.namesrv = namesrv
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        # keyword-only fields: the default pickling (args only) could not rebuild it on the driver
        return (_rebuild_source_unavailable, (str(self), self.link, self.cluster, self.namesrv))


def _rebuild_source_unavailable(message: str, link: str, cluster: str, namesrv: str) -> SourceUnavailableError:
    return SourceUnavailableError(message, link=link, cluster=cluster, namesrv=namesrv)


class TableError(ReplicatorError):
    """A Delta table of a link could not be read or committed (I/O, concurrent writer, bad schema)."""

    retriable = True
