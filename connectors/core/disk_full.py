"""Whether a failure was a full disk: the one rule the replicator's jobs read a failed query or start by.

A job's Spark checkpoints and Delta tables are written in four different ways, and each says "no space"
its own way by the time the failure reaches the job's driver:

* Python (the writers' commits, ``connectors.core.delta``): ``OSError`` with errno ``ENOSPC`` (28) or
  ``EDQUOT`` (122), printed ``[Errno 28] No space left on device: '<file>'``;
* delta-rs (Rust, object_store): a ``DeltaError`` whose text ends ``No space left on device (os error 28)``,
  mostly without a path, wrapped by ``connectors.core.delta`` into a ``TableError`` that names the table;
* Spark's checkpoint writer (Java): ``java.io.IOException: No space left on device`` somewhere in the
  text of a ``StreamingQueryException`` or a Py4J error;
* any of them as text inside another: a Python data source's traceback travels to the driver inside a
  Spark exception's message.

So ``find_disk_full`` walks a Python exception's chain (``__cause__`` and ``__context__``) and reads the
text of each link, or a text alone. Pure: no I/O. A full disk is not damage: what was written stays
intact (Spark's checkpoint files and Delta commits are written whole, then renamed in), so the job stops
and, once space is freed, its restart resumes from the checkpoint (at-least-once). The jobs' supervisor
(``jobs.query_supervisor``) turns a finding into its one console line. The brokers' own rule for their
store is ``broker_store.store.disk_space`` (the connectors import nothing of the store).
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Errnos that mean no space left: on the device, or in the user's quota."""

_DISK_FULL_TEXT = re.compile(
    r"No space left on device|Disk quota exceeded"  # strerror, as C, Java and Rust print it
    r"|\[Errno (?:28|122)\]|os error (?:28|122)\b",  # Python's and Rust's renderings of the errno
    re.IGNORECASE)
# an absolute path, maybe as a file: URI or quoted: up to white space, a quote, or a ':' ending a clause
_PATH = re.compile(r"(?:(?<=\s)|(?<=^)|(?<=['\"(=]))(?:file:)?(/[^\s'\"(),;]*[^\s'\"(),;:.])")


@dataclass(frozen=True)
class DiskFull:
    """A failure found to be a full disk."""

    detail: str
    """The line that said so (stripped), e.g. ``java.io.IOException: No space left on device``."""
    path: str | None
    """The file or directory the failed write named, when some line saying "no space" names one."""


def find_disk_full(error: BaseException | str) -> DiskFull | None:
    """The full disk behind ``error`` (an exception with its chain, or a failure's text), else None."""
    if isinstance(error, str):
        return _in_text(error)
    first: DiskFull | None = None
    for exc in _chain(error):
        found = (DiskFull(str(exc).strip(), _path_of(exc)) if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS
                 else _in_text(str(exc)))
        if found is not None:
            if found.path is not None:
                return found
            first = first or found
    return first


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from or while handling, once each (a chain may loop)."""
    seen: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending:
        exc = pending.pop(0)
        if any(exc is s for s in seen):
            continue
        seen.append(exc)
        pending += [e for e in (exc.__cause__, exc.__context__) if e is not None]
    return seen


def _path_of(exc: OSError) -> str | None:
    for name in (exc.filename, exc.filename2):
        if name is not None:
            return str(name, "utf-8", "replace") if isinstance(name, bytes) else str(name)
    return None


def _in_text(text: str) -> DiskFull | None:
    """The first line of ``text`` that says "no space", with the path of the first such line naming one, or
    else of the line its message starts on: delta-rs prints its error chain one cause a line, each marked
    ``↳``, under the line (ours) that names the table."""
    raw = [_ANSI.sub("", line).strip() for line in text.splitlines()]
    lines = [_clean(line) for line in raw]
    said = [i for i, line in enumerate(lines) if _DISK_FULL_TEXT.search(line)]
    if not said:
        return None
    for i in said:
        j = i
        while j > 0 and raw[j].startswith(_CAUSE) and not _PATH.search(lines[j]):
            j -= 1  # a cause line without a path: its message began above
        match = _PATH.search(lines[j])
        if match is not None:
            return DiskFull(lines[i], match.group(1))
    return DiskFull(lines[said[0]], None)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CAUSE = "↳"  # delta-rs marks each cause of its error chain with it


def _clean(line: str) -> str:
    """A line without colour codes, indentation, delta-rs's cause marker and Py4J's ``: `` before the Java
    exception."""
    return _ANSI.sub("", line).strip().removeprefix(_CAUSE).removeprefix(": ").strip()
