"""Incremental splitting of a byte stream into remoting frames (shared by server and client)."""

from __future__ import annotations

from broker_store.protocol.frame import RemotingCommand, decode_frame, read_frame_length


class FrameReader:
    """Feed bytes, get decoded commands. Raises ProtocolError/FrameTooLargeError on bad input."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[RemotingCommand]:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            total = read_frame_length(bytes(buf[pos:pos + 4]))
            if n - pos - 4 < total:
                break
            out.append(decode_frame(bytes(buf[pos + 4:pos + 4 + total])))
            pos += 4 + total
        if pos:
            del buf[:pos]
        return out
