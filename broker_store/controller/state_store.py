"""The controller's one narrow view of durable state: versioned reads, compare-and-set writes, and a leader
lease. The controller's rules (``controller.replicas``) are pure code over this; two implementations keep it:

* ``controller.file_store.FileStateStore``: the embedded default, one controller inside the name server, its
  state in one local file written crash-safely (temp file, fsync, rename, fsync dir). It is always the
  leader. It does not survive the loss of that machine's disk.
* ``controller.etcd_store.EtcdStateStore``: replicated controllers keeping no state of their own; every key
  in etcd (Debian's etcd-server 3.4, v3 JSON gateway), writes as transactions comparing the key's
  ``mod_revision``, leadership by an etcd lease, so two controllers can never both act on stale state.

Both pass the same contract tests (tests/unit/test_controller_state_store.py for the file store,
tests/integration/test_etcd_store.py against real etcd members).

Contract:
* ``get(key)``: the value and its version, or None when the key does not exist. A version is an int that
  changes on every successful write of that key (etcd: ``mod_revision``; the file store: a counter).
* ``compare_and_set(key, expected_version, value)``: write ``value`` only if the key's version is still
  ``expected_version`` (None: only if the key does not exist). True when written, False when another writer
  got there first (nothing written). Raises ``StateStoreError`` when the store cannot be reached or did not
  confirm: the write may or may not have happened, and the caller must re-read before acting.
* ``list(prefix)``: every key under ``prefix`` with its value and version (one consistent read).
* ``campaign()``: try to become or stay the leader (called periodically, at most every lease TTL / 3); True
  while this member holds the lease. A ``StateStoreError`` from it (store unreachable) means: act as a follower
  until a later ``campaign()`` returns True. ``leader()``: the current leader's member id, or None.
  ``resign()``: give the lease up now (the embedded store, the only member, keeps it).

Keys are ``/``-separated strings (``controller/groups/<cluster>/<brokerName>``); values are bytes (the
controller writes versioned JSON).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from broker_store.protocol.errors import RocketMQError


class StateStoreError(RocketMQError):
    """The state store could not be reached or did not confirm a write (its outcome is unknown)."""


class Versioned(NamedTuple):
    value: bytes
    """The stored bytes."""
    version: int
    """Changes on every successful write of the key (compare it in ``compare_and_set``)."""


class StateStore(Protocol):
    """See the module docstring. Implementations are thread-safe; calls block (the controller runs them off
    its event loop)."""

    member_id: str
    """This controller's id in the leader election."""

    def get(self, key: str) -> Versioned | None: ...

    def list(self, prefix: str) -> dict[str, Versioned]: ...

    def compare_and_set(self, key: str, expected_version: int | None, value: bytes) -> bool: ...

    def campaign(self) -> bool: ...

    def leader(self) -> str | None: ...

    def resign(self) -> None: ...

    def close(self) -> None: ...
