"""The Prometheus endpoint of a broker or a controller: ``GET /metrics`` over plain HTTP/1.1, served on the
server's own event loop and rendered at each scrape from the metric families an async ``collect`` returns, so a
collector reads its server's state on the loop that changes it, never from another thread.

``broker.metrics`` and ``controller.metrics`` own what is exported; this module only answers scrapes: one request
per connection, which must arrive whole (at most ``MAX_REQUEST_BYTES``) within ``REQUEST_TIMEOUT_S``; any other
path or method is answered 404 / 405. Off unless a port is configured (docs/operations.md, "Monitoring").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

from broker_store.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

Collect = Callable[[], Awaitable[Iterable[Metric]]]
"""The metric families of one scrape, read on the server's event loop."""

REQUEST_TIMEOUT_S = 10.0
"""A scrape's request must arrive whole within this long (Prometheus's default scrape timeout)."""
MAX_REQUEST_BYTES = 16 * 1024
"""Request line and headers; a longer request is dropped."""
PATH = "/metrics"


class _Families:
    """A prometheus_client collector over families already collected."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


async def render(collect: Collect, accept: str = "text/plain") -> tuple[bytes, str]:
    """What ``collect`` returns in the exposition format the scraper's ``Accept`` header asks for (Prometheus's text
    format, or OpenMetrics), and its content type. Tests read it without a socket."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(await collect()))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


class MetricsServer:
    """``http://<host>:<port>/metrics`` (port 0: an ephemeral port, ``port`` after ``start``)."""

    def __init__(self, collect: Collect, host: str, port: int, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._collect = collect
        self.host = host
        self.port = port
        self._clock = clock
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; OSError (the port is taken, the host is not this machine's) is the caller's to report."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_REQUEST_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics at http://%s:%d%s", self.host, self.port, PATH)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not await self._clock.wait_for(self._answer(reader, writer), REQUEST_TIMEOUT_S):
                log.debug("metrics request from %s: not whole within %.0f s", writer.get_extra_info("peername"),
                          REQUEST_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            log.debug("metrics request from %s dropped: %s", writer.get_extra_info("peername"), exc)
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request, *headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, _, rest = request.partition(" ")
        target = rest.partition(" ")[0].partition("?")[0]
        accept = next((value.strip() for name, _, value in (h.partition(":") for h in headers)
                       if name.strip().lower() == "accept"), "text/plain")
        if target != PATH:
            writer.write(_response("404 Not Found", f"only {PATH} is served\n".encode()))
        elif method != "GET":
            writer.write(_response("405 Method Not Allowed", b"GET only\n"))
        else:
            try:
                body, content_type = await render(self._collect, accept)
            except Exception as exc:  # a failed scrape answers 500; the server goes on
                log.exception("metrics collection failed")
                writer.write(_response("500 Internal Server Error", f"collection failed: {exc}\n".encode()))
            else:
                writer.write(_response("200 OK", body, content_type))
        await writer.drain()
