"""Incremental splitting of a byte stream into remoting frames (shared by server and client)."""

from __future__ import annotations

from broker_store.protocol.frame import RemotingCommand, decode_frame_at, read_frame_length


class FrameReader:
    """Feed bytes, get decoded commands. Raises ProtocolError/FrameTooLargeError on bad input."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held (0 at a frame boundary)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        # Whole frames are decoded straight from ``data`` when nothing is buffered (the common case):
        # only a trailing partial frame is copied into the buffer.
        buf = self._buf
        src: bytes | bytearray
        if buf:
            buf += data
            src = buf
        else:
            src = data
        out = []
        pos = 0
        n = len(src)
        while n - pos >= 4:
            total = read_frame_length(src, pos)
            end = pos + 4 + total
            if end > n:
                break
            out.append(decode_frame_at(src, pos + 4, end))
            pos = end
        if src is buf:
            if pos:
                del buf[:pos]
        elif pos < n:
            buf += memoryview(data)[pos:]
        return out
