"""A WAN between processes on loopback: a TCP proxy that delays each direction by a fixed one-way time.

Used by ``benchmarks/wan.py`` (the source cluster's name server and brokers reached through it) and its tests.
Each chunk read from one side is written to the other at its arrival + the direction's delay, in order, while
the next chunks keep arriving: many round trips' worth of data are in flight at once, so a sender that keeps
the pipe full gets the full rate and one that waits for each answer gets one chunk per round trip (a long fat
pipe). Optionally a bandwidth cap per direction (a token bucket: ``rate`` bytes/s, ``burst`` bytes), applied
before the delay as a link's serialisation is. A half-close (FIN) is delayed like data.

Layers: ``DelayLine`` is the pure schedule (arrival time -> release time, no sockets, no clock of its own);
``forward`` pumps one direction through it on an injected ``broker_store.clock.Clock``; ``DelayProxy`` listens
and pairs the two directions of each connection. In-process: ``async with DelayProxy(...)`` or ``await
proxy.start()`` / ``await proxy.close()``. As a child (its CPU then is not the caller's):
``python -m tests.support.delay_proxy --route LISTEN=UPSTREAM ... --delay-ms 25`` prints ``READY <listen> ...``
once it listens (``DelayProxyProcess`` starts and stops it).

A proxy buffers at most ``max_buffer`` bytes per direction (then stops reading, so TCP pushes back on the
sender): the window of a real path, large enough that a delay of tens of ms does not cap loopback rates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from broker_store.address import split_host_port
from broker_store.clock import SYSTEM_CLOCK, Clock

CHUNK = 256 * 1024
"""Bytes read per chunk: a chunk is released as one write."""
DEFAULT_MAX_BUFFER = 64 * 1024 * 1024


@dataclass(frozen=True)
class LinkShape:
    """One direction of the emulated path."""

    delay: float
    """One-way delay, seconds (>= 0)."""
    rate: float | None = None
    """Bandwidth cap, bytes per second; None: none."""
    burst: int = CHUNK
    """Token-bucket depth, bytes: how much may leave at once after the link was idle."""

    def __post_init__(self) -> None:
        if not (self.delay >= 0 and math.isfinite(self.delay)):
            raise ValueError(f"delay must be a finite number of seconds >= 0, not {self.delay!r}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number of bytes per second or None, not {self.rate!r}")
        if self.burst < 1:
            raise ValueError(f"burst must be at least 1 byte, not {self.burst!r}")


class DelayLine:
    """When each chunk of one direction leaves the far end: ``release(size, now)`` for a chunk that arrived at
    ``now`` (the times of one clock, non-decreasing). Without a rate that is ``now + delay``; with one, the chunk
    first waits for ``size`` tokens (the bucket refills at ``rate`` up to ``burst``; a chunk larger than the
    bucket empties it and waits for the rest), then travels ``delay``. Releases never go back in time, so data
    stays in order."""

    def __init__(self, shape: LinkShape) -> None:
        self.shape = shape
        self._tokens = float(shape.burst)
        self._at = -math.inf  # the time _tokens refers to (the last departure; may lie ahead of now)
        self._last_release = -math.inf

    def release(self, size: int, now: float) -> float:
        if size < 0:
            raise ValueError(f"a chunk has a size >= 0, not {size}")
        depart = now
        shape = self.shape
        if shape.rate is not None:
            start = max(now, self._at)
            tokens = self._tokens if start == self._at else min(
                float(shape.burst), self._tokens + (start - self._at) * shape.rate)
            if tokens >= size:
                depart, tokens = start, tokens - size
            else:
                depart, tokens = start + (size - tokens) / shape.rate, 0.0
            self._tokens, self._at = tokens, depart
        release = max(depart + shape.delay, self._last_release)
        self._last_release = release
        return release


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: DelayLine, clock: Clock,
                  max_buffer: int = DEFAULT_MAX_BUFFER) -> None:
    """Copy ``reader`` to ``writer`` until EOF, each chunk written at ``line.release`` of its arrival on
    ``clock``; then half-close ``writer`` (at EOF's own release time). At most ``max_buffer`` bytes wait: past
    that, reading pauses. Returns when everything read was written (or the writer's side failed: the
    connection is then torn down by the caller)."""
    pending: deque[tuple[float, bytes]] = deque()
    buffered = 0
    changed = asyncio.Event()
    done_reading = False

    async def read() -> None:
        nonlocal buffered, done_reading
        try:
            while True:
                while buffered >= max_buffer:
                    changed.clear()
                    await changed.wait()
                data = await reader.read(CHUNK)
                pending.append((line.release(len(data), clock.monotonic()), data))
                buffered += len(data)
                changed.set()
                if not data:
                    return
        except ConnectionError:
            pending.append((line.release(0, clock.monotonic()), b""))
            changed.set()
        finally:
            done_reading = True

    reading = asyncio.ensure_future(read())
    try:
        while True:
            while not pending:
                changed.clear()
                await changed.wait()
            due, data = pending[0]
            wait = due - clock.monotonic()
            if wait > 0:
                await clock.sleep(wait)
            pending.popleft()
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            buffered -= len(data)
            changed.set()
    finally:
        if not done_reading:
            reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await reading


@dataclass(frozen=True)
class Route:
    """One listening address of a proxy and where its connections go."""

    listen: str
    """host:port to listen on (port 0: any free port; ``DelayProxy.listening`` then says which)."""
    upstream: str
    """host:port each accepted connection is joined to."""


class DelayProxy:
    """Listens on each route's address and joins every accepted connection to the route's upstream through
    two ``forward`` pumps: ``outbound`` shapes client -> upstream, ``inbound`` upstream -> client."""

    def __init__(self, routes: Sequence[Route], outbound: LinkShape, inbound: LinkShape | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, max_buffer: int = DEFAULT_MAX_BUFFER) -> None:
        if not routes:
            raise ValueError("a delay proxy needs at least one route")
        self.routes = list(routes)
        self.outbound = outbound
        self.inbound = inbound if inbound is not None else outbound
        self._clock = clock
        self._max_buffer = max_buffer
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self.listening: list[str] = []
        """host:port actually bound, one per route in order (after ``start``)."""

    async def start(self) -> DelayProxy:
        for route in self.routes:
            host, port = split_host_port(route.listen)
            server = await asyncio.start_server(functools.partial(self._accept, upstream=route.upstream), host, port,
                                                limit=CHUNK)
            self._servers.append(server)
            bound = server.sockets[0].getsockname()
            self.listening.append(f"{bound[0]}:{bound[1]}")
        return self

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: str) -> None:
        task = asyncio.ensure_future(self._join(reader, writer, upstream))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _join(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                    upstream: str) -> None:
        host, port = split_host_port(upstream)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port, limit=CHUNK)
        except OSError:  # upstream down: the client sees its connection closed, as through a real path
            client_writer.close()
            return
        try:
            await asyncio.gather(
                forward(client_reader, up_writer, DelayLine(self.outbound), self._clock, self._max_buffer),
                forward(up_reader, client_writer, DelayLine(self.inbound), self._clock, self._max_buffer))
        except ConnectionError:
            pass  # one side reset: both are closed below, as a path would carry the reset
        finally:
            for writer in (up_writer, client_writer):
                writer.close()

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers:
            await server.wait_closed()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def __aenter__(self) -> DelayProxy:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


# -- as a child process ---------------------------------------------------------------------------------------

def _route(text: str) -> Route:
    listen, sep, upstream = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"a route is LISTEN=UPSTREAM (host:port=host:port), not {text!r}")
    for addr in (listen, upstream):
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise argparse.ArgumentTypeError(f"route {text!r}: {addr!r} is not host:port")
    return Route(listen, upstream)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.support.delay_proxy",
                                description="TCP proxy adding a one-way delay per direction (see the module doc)")
    p.add_argument("--route", type=_route, action="append", required=True, metavar="LISTEN=UPSTREAM")
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay of each direction, ms")
    p.add_argument("--inbound-delay-ms", type=float, default=None,
                   help="one-way delay upstream -> client, ms (default: --delay-ms)")
    p.add_argument("--rate-mbps", type=float, default=None, help="bandwidth cap per direction, 10^6 bytes/s")
    args = p.parse_args(argv)
    return args


def shapes(args: argparse.Namespace) -> tuple[LinkShape, LinkShape]:
    rate = None if args.rate_mbps is None else args.rate_mbps * 1_000_000
    inbound = args.delay_ms if args.inbound_delay_ms is None else args.inbound_delay_ms
    return LinkShape(args.delay_ms / 1000, rate), LinkShape(inbound / 1000, rate)


async def _serve(args: argparse.Namespace) -> None:
    outbound, inbound = shapes(args)
    async with DelayProxy(args.route, outbound, inbound) as proxy:
        print("READY " + " ".join(proxy.listening), flush=True)
        await asyncio.Event().wait()  # until SIGTERM / SIGKILL


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(args))
    else:
        uvloop.run(_serve(args))
    return 0


class DelayProxyProcess:
    """``python -m tests.support.delay_proxy`` as a child: ``start()`` returns the bound addresses (one per
    route, in order), ``stop()`` ends it (SIGTERM, then SIGKILL); a context manager too."""

    def __init__(self, routes: Sequence[Route], delay_ms: float, *, inbound_delay_ms: float | None = None,
                 rate_mbps: float | None = None) -> None:
        self.command = [sys.executable, "-m", "tests.support.delay_proxy", "--delay-ms", str(delay_ms)]
        for route in routes:
            self.command += ["--route", f"{route.listen}={route.upstream}"]
        if inbound_delay_ms is not None:
            self.command += ["--inbound-delay-ms", str(inbound_delay_ms)]
        if rate_mbps is not None:
            self.command += ["--rate-mbps", str(rate_mbps)]
        self.proc: subprocess.Popen[str] | None = None
        self.listening: list[str] = []

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the delay proxy is not started")
        return self.proc.pid

    def start(self) -> list[str]:
        root = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, text=True, cwd=root)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"delay proxy {' '.join(self.command)} did not start (exit {self.proc.returncode})")
        self.listening = line.split()[1:]
        return self.listening

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> DelayProxyProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
