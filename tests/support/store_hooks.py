"""Test hooks into a ``MessageStore``: a kill -9 and the flush thread's periodic work, on demand.

They reach into the store's parts on purpose (the production store offers no way to crash or to run its
flush thread's step from outside); they live here so the store carries no test-only code.
"""

from __future__ import annotations

from unittest import mock

from broker_store.store import MessageStore


def crash(store: MessageStore) -> None:
    """Stop ``store`` as a crash would: no final ConsumeQueue flush and no checkpoint (its ``shutdown`` with
    that step skipped); its threads stop and its descriptors are released so the test can reopen the directory."""
    with mock.patch.object(store._flush, "flush_queues_and_checkpoint"):
        store.shutdown()


def flush_queues_and_checkpoint(store: MessageStore) -> None:
    """The flush thread's periodic ConsumeQueue fsync and checkpoint, now."""
    store._flush.flush_queues_and_checkpoint()
