"""The pipelined pull schedule of one queue range (``connectors.replication.pull_window``), pure, and its use by
``pull_range_raw`` with a fake consumer whose answers may hold fewer messages than asked: every offset of the range
comes back once, in order, whatever the guess of the pulls in flight was."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

import pytest

from broker_store.client import PullResult, PullStatus
from broker_store.protocol.message import encode_stored_message
from connectors.replication.planning import QueueRange
from connectors.replication.pull_window import TASK_PULLS_IN_FLIGHT, PullWindow, depth_for
from connectors.replication.pulling import PullSettings, pull_range_raw


def test_the_window_asks_up_to_depth_pulls_ahead_and_stops_at_the_end() -> None:
    window = PullWindow(10, 30, batch=8, depth=3)
    assert window.fill() == [10, 18, 26]
    assert window.size(26) == 4
    assert window.fill() == []  # full
    assert window.answered(18) == [] and window.offset == 18
    assert window.fill() == []  # 30 is the end: nothing more to ask
    assert window.answered(26) == [] and window.answered(30) == []
    assert window.fill() == [] and not window.in_flight


def test_a_short_answer_drops_the_pulls_in_flight_and_asks_again_from_where_it_ended() -> None:
    window = PullWindow(0, 100, batch=10, depth=3)
    assert window.fill() == [0, 10, 20]
    assert window.answered(7) == [10, 20]  # 7 messages, not 10: the pulls at 10 and 20 are stale
    assert window.offset == 7 and window.fill() == [7, 17, 27]


def test_an_answer_past_the_guess_drops_the_pulls_in_flight_too() -> None:
    window = PullWindow(0, 100, batch=10, depth=2)
    window.fill()
    assert window.answered(25) == [10]  # a filter skipped entries: the pull at 10 would read them twice
    assert window.fill() == [25, 35]


def test_restart_drops_everything_in_flight() -> None:
    window = PullWindow(0, 100, batch=10, depth=4)
    window.fill()
    window.in_flight.popleft()  # the oldest pull failed
    assert window.restart(0) == [10, 20, 30] and window.fill() == [0, 10, 20, 30]


def test_a_window_needs_a_positive_batch_and_depth() -> None:
    with pytest.raises(ValueError, match="batch >= 1 and depth >= 1"):
        PullWindow(0, 10, batch=0)
    with pytest.raises(ValueError, match="depth 0"):
        PullWindow(0, 10, batch=1, depth=0)


class ShortConsumer:
    """Answers a pull at ``at`` with ``min(n, short(at))`` records."""

    def __init__(self, short: dict[int, int]) -> None:
        self.short = short
        self.asked: list[int] = []

    def pull_wait_budget(self) -> float:
        return 1.0

    def pull_async(self, mq: object, at: int, n: int, *, expression: str, decode: bool) -> Future[PullResult]:
        self.asked.append(at)
        n = min(n, self.short.get(at, n))
        raw = b"".join(encode_stored_message(topic=b"T", queue_id=0, queue_offset=o, physical_offset=o * 200,
                                             body=b"m%d" % o, properties=b"") for o in range(at, at + n))
        future: Future[PullResult] = Future()
        future.set_result(PullResult(PullStatus.FOUND, at + n, 0, 1000, [], 0, raw=raw))
        return future


SETTINGS = PullSettings(namesrv="127.0.0.1:9", group="g", cluster="src", tags="*", pull_batch_size=4,
                        fail_on_data_loss=True, pull_timeout_ms=1000, row_format="raw", link="L")


@pytest.mark.parametrize("depth", [1, 2, 4, 16])
@pytest.mark.parametrize("short", [{}, {0: 1}, {4: 3, 11: 2, 17: 1}, {i: 3 for i in range(0, 40)}])
def test_pulls_in_flight_return_every_offset_once_in_order(depth: int, short: dict[int, int]) -> None:
    consumer = ShortConsumer(short)
    got = list(pull_range_raw(dataclasses.replace(SETTINGS, pulls_in_flight=depth), QueueRange("T", "b", 0, 0, 30),
                              consumer))  # type: ignore[arg-type]
    spans = [(r.first_offset, r.last_offset) for r in got]
    assert [o for first, last in spans for o in range(first, last + 1)] == list(range(30))
    assert sum(r.count for r in got) == 30
    if not short:
        assert consumer.asked == list(range(0, 30, 4))  # no pull wasted when every answer is full


def test_a_task_of_many_ranges_keeps_fewer_pulls_in_flight_per_range() -> None:
    assert [depth_for(n) for n in (0, 1, 4, 8, 9, 16, 32, 33, 512)] == [4, 4, 4, 4, 3, 2, 1, 1, 1]
    assert all(depth_for(n) * n <= max(TASK_PULLS_IN_FLIGHT, n) for n in range(1, 600))
