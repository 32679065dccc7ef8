"""The journal of a link's disaster-recovery operation: one small file beside the link's Delta tables.

Written by ``jobs.dr.operation.OperationRunner`` before and after each step (and by a step's ``save``); read
by every ``jobs.dr`` command of the link. The file is the broker's versioned metadata file
(``broker_store.durable_file``: version, CRC32 of the payload, a ``.bak`` copy, each replaced
atomically), so a crash leaves the previous record or the new one, never a torn one. Layout::

    <delta_location>/<link>/dr_operation.json
    {"version": 1, "crc32": <n>,
     "operation": {"id": "<12 hex>", "kind": "switchover", "link": "<link>", "state": "running",
                   "created_at": <s>, "finished_at": <s> | null,
                   "steps": [{"name": "preflight", "state": "done", "started_at": <s>, "finished_at": <s>,
                              "attempts": 1, "result": {...}, "progress": {...}, "error": null}, ...]}}

One operation per link at a time: a finished one is replaced by the next.
"""

from __future__ import annotations

from pathlib import Path

from broker_store.durable_file import read_metadata_file, write_metadata_file
from broker_store.protocol.errors import StoreError
from connectors.core.errors import TableError
from jobs.dr.operation import OperationRecord

JOURNAL_FILE = "dr_operation.json"


class FileJournal:
    """The journal file of one link (``jobs.dr.operation.Journal``)."""

    def __init__(self, tables_location: Path) -> None:
        self.path = tables_location / JOURNAL_FILE

    def load(self) -> OperationRecord | None:
        try:
            payload = read_metadata_file(self.path)
        except StoreError as exc:
            raise TableError(f"the operation journal cannot be read: {exc}") from exc
        if payload is None:
            return None
        try:
            return OperationRecord.from_json(payload["operation"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TableError(f"the operation journal {self.path} is not one this version reads: {exc!r}") from exc

    def save(self, record: OperationRecord) -> None:
        try:
            write_metadata_file(self.path, {"operation": record.to_json()})
        except StoreError as exc:
            raise TableError(f"the operation journal cannot be written: {exc}") from exc
