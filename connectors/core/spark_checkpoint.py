"""What a writer reads from its query's Spark checkpoint directory: the query id and the offset log.

Called on the driver by the writers' ``commit(messages, batchId)``: Python stream writers are told
neither the query id (the Delta txn app id of ``connectors.core.delta``) nor the batch's end offsets,
but both are in the checkpoint Spark wrote before the batch ran. Only local checkpoints (plain paths or
``file:`` URIs) are read; other file systems give None where the caller has a fallback.

Files read (Spark's formats, not ours)::

    <checkpoint>/metadata            {"id": "<query uuid>"}                  first line
    <checkpoint>/offsets/<batchId>   v1 / {metadata JSON} / one line per source (ours: a SourceOffset)
    <checkpoint>/commits/<batchId>   present once Spark committed the batch (only its name is read)

The replication writer also reads, when its query starts, which batch a restart re-runs
(``batches_sent_before``).
"""

from __future__ import annotations

import json
from pathlib import Path

from connectors.core.errors import OffsetFormatError, TableError
from connectors.core.offsets import SourceOffset


def checkpoint_dir(location: str) -> Path | None:
    """A local checkpoint path (``file:`` URIs accepted); None for other file systems."""
    if location.startswith("file://"):
        return Path(location[len("file://"):])
    if location.startswith("file:"):
        return Path(location[len("file:"):])
    if "://" in location:
        return None
    return Path(location)


def query_id_from_checkpoint(checkpoint_location: str | Path) -> str:
    """The Spark query id stored in ``<checkpoint>/metadata`` (``{"id": "<uuid>"}``).

    It is the id Spark keeps across restarts from the same checkpoint, hence the right Delta txn app id.
    """
    path = Path(checkpoint_location) / "metadata"
    try:
        first_line = path.read_text(encoding="utf-8").splitlines()[0]
        query_id = json.loads(first_line)["id"]
    except (OSError, IndexError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise TableError(f"cannot read the Spark query id from {path}: {exc!r}") from exc
    if not isinstance(query_id, str) or not query_id:
        raise TableError(f"{path}: 'id' is {query_id!r}, not a query id")
    return query_id


def read_offset_log(checkpoint_location: str, batch_id: int) -> SourceOffset | None:
    """The ``rocketmq`` source's end offset of ``batch_id`` from Spark's offset log, or None.

    ``<checkpoint>/offsets/<batchId>`` is ``v1``, a metadata JSON line, then one line per source; the
    first source line that parses as a ``SourceOffset`` is ours.
    """
    root = checkpoint_dir(checkpoint_location)
    if root is None or batch_id < 0:
        return None
    try:
        lines = (root / "offsets" / str(batch_id)).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        try:
            return SourceOffset.from_json(line)
        except OffsetFormatError:
            continue
    return None


def _batch_ids(directory: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    except OSError:  # no such directory yet: no batch
        return []


ATTEMPTS = "rocketmq_sink_attempts"
"""``<checkpoint>/rocketmq_sink_attempts/<batchId>``: an empty file the replication writer creates when Spark plans
the batch's write (ours, beside Spark's directories, which Spark ignores); its presence at the next planning of the
same batch id says an earlier run may have sent it."""


def batches_sent_before(checkpoint_location: str | None, resumed_elsewhere: bool) -> frozenset[int]:
    """Batch ids whose sends an earlier run may have made, as Spark plans a batch's write (it builds a new writer
    for every batch): the batch being planned (the offset log's last, without a commit) when its write was planned
    before (the ``ATTEMPTS`` file exists: a restart re-runs it under the same id), and batch 0 of a checkpoint with
    no commit when ``resumed_elsewhere`` (the link's offsets are in its Delta tables: an earlier query, whose
    checkpoint is gone, may have sent the batch this one starts with). Marks the batch as planned and removes the
    marks of older batches. A checkpoint this process cannot read (not local) tells nothing: none (Spark's task
    retries are still checked; see docs/replicator.md, "Duplicates")."""
    root = checkpoint_dir(checkpoint_location) if checkpoint_location else None
    if root is None:
        return frozenset()
    planned = _batch_ids(root / "offsets")
    if not planned:
        return frozenset({0}) if resumed_elsewhere else frozenset()
    last = planned[-1]
    if (root / "commits" / str(last)).exists():
        return frozenset()
    attempts = root / ATTEMPTS
    try:
        attempts.mkdir(exist_ok=True)
        for old in _batch_ids(attempts):
            if old < last:
                (attempts / str(old)).unlink(missing_ok=True)
        (attempts / str(last)).touch(exist_ok=False)
    except FileExistsError:
        return frozenset({last})
    except OSError as exc:
        raise TableError(f"cannot mark batch {last} as planned in {attempts}: {exc}") from exc
    first_of_checkpoint = not _batch_ids(root / "commits")
    return frozenset({last}) if first_of_checkpoint and resumed_elsewhere else frozenset()
