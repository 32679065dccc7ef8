"""The replicated controllers' state store: every key in etcd (Debian's etcd-server 3.4), spoken to through its
v3 JSON gateway with ``requests``, so the controllers keep no state of their own. See ``state_store`` for the
contract; ``deploy.etcd_members`` starts etcd members as child processes.

Keys in etcd (``prefix`` defaults to ``rocketmq/``)::

    <prefix>state/<key>        a state-store key; version = the etcd key's mod_revision
    <prefix>election/leader    the leader's member id, attached to its lease (gone when the lease ends)

The v3 JSON gateway (grpc-gateway over etcdserverpb): POST a JSON body to ``/v3/kv/range``, ``/v3/kv/txn``,
``/v3/lease/grant``, ``/v3/lease/keepalive``, ``/v3/lease/revoke``. Keys and values are base64, int64 fields
(revisions, lease ids, TTLs) are JSON strings, and fields holding their zero value are omitted (``succeeded``
absent = false, ``value`` absent = empty, ``kvs`` absent = no key). Errors come back as a non-200 status with
``{"error": msg, "code": grpc code}``.

* ``compare_and_set``: one txn comparing the key's ``mod_revision`` with the expected version (or its
  ``create_revision`` with 0: "must not exist") and putting the value only then.
* ``campaign``: keep this member's lease alive (``keepalive``; a new ``grant`` when it ended), then a txn
  creating the leader key with that lease only if the key is absent, reading it otherwise; this member leads
  when the key holds its id under its lease. A leader that stops calling ``campaign`` (crash, pause, network)
  loses the key when the lease's TTL runs out; ``resign`` revokes the lease at once.

Endpoints and failures: a request goes to the current endpoint and moves to the next on a connection error,
on a member that has no Raft leader, or (reads only) on a member's timeout, until one answers or
``timeout_s`` has passed. Every request carries gRPC metadata ``hasleader=true`` so a member cut off from the
quorum says "no leader" at once instead of holding the request for its 7 s timeout. A write (the CAS txn) is
sent again elsewhere only when the first attempt surely never reached etcd (connection refused, connect
timeout, "no leader"); otherwise its outcome is unknown and ``StateStoreError`` says so (the contract: re-read
before acting). Every failure is a ``StateStoreError``; no ``requests`` exception leaves this module.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Sequence
from typing import Any

import requests
import urllib3.exceptions

from broker_store.clock import SYSTEM_CLOCK, Clock, StopSignal, ThreadClock
from broker_store.controller.state_store import StateStoreError, Versioned

log = logging.getLogger(__name__)

GRPC_UNAVAILABLE = 14
GRPC_DEADLINE_EXCEEDED = 4
GRPC_UNKNOWN = 2
"""etcd 3.4's gateway reports its own request deadline as code 2 "context deadline exceeded"."""

NO_LEADER = "etcdserver: no leader"
"""Refused before anything was proposed (thanks to ``hasleader``): safe to send a write elsewhere."""
LEASE_NOT_FOUND = "etcdserver: requested lease not found"

HEADERS = {"Grpc-Metadata-hasleader": "true"}
"""gRPC metadata through the gateway: refuse at once when this member sees no Raft leader."""

_ROUND_PAUSE_S = 0.1
"""The pause once every endpoint failed once: Raft gets time to elect, the loop does not spin."""
CONNECT_TIMEOUT_S = 1.0
"""Loopback or LAN: a member that does not accept a connection within this is treated as down."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's ``range_end`` for a prefix):
    the last byte below 0xff incremented, what follows it dropped. ``prefix`` must not be empty or all 0xff."""
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] < 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    raise ValueError(f"no key range ends prefix {prefix!r}")


def _member(kv: dict[str, Any]) -> str:
    """The member id a leader key holds (bytes that are not UTF-8 cannot be ours: replaced, never matching)."""
    try:
        return _unb64(kv.get("value", "")).decode(errors="replace")
    except (ValueError, TypeError) as exc:
        raise StateStoreError(f"etcd returned a leader key that is not base64: {kv}") from exc


