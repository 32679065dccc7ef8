"""Incremental splitting of a byte stream into remoting frames (shared by server and client).

The server decodes a connection's requests a few at a time (``feed``'s ``max_frames``) and keeps the rest as the
bytes they arrived in (``keep``) while the connection waits for its peer: a request costs its decoded form (a
command, its header fields, its body) only once it is about to run.
"""

from __future__ import annotations

from broker_store.protocol.frame import MAX_FRAME_SIZE, RemotingCommand, decode_frame_at, read_frame_length


class FrameReader:
    """Feed bytes, get decoded commands. Raises ProtocolError/FrameTooLargeError on bad input (in ``feed``, when
    the bad frame is reached: bytes only kept are checked when they are decoded)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held: whole frames not decoded yet (``feed`` with ``max_frames``, ``keep``) and a trailing
        incomplete frame."""
        return len(self._buf)

    def feed(self, data: bytes = b"", max_frames: int | None = None) -> list[RemotingCommand]:
        """Decode the whole frames of what is held followed by ``data``, at most ``max_frames`` (None: all);
        hold the rest."""
        # Whole frames are decoded straight from ``data`` when nothing is buffered (the common case):
        # only what is left undecoded is copied into the buffer.
        buf = self._buf
        src: bytes | bytearray
        if buf:
            buf += data
            src = buf
        else:
            src = data
        out: list[RemotingCommand] = []
        pos = 0
        n = len(src)
        cap = n if max_frames is None else max_frames  # a frame has at least 4 bytes: n never limits
        while n - pos >= 4 and len(out) < cap:
            total = read_frame_length(src, pos)
            end = pos + 4 + total
            if end > n:
                break
            out.append(decode_frame_at(src, pos + 4, end))
            pos = end
        if src is buf:
            if pos:
                del buf[:pos]  # O(1) at a bytearray's front: CPython moves its start
        elif pos < n:
            buf += memoryview(data)[pos:]
        return out

    def keep(self, data: bytes) -> None:
        """Hold ``data`` undecoded (a later ``feed`` decodes it)."""
        self._buf += data

    @property
    def ready(self) -> bool:
        """Whether a whole frame is held (``feed`` would decode one without more bytes)."""
        buf = self._buf
        if len(buf) < 4:
            return False
        total = int.from_bytes(buf[:4], "big", signed=True)
        return not 4 <= total <= MAX_FRAME_SIZE or len(buf) >= 4 + total  # a bad length too: ``feed`` raises

    def whole_frames(self) -> int:
        """Whole frames held (undecoded). Lengths are not validated: counting stops at a bad one."""
        return self._walk()[0]

    @property
    def partial(self) -> bool:
        """Whether what is held ends in an incomplete frame (bytes a peer has still to complete). A bad length
        counts as incomplete: its ``feed`` raises."""
        return self._walk()[1]

    def _walk(self) -> tuple[int, bool]:
        """(whole frames held, whether an incomplete frame or a bad length follows them)."""
        buf, pos, count = self._buf, 0, 0
        n = len(buf)
        while n - pos >= 4:
            total = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if total < 4 or pos + 4 + total > n:
                return count, True
            pos += 4 + total
            count += 1
        return count, pos < n
