"""The embedded controller's state store: every key in one local JSON file, replaced crash-safely on each write
(write a temp file, fsync it, rename it over the old one, fsync the directory), so a kill -9 at any point
leaves either the old state or the new one, never a mix. Used by the controller that runs inside the name
server (RocketMQ's enableControllerInNamesrv); the only member, so always the leader.

File layout (version 1, UTF-8 JSON)::

    {"version": 1, "keys": {"<key>": {"v": <version int>, "b64": "<base64 value>"}, ...}}

What it does not do: survive the loss of the machine or its disk (use the etcd store for that), or share the
state with a second controller process (a second process on the same file would overwrite the first's
writes; ``FileStateStore`` takes an exclusive ``flock`` on ``<path>.lock`` so that fails at start instead).
"""

from __future__ import annotations

import base64
import fcntl
import json
import threading
from pathlib import Path
from typing import Any

from broker_store.controller.state_store import StateStoreError, Versioned
from broker_store.durable_file import replace_file

FILE_VERSION = 1


class FileStateStore:
    """``StateStore`` over one file (see the module docstring). Thread-safe."""

    def __init__(self, path: str | Path, member_id: str = "embedded") -> None:
        self.path = Path(path)
        self.member_id = member_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._lock_file = open(self.path.with_name(self.path.name + ".lock"), "a+")  # held open
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock_file.close()
            raise StateStoreError(f"controller state {self.path} is in use by another process") from exc
        self._keys = self._load()

    def _load(self) -> dict[str, Versioned]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StateStoreError(f"cannot read controller state {self.path}: {exc}") from exc
        try:
            doc = json.loads(raw)
            if doc.get("version") != FILE_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {FILE_VERSION}")
            return {str(k): Versioned(base64.b64decode(e["b64"]), int(e["v"])) for k, e in doc["keys"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StateStoreError(f"controller state {self.path} is corrupt: {exc}") from exc

    def _save(self, keys: dict[str, Versioned]) -> None:
        doc: dict[str, Any] = {"version": FILE_VERSION, "keys": {
            k: {"v": v.version, "b64": base64.b64encode(v.value).decode()} for k, v in sorted(keys.items())}}
        try:
            replace_file(self.path, json.dumps(doc, separators=(",", ":")).encode())
        except OSError as exc:
            raise StateStoreError(f"cannot write controller state {self.path}: {exc}") from exc

    def get(self, key: str) -> Versioned | None:
        with self._lock:
            return self._keys.get(key)

    def list(self, prefix: str) -> dict[str, Versioned]:
        with self._lock:
            return {k: v for k, v in self._keys.items() if k.startswith(prefix)}

    def compare_and_set(self, key: str, expected_version: int | None, value: bytes) -> bool:
        with self._lock:
            current = self._keys.get(key)
            if (None if current is None else current.version) != expected_version:
                return False
            keys = dict(self._keys)
            keys[key] = Versioned(bytes(value), (0 if current is None else current.version) + 1)
            self._save(keys)  # the new state is durable before anyone can read it
            self._keys = keys
            return True

    def campaign(self) -> bool:
        return True

    def leader(self) -> str | None:
        return self.member_id

    def resign(self) -> None:
        """The only member: nothing to hand over."""

    def close(self) -> None:
        self._lock_file.close()
