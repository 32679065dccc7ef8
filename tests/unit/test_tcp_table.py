"""The one /proc/net/tcp reader (tests/support/tcp_table.py) finds this process's sockets by state."""

from __future__ import annotations

import os
import socket

from tests.support.tcp_table import ESTABLISHED, LISTEN, decode_address, tcp_sockets


def test_a_listening_socket_and_an_established_pair_are_found_with_their_addresses() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        listening = tcp_sockets(LISTEN)
        assert listening[os.fstat(server.fileno()).st_ino] == f"127.0.0.1:{port}"
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                established = tcp_sockets(ESTABLISHED)
                assert established[os.fstat(client.fileno()).st_ino] == f"127.0.0.1:{client.getsockname()[1]}"
                assert established[os.fstat(accepted.fileno()).st_ino] == f"127.0.0.1:{port}"
                assert os.fstat(server.fileno()).st_ino not in established


def test_addresses_decode_from_both_tables() -> None:
    assert decode_address("0100007F:1F90") == "127.0.0.1:8080"
    assert decode_address("00000000000000000000000001000000:0050") == "::1:80"
