"""The project's crash-safe small files: ``replace_file`` (the one atomic replace: temp file, fsync, rename, fsync
of the directory) and, over it, versioned, checksummed JSON files, each with a ``.bak`` copy.

A leaf under every side that keeps small files: the broker's metadata (``TopicConfigManager``,
``SubscriptionGroupManager``, ``ConsumerOffsetManager``, ``DelayOffsetTable``; ``write_file_atomically`` for
``identity_file``), the store's epoch file, the controller's state file, and outside ``broker_store`` the
replicator's small records beside a link's tables (``jobs.dr``'s journal, the source's max offsets). File
layout of the JSON files::

    {"version": 1,            # FORMAT_VERSION of the writer; newer versions are refused
     "crc32": 1234567890,     # zlib.crc32 of the payload in canonical form (below); absent = unchecked
     ...payload keys...}

The canonical form is the payload alone (no ``version``, no ``crc32``) as compact JSON with sorted keys, so a
flipped digit in an offset is caught, not read as another offset. Files written before the checksum existed
have no ``crc32`` and are read unchecked.

Writing: ``<name>`` then ``<name>.bak``, each replaced atomically (temp file, fsync, rename, fsync of the
directory), so a crash leaves each file old or new and whole, the ``.bak`` never newer than the main file.
Unlike RocketMQ's ``.bak`` (the previous version) it holds the same bytes as the last complete write.

Reading (``load_metadata_file``): the main file; when it is missing or damaged (unreadable, not JSON, not an
object, checksum mismatch, or refused by the caller's parser) the ``.bak``, with a warning naming the file
and the byte at fault; when neither exists, nothing (a new broker). When files exist and none is intact the
load raises ``StoreError`` naming each file and its fault: the broker refuses to start rather than start
with empty offsets, which would make consumers start over from their CONSUME_FROM policy (skipping messages
under CONSUME_FROM_LAST_OFFSET). Falling back to the ``.bak`` loses nothing: it is the last write. A newer
format version is refused at once, damage or not: a downgrade is the operator's call.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from broker_store.protocol.errors import StoreError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
BACKUP_SUFFIX = ".bak"
_CRC_KEY = "crc32"
_VERSION_KEY = "version"

T = TypeVar("T")


class _Damaged(Exception):
    """One file's fault, as a sentence naming the byte where that is known."""


def fsync_directory(directory: Path) -> None:
    """Make a create/rename/unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash at any point leaves the old file or the new one, never a
    torn one: write ``<name>.tmp`` beside it, fsync, rename over ``path``, fsync the directory. Raises OSError;
    callers translate it to their own error. The one crash-safe small-file write (metadata, identity, epoch
    and controller state files)."""
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _payload_crc(payload: dict[str, Any]) -> int:
    return zlib.crc32(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))


def write_metadata_file(path: Path, payload: dict[str, Any]) -> None:
    """Atomically replace ``path``, then its ``.bak``, with ``{"version": ..., "crc32": ..., **payload}``."""
    canonical = orjson.loads(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS))  # keys as they read back
    data = orjson.dumps(
        {_VERSION_KEY: FORMAT_VERSION, _CRC_KEY: _payload_crc(canonical), **payload},
        option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
    )
    write_file_atomically(path, data)
    write_file_atomically(backup_path(path), data)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a torn one (see the
    module docstring). StoreError if it cannot be written."""
    try:
        replace_file(path, data)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_metadata_file(path: Path) -> dict[str, Any] | None:
    """The payload of ``path`` (or of its ``.bak``), None if neither exists; see ``load_metadata_file``."""
    return load_metadata_file(path, lambda data: data)


def load_metadata_file(path: Path, parse: Callable[[dict[str, Any]], T]) -> T | None:
    """``parse`` of the main file's payload, else of the ``.bak``'s, None when neither exists. ``parse`` raises
    StoreError (or ValueError/TypeError/AttributeError) for a payload it cannot use: that counts as damage.
    StoreError when a file holds a newer format version, or when files exist and none is intact (module
    docstring)."""
    faults: list[str] = []
    for candidate in (path, backup_path(path)):
        try:
            data = _read(candidate)
            if data is None:
                continue
            try:
                result = parse(data)
            except (StoreError, ValueError, TypeError, AttributeError) as exc:
                raise _Damaged(f"{candidate}: its content is refused: {exc}") from exc
        except _Damaged as exc:
            faults.append(str(exc))
            continue
        if faults:
            log.warning("%s; using the backup copy %s (it holds the last complete write)", faults[0], candidate)
        return result
    if faults:
        raise StoreError(f"no intact copy of {path}: {'; '.join(faults)}; restore one or remove both to start "
                         "empty (consumers then start over from their CONSUME_FROM policy)")
    return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Damaged(f"{path} cannot be read: {exc.strerror or exc}") from exc
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Damaged(f"{path} is damaged at byte {exc.pos} (line {exc.lineno}, column {exc.colno}): "
                       f"{exc.msg}") from exc
    if not isinstance(data, dict):
        raise _Damaged(f"{path} is damaged: it does not hold a JSON object")
    version = data.get(_VERSION_KEY)
    if version != FORMAT_VERSION:
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise StoreError(f"{path} has format version {version}; this broker reads version {FORMAT_VERSION}")
        raise _Damaged(f"{path} is damaged: format version {version!r}, expected {FORMAT_VERSION}")
    crc = data.get(_CRC_KEY)
    if crc is not None:
        payload = {k: v for k, v in data.items() if k not in (_VERSION_KEY, _CRC_KEY)}
        if not isinstance(crc, int) or _payload_crc(payload) != crc:
            raise _Damaged(f"{path} is damaged: its content does not match its crc32 {crc!r} (a changed byte)")
    return data
