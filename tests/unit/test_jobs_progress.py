"""jobs.progress: progress lines count messages (offset movement), not Spark rows (queue ranges)."""

from __future__ import annotations

from types import SimpleNamespace

from broker_store.client import MessageQueue
from connectors.core.offsets import SourceOffset
from jobs.progress import BatchMessages, batch_messages, describe_progress


def _doc(offsets: dict[MessageQueue, int]) -> str:
    return SourceOffset(offsets).to_json()


A0, A1, B0 = MessageQueue("A", "b", 0), MessageQueue("A", "b", 1), MessageQueue("B", "b", 0)


def test_messages_are_the_offset_movement() -> None:
    assert batch_messages(_doc({A0: 10, A1: 5}), _doc({A0: 110, A1: 5, B0: 7})) == BatchMessages(100, 1, 1, 3)
    assert batch_messages(None, _doc({A0: 3})) == BatchMessages(0, 1, 0, 1)
    assert batch_messages("None", _doc({A0: 3})) == BatchMessages(0, 1, 0, 1)  # the first batch, as pyspark says it
    assert batch_messages(_doc({A0: 10, A1: 5}), _doc({A0: 110, A1: 5}), _doc({A0: 150, A1: 9})) == (
        BatchMessages(100, 0, 1, 2, backlog=44))
    assert batch_messages(_doc({A0: 3}), None) is None
    assert batch_messages(_doc({A0: 3}), '{"kafka": 1}') is None


def test_progress_line() -> None:
    progress = SimpleNamespace(
        name="l1", batchId=7, numInputRows=4,
        durationMs={"triggerExecution": 500, "addBatch": 400, "walCommit": 0},
        sources=[SimpleNamespace(startOffset=_doc({A0: 0, A1: 3}), endOffset=_doc({A0: 4000, A1: 3, B0: 2}),
                                 latestOffset=_doc({A0: 4100, A1: 3, B0: 2}))])
    assert describe_progress(progress) == (
        "link l1 batch 7: source offsets +4000 on 1 of 3 queue(s) (+ 1 queue(s) read for the first time from their "
        "start point, not counted), 8000/s, backlog 100 in 500 ms (addBatch 400)")
    # not a replication query (no SourceOffset documents): named as a query, not as a link
    progress.name = "heartbeat"
    progress.sources = []
    assert describe_progress(progress).startswith("query heartbeat batch 7: 4 rows in 500 ms")
