"""tests/support/delay_proxy: the schedule of a delayed, optionally rate-capped direction (pure), the pump that
follows it on a ManualClock (in-memory streams, no sockets), and the child's arguments. The real-socket round
trip is tests/integration/test_delay_proxy.py."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from broker_store.clock import ManualClock
from tests.support.delay_proxy import DelayLine, DelayProxyProcess, LinkShape, Route, forward, parse_args, shapes


def test_without_a_rate_each_chunk_leaves_one_delay_after_it_arrived() -> None:
    line = DelayLine(LinkShape(0.025))
    assert [line.release(n, t) for n, t in ((100, 10.0), (1 << 20, 10.001), (5, 10.5))] == \
        pytest.approx([10.025, 10.026, 10.525])


def test_the_delay_does_not_limit_throughput_chunks_overlap_in_flight() -> None:
    line = DelayLine(LinkShape(0.050))
    releases = [line.release(65536, 1.0 + i * 0.001) for i in range(100)]  # 100 chunks in 0.1 s
    assert releases[-1] - releases[0] == pytest.approx(0.099)  # arrive 1 ms apart, leave 1 ms apart


def test_a_rate_cap_spaces_chunks_by_their_size_after_the_burst() -> None:
    line = DelayLine(LinkShape(0.010, rate=1000.0, burst=500))
    assert line.release(500, 0.0) == pytest.approx(0.010)  # the full bucket lets it through at once
    assert line.release(250, 0.0) == pytest.approx(0.260)  # empty: 250 bytes take 0.25 s
    assert line.release(250, 0.0) == pytest.approx(0.510)  # queued behind it
    assert line.release(100, 10.0) == pytest.approx(10.010)  # idle long enough: the bucket refilled
    assert line.release(2000, 10.0) == pytest.approx(10.0 + 1.6 + 0.010)  # larger than the bucket: 400 + 1600 ms


def test_releases_never_go_back_in_time() -> None:
    line = DelayLine(LinkShape(0.0, rate=100.0, burst=1))
    times = [line.release(n, t) for n, t in ((50, 0.0), (0, 0.1), (1, 0.2), (0, 5.0))]
    assert times == sorted(times)


@pytest.mark.parametrize("shape", [dict(delay=-1.0), dict(delay=float("nan")), dict(delay=0.0, rate=0.0),
                                   dict(delay=0.0, rate=float("inf")), dict(delay=0.0, burst=0)])
def test_a_bad_shape_is_refused_naming_the_field(shape: dict[str, float]) -> None:
    field = next(k for k in ("burst", "rate", "delay") if k in shape)
    with pytest.raises(ValueError, match=field):
        LinkShape(**shape)  # type: ignore[arg-type]


class _Writer:
    """What ``forward`` uses of a StreamWriter, recording what was written and when on the test's clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.writes: list[tuple[float, bytes]] = []
        self.eof_at: float | None = None

    def write(self, data: bytes) -> None:
        self.writes.append((self.clock.monotonic(), data))

    async def drain(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_at = self.clock.monotonic()


async def _settle() -> None:
    for _ in range(20):  # the clock wakes sleepers through call_soon: let them run
        await asyncio.sleep(0)


def test_the_pump_writes_each_chunk_at_its_release_and_delays_the_eof_too() -> None:
    clock = ManualClock(monotonic=100.0)
    writer = _Writer(clock)

    async def main() -> None:
        reader = asyncio.StreamReader()
        pump = asyncio.ensure_future(forward(reader, cast(asyncio.StreamWriter, writer),
                                             DelayLine(LinkShape(0.050)), clock))
        reader.feed_data(b"first")
        await _settle()
        clock.advance(0.030)
        reader.feed_data(b"second")  # arrives at 100.030, while "first" is still in flight
        await _settle()
        assert writer.writes == []
        clock.advance(0.020)
        await _settle()
        assert [d for _, d in writer.writes] == [b"first"] and writer.writes[0][0] == pytest.approx(100.050)
        reader.feed_eof()
        await _settle()
        clock.advance(0.030)
        await _settle()
        assert [d for _, d in writer.writes] == [b"first", b"second"]
        assert writer.writes[1][0] == pytest.approx(100.080) and writer.eof_at is None
        clock.advance(0.050)
        await _settle()
        await pump
        assert writer.eof_at == pytest.approx(100.130)

    asyncio.run(main())


def test_the_pump_stops_reading_past_its_buffer_until_the_far_side_took_data() -> None:
    clock = ManualClock(monotonic=0.0)
    writer = _Writer(clock)

    async def main() -> None:
        reader = asyncio.StreamReader()
        pump = asyncio.ensure_future(forward(reader, cast(asyncio.StreamWriter, writer),
                                             DelayLine(LinkShape(1.0)), clock, max_buffer=10))
        reader.feed_data(b"x" * 10)
        await _settle()
        reader.feed_data(b"y" * 4)
        await _settle()
        assert len(reader._buffer) == 4  # type: ignore[attr-defined]  # left unread: the buffer is full
        clock.advance(1.0)
        await _settle()
        assert [d for _, d in writer.writes] == [b"x" * 10] and writer.writes[0][0] == pytest.approx(1.0)
        assert len(reader._buffer) == 0  # type: ignore[attr-defined]
        reader.feed_eof()
        await _settle()
        clock.advance(1.0)
        await _settle()
        await pump
        assert [d for _, d in writer.writes] == [b"x" * 10, b"y" * 4]

    asyncio.run(main())


def test_the_child_takes_routes_delays_and_a_rate() -> None:
    args = parse_args(["--route", "127.0.0.1:0=127.0.0.1:9876", "--route", "127.0.0.2:10911=127.0.0.1:10911",
                       "--delay-ms", "25", "--rate-mbps", "100"])
    assert args.route == [Route("127.0.0.1:0", "127.0.0.1:9876"), Route("127.0.0.2:10911", "127.0.0.1:10911")]
    assert shapes(args) == (LinkShape(0.025, 100e6), LinkShape(0.025, 100e6))
    assert shapes(parse_args(["--route", "h:1=h:2", "--delay-ms", "10", "--inbound-delay-ms", "30"])) == \
        (LinkShape(0.010), LinkShape(0.030))
    command = DelayProxyProcess([Route("127.0.0.1:0", "127.0.0.1:1")], 25, rate_mbps=10).command
    assert parse_args(command[3:]).route == [Route("127.0.0.1:0", "127.0.0.1:1")]


@pytest.mark.parametrize("route", ["127.0.0.1:1", "127.0.0.1:1=nohost", "127.0.0.1:x=127.0.0.1:1"])
def test_a_bad_route_is_refused_naming_it(route: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--route", route, "--delay-ms", "1"])
    assert route in capsys.readouterr().err
