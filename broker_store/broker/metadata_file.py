"""Versioned JSON files for broker metadata (topics, consumer offsets), replaced atomically.

Used by ``TopicConfigManager`` and ``ConsumerOffsetManager``; ``write_file_atomically`` is also the write of
the broker's other small files (``identity_file``). File layout::

    {"version": 1,            # FORMAT_VERSION of the writer; newer versions are refused
     ...payload keys...}

A write goes to ``<name>.tmp`` in the same directory, is fsynced, renamed over ``<name>`` and the
directory is fsynced, so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from broker_store.protocol.errors import StoreError
from broker_store.store.files import replace_file

FORMAT_VERSION = 1


def write_metadata_file(path: Path, payload: dict[str, Any]) -> None:
    """Atomically replace ``path`` with ``{"version": FORMAT_VERSION, **payload}``."""
    data = orjson.dumps(
        {"version": FORMAT_VERSION, **payload},
        option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
    )
    write_file_atomically(path, data)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or the new file, never a torn one (see the
    module docstring). StoreError if it cannot be written."""
    try:
        replace_file(path, data)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_metadata_file(path: Path) -> dict[str, Any] | None:
    """The payload of ``path``, or None if it does not exist. StoreError if unreadable or corrupt."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"{path} is not valid JSON ({exc}); fix or remove it") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{path} does not hold a JSON object")
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise StoreError(f"{path} has format version {version!r}; this broker reads version {FORMAT_VERSION}")
    return data
