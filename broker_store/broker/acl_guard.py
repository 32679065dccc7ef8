"""The broker's ACL 1.0 gate: the accounts of its plain_acl.yml, kept current, and the check every request
passes before dispatch when ``acl_enable`` is on (``BrokerServer._handle`` calls ``refuse``).

The decision is ``broker_store.acl.decision``; this module adds the file's life:

- start: the file must read and validate, or the broker does not start (ConfigError naming the field).
- change: at most every ``check_interval`` seconds of the injected clock a request looks at the file's
  (mtime, size, inode); when they changed the file is read again. A file that no longer validates (or
  vanished) is logged once with the field path and the accounts in force are kept, as RocketMQ keeps its
  old table when a reload throws.
- refusals are counted (``refusals``); a refusal whose text differs from the last one logged is logged at once,
  repeats of it at most once a second (with the number not logged), so a peer looping on one refused request
  does not flood the log and no distinct reason is hidden.
- admin writes (``broker.acl_processor``) go through ``store``: the crash-safe ``replace_file``, then the
  new table is in force at once (its fingerprint recorded, so the write is not read back as a change).

Runs on the broker's event loop (one thread); the file is small and read or written synchronously there.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from broker_store.acl.decision import AclDenied, AclTable, check, remote_host
from broker_store.acl.plain_file import PlainAclFile, read_plain_acl
from broker_store.clock import Clock
from broker_store.durable_file import replace_file
from broker_store.net.server import Connection
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ConfigError, StoreError
from broker_store.protocol.frame import RemotingCommand

log = logging.getLogger(__name__)

_Fingerprint = tuple[int, int, int] | None


def _fingerprint(path: Path) -> _Fingerprint:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class AclGuard:
    """The accounts in force and the check. ``load`` once before serving."""

    def __init__(self, path: Path, *, clock: Clock, check_interval: float) -> None:
        self.path = path
        self._clock = clock
        self._check_interval = check_interval
        self.acl_file = PlainAclFile()
        """The validated file in force (what the admin requests edit)."""
        self.table = AclTable.compile(self.acl_file)
        self._seen: _Fingerprint = None
        """The fingerprint of the file last read (good or bad), so one bad version is logged once."""
        self._next_check = 0.0
        self.refusals = 0
        """Requests refused since start."""
        self._next_log = 0.0
        self._unlogged = 0
        self._last_logged = ""

    def load(self) -> None:
        """Read the file at start; ConfigError when it is missing or does not validate."""
        if not self.path.is_file():
            raise ConfigError(f"{self.path}: acl_enable is on but the ACL file does not exist")
        self._seen = _fingerprint(self.path)
        self._use(read_plain_acl(self.path))
        self._next_check = self._clock.monotonic() + self._check_interval
        log.info("ACL on: %d accounts, %d global white addresses from %s", len(self.acl_file.accounts),
                 len(self.acl_file.global_white_remote_addresses), self.path)

    def _use(self, acl_file: PlainAclFile) -> None:
        self.table = AclTable.compile(acl_file)
        self.acl_file = acl_file

    def reload_if_changed(self) -> None:
        """Read the file again if its fingerprint changed since it was last read (see the module docstring)."""
        seen = _fingerprint(self.path)
        if seen == self._seen:
            return
        self._seen = seen
        if seen is None:
            log.error("%s: the ACL file vanished; keeping the %d accounts in force", self.path,
                      len(self.acl_file.accounts))
            return
        try:
            acl_file = read_plain_acl(self.path)
        except ConfigError as exc:
            log.error("ACL file refused, keeping the %d accounts in force: %s", len(self.acl_file.accounts), exc)
            return
        self._use(acl_file)
        log.info("ACL file %s reloaded: %d accounts", self.path, len(acl_file.accounts))

    def refuse(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        """None when ``cmd`` may be dispatched; else RocketMQ's refusal (SYSTEM_ERROR, AclException text)."""
        now = self._clock.monotonic()
        if now >= self._next_check:
            self._next_check = now + self._check_interval
            self.reload_if_changed()
        try:
            check(self.table, cmd, remote_host(conn.remote_addr))
        except AclDenied as exc:
            self.refusals += 1
            # a new reason at once, repeats at most once a second: a peer looping must not flood the log
            text = str(exc)
            if now >= self._next_log or text != self._last_logged:
                more = f" ({self._unlogged} more refusals not logged)" if self._unlogged else ""
                log.warning("ACL refused request code %d from %s: %s%s", cmd.code, conn.remote_addr, exc, more)
                self._next_log, self._unlogged, self._last_logged = now + 1.0, 0, text
            else:
                self._unlogged += 1
            return cmd.response(ResponseCode.SYSTEM_ERROR, exc.remark)
        return None

    def store(self, acl_file: PlainAclFile) -> None:
        """Write ``acl_file`` crash-safely and put it in force; StoreError when it cannot be written (the
        accounts in force stay)."""
        try:
            replace_file(self.path, acl_file.to_yaml())
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot write the ACL file: {exc.strerror or exc}") from exc
        self._seen = _fingerprint(self.path)
        self._use(acl_file)