def _never_sent(exc: requests.RequestException) -> bool:
    """True when ``exc`` means the request never reached the server (no connection was made)."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if isinstance(exc, requests.ConnectionError) and exc.args:
        reason = getattr(exc.args[0], "reason", None)  # urllib3's MaxRetryError carries the cause
        return isinstance(reason, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError)
    return False


class EtcdStateStore:
    """``StateStore`` over an etcd cluster (see the module docstring). Thread-safe: reads and writes run
    concurrently; ``campaign``/``resign`` are serialized with each other.

    ``lease_ttl_s`` is the leader lease's TTL in whole seconds (etcd raises a TTL below its minimum, 2 s with
    its default timers, to that minimum): a leader that stops renewing is replaced after about this long.
    ``timeout_s`` bounds each call, failovers between endpoints included, on ``clock`` (the controller's; the
    pause between rounds of endpoints too). Each HTTP request's own socket timeouts stay real time: an answer
    takes real time.
    """

    def __init__(self, endpoints: Sequence[str], member_id: str, *, prefix: str = "rocketmq/", lease_ttl_s: int = 3,
                 timeout_s: float = 5.0, clock: Clock | ThreadClock = SYSTEM_CLOCK) -> None:
        if not endpoints:
            raise ValueError("EtcdStateStore needs at least one endpoint (http://host:port)")
        bad = [e for e in endpoints if not e.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"etcd endpoints must be http(s)://host:port URLs, not {bad}")
        if not member_id:
            raise ValueError("EtcdStateStore needs a non-empty member_id")
        if not prefix:
            raise ValueError("EtcdStateStore needs a non-empty key prefix")
        if lease_ttl_s < 1:
            raise ValueError(f"lease_ttl_s must be at least 1 second, not {lease_ttl_s}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.member_id = member_id
        self.lease_ttl_s = int(lease_ttl_s)
        self.timeout_s = float(timeout_s)
        self._clock = clock
        self._state_prefix = (prefix + "state/").encode()
        self._leader_key = _b64((prefix + "election/leader").encode())
        self._session = requests.Session()
        self._current = 0
        self._endpoint_lock = threading.Lock()
        self._election_lock = threading.Lock()
        self._lease_id: str | None = None
        """This member's lease (an int64 as etcd's JSON string), None before the first campaign or after it
        ended."""

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to first (the last one that answered)."""
        with self._endpoint_lock:
            return self.endpoints[self._current]

    # -- the contract ------------------------------------------------------------------------------------------

    def get(self, key: str) -> Versioned | None:
        doc = self._call("/v3/kv/range", {"key": self._key(key)}, idempotent=True)
        kvs = doc.get("kvs") or []
        return self._versioned(kvs[0]) if kvs else None

    def list(self, prefix: str) -> dict[str, Versioned]:
        start = self._state_prefix + prefix.encode()
        doc = self._call("/v3/kv/range", {"key": _b64(start), "range_end": _b64(prefix_end(start))},
                         idempotent=True)
        cut = len(self._state_prefix)
        listed = {}
        for kv in doc.get("kvs") or []:
            try:
                key = _unb64(kv["key"])[cut:].decode()
            except (KeyError, ValueError, TypeError) as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
                raise StateStoreError(f"etcd listed a key that is not base64 UTF-8: {kv}") from exc
            listed[key] = self._versioned(kv)
        return listed

    def compare_and_set(self, key: str, expected_version: int | None, value: bytes) -> bool:
        k = self._key(key)
        if expected_version is None:
            compare = {"target": "CREATE", "result": "EQUAL", "key": k, "create_revision": "0"}
        else:
            compare = {"target": "MOD", "result": "EQUAL", "key": k, "mod_revision": str(int(expected_version))}
        doc = self._call("/v3/kv/txn", {"compare": [compare],
                                        "success": [{"request_put": {"key": k, "value": _b64(bytes(value))}}]},
                         idempotent=False, what=f"compare-and-set of {key!r}")
        return bool(doc.get("succeeded", False))

    def campaign(self) -> bool:
        """Renew this member's lease and take the leader key if nobody holds it. While leading, call it again
        within every ``lease_ttl_s / 3`` s. It raises ``StateStoreError`` when etcd cannot be reached; the caller
        must then act as a follower (the lease may run out before the next success)."""
        with self._election_lock:
            for _ in range(2):  # a second round only when the lease ended between keepalive and txn
                lease = self._live_lease()
                put = {"key": self._leader_key, "value": _b64(self.member_id.encode()), "lease": lease}
                body = {"compare": [{"target": "CREATE", "result": "EQUAL", "key": self._leader_key,
                                     "create_revision": "0"}],
                        "success": [{"request_put": put}],
                        "failure": [{"request_range": {"key": self._leader_key}}]}
                try:
                    # Sending this txn twice is harmless: the second finds the key under our own lease.
                    doc = self._call("/v3/kv/txn", body, idempotent=True, what="leader campaign")
                except _LeaseNotFound:
                    self._lease_id = None
                    continue
                if doc.get("succeeded"):
                    log.info("controller %s is the leader (lease %s)", self.member_id, lease)
                    return True
                responses = doc.get("responses") or [{}]
                kvs = responses[0].get("response_range", {}).get("kvs") or []
                return bool(kvs) and kvs[0].get("lease") == lease and _member(kvs[0]) == self.member_id
            return False

    def leader(self) -> str | None:
        doc = self._call("/v3/kv/range", {"key": self._leader_key}, idempotent=True)
        kvs = doc.get("kvs") or []
        return _member(kvs[0]) if kvs else None

    def resign(self) -> None:
        """Revoke this member's lease: the leader key (if this member held it) is deleted at once."""
        with self._election_lock:
            lease, self._lease_id = self._lease_id, None
            if lease is None:
                return
            try:
                self._call("/v3/lease/revoke", {"ID": lease}, idempotent=True, what="lease revoke")
            except _LeaseNotFound:
                pass  # it had already ended: nothing to give up
            log.info("controller %s resigned (lease %s revoked)", self.member_id, lease)

    def close(self) -> None:
        """Resign (another controller takes over without waiting for the TTL), then drop the connections. When
        etcd cannot be reached the lease simply runs out."""
        try:
            self.resign()
        except StateStoreError as exc:
            log.warning("controller %s could not resign on close (its lease runs out in %s s): %s",
                        self.member_id, self.lease_ttl_s, exc)
        self._session.close()

    # -- the lease ---------------------------------------------------------------------------------------------

    def _live_lease(self) -> str:
        """This member's lease id, renewed now; a new lease when there is none or the old one has ended."""
        if self._lease_id is not None:
            doc = self._call("/v3/lease/keepalive", {"ID": self._lease_id}, idempotent=True, what="lease keepalive")
            result = doc.get("result", doc)
            try:
                ttl = int(result.get("TTL", "0"))
            except (ValueError, TypeError, AttributeError) as exc:
                raise StateStoreError(f"etcd answered a keepalive without a valid TTL: {doc}") from exc
            if ttl > 0:
                return self._lease_id
            log.warning("controller %s: lease %s ended (not renewed within %s s)", self.member_id, self._lease_id,
                        self.lease_ttl_s)
            self._lease_id = None
        doc = self._call("/v3/lease/grant", {"TTL": str(self.lease_ttl_s)}, idempotent=True, what="lease grant")
        lease_id = doc.get("ID")
        if not lease_id:
            raise StateStoreError(f"etcd granted no lease: {doc}")
        self._lease_id = str(lease_id)
        return self._lease_id

    # -- requests ----------------------------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return _b64(self._state_prefix + key.encode())

    @staticmethod
    def _versioned(kv: dict[str, Any]) -> Versioned:
        try:
            return Versioned(_unb64(kv.get("value", "")), int(kv["mod_revision"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise StateStoreError(f"etcd returned a key without a valid mod_revision: {kv}") from exc

    def _next_endpoint(self, failed: str) -> None:
        with self._endpoint_lock:
            if self.endpoints[self._current] == failed:
                self._current = (self._current + 1) % len(self.endpoints)

    def _call(self, path: str, body: dict[str, Any], *, idempotent: bool, what: str | None = None) -> dict[str, Any]:
        """POST ``body`` to ``path``, failing over between endpoints (see the module docstring). Returns the
        response document; raises ``StateStoreError`` (``_LeaseNotFound`` for an ended lease)."""
        what = what or path
        deadline = self._clock.monotonic() + self.timeout_s
        failures: list[str] = []
        tried = 0
        while True:
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                raise StateStoreError(f"etcd {what}: no endpoint answered within {self.timeout_s:g} s "
                                      f"({'; '.join(failures[-len(self.endpoints):]) or 'no attempt'})")
            if tried and tried % len(self.endpoints) == 0:  # each endpoint failed once: give Raft time to elect
                StopSignal(self._clock).sleep(min(_ROUND_PAUSE_S, remaining))  # either clock's side: only ``wait``
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    continue  # the check above raises
            endpoint = self.endpoint
            tried += 1
            # A hung member (paused, partitioned) accepts the connection and never answers: a read gives it a
            # share of the budget and moves on; a write waits the whole budget, its outcome is unknown anyway.
            wait = min(remaining, max(1.0, self.timeout_s / len(self.endpoints))) if idempotent else remaining
            try:
                response = self._session.post(endpoint + path, json=body, headers=HEADERS,
                                              timeout=(min(CONNECT_TIMEOUT_S, wait), wait))
            except requests.RequestException as exc:
                if not idempotent and not _never_sent(exc):
                    self._next_endpoint(endpoint)  # the caller's re-read goes elsewhere
                    raise StateStoreError(f"etcd {what} at {endpoint}: {exc}; it may or may not have been "
                                          "applied (re-read before acting)") from exc
                failures.append(f"{endpoint}: {type(exc).__name__}")
                self._next_endpoint(endpoint)
                continue
            try:
                doc = response.json()
                if not isinstance(doc, dict):
                    raise ValueError(f"a JSON {type(doc).__name__}")
            except ValueError as exc:
                raise StateStoreError(f"etcd {what} at {endpoint}: HTTP {response.status_code}, not a JSON "
                                      f"object: {response.text[:200]!r}") from exc
            error = doc.get("error")
            if response.status_code == 200 and error is None:
                return doc
            if isinstance(error, dict):  # a streaming endpoint (keepalive) wraps its error
                message, code = str(error.get("message", error)), error.get("code")
            else:
                message, code = str(error or doc.get("message") or f"HTTP {response.status_code}"), doc.get("code")
            if message == LEASE_NOT_FOUND:
                raise _LeaseNotFound(f"etcd {what}: {message}")
            retry = message == NO_LEADER or (
                idempotent and code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED, GRPC_UNKNOWN))
            if not retry:
                if not idempotent and code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED, GRPC_UNKNOWN):
                    self._next_endpoint(endpoint)  # this member timed out: the caller's re-read goes elsewhere
                raise StateStoreError(f"etcd {what} at {endpoint} failed: {message} (gRPC code {code}"
                                      + ("" if idempotent else "; it may or may not have been applied") + ")")
            failures.append(f"{endpoint}: {message}")
            self._next_endpoint(endpoint)


class _LeaseNotFound(StateStoreError):
    """The lease a request named has ended (expired or revoked)."""
