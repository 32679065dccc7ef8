"""The outcomes of a put's replication step: the store's ``PutStatus``, under the name HA's code reads.

Produced by ``quorum`` / ``ack_tracker``; folded into ``PutResult.durable`` by the store's durability
policy and answered by the send processor, whose table (``broker/send_processor.py``) is the one
status -> response code mapping. The replication members and when each is produced are documented
on ``store.results.PutStatus``. Imported from the store's package API (``broker_store.store``): HA never
imports the store's modules (``tests/unit/test_broker_store_layout.py``).
"""

from __future__ import annotations

from broker_store.store import PutStatus

ReplicationStatus = PutStatus
"""HA's futures resolve to PUT_OK, FLUSH_SLAVE_TIMEOUT or IN_SYNC_REPLICAS_NOT_ENOUGH."""


def remark(status: PutStatus, detail: str = "") -> str:
    """The response remark: empty for PUT_OK, else the status name and ``detail``."""
    if status is PutStatus.PUT_OK:
        return ""
    return f"{status.name}: {detail}" if detail else status.name
