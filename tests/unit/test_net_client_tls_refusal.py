"""A TLS-enforcing server answers a plain connection's first request "TLS required" and closes the connection
(``broker_store.net.tls``). The client never hands such a connection to another call: one that did would meet the
close as a reset ("Connection reset by peer") instead of the answer (CI: a plain Producer after a plain Admin in
one process, which share the connection pool, got the reset). Here the server keeps the refused connection open,
so the test does not depend on when the close arrives: the second call must come on a new connection."""

from __future__ import annotations

import asyncio

from broker_store.net.client import RemotingClient
from broker_store.net.framing import FrameReader
from broker_store.net.tls import TLS_REQUIRED_REMARK
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import TlsRequiredError, error_for_response
from broker_store.protocol.frame import RemotingCommand, encode_frame


def test_a_refused_plain_connection_is_not_reused() -> None:
    async def main() -> int:
        accepted = 0

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            frames = FrameReader()
            while data := await reader.read(65536):
                for cmd in frames.feed(data):
                    writer.write(encode_frame(cmd.response(ResponseCode.SYSTEM_ERROR, TLS_REQUIRED_REMARK)))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        client = RemotingClient()
        try:
            for _ in range(2):
                resp = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC), 5.0)
                assert isinstance(error_for_response(resp.code, resp.remark), TlsRequiredError)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()
        return accepted

    assert asyncio.run(main()) == 2
