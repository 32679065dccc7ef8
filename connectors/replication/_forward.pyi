# Types of the C extension built from _forward.c (see its header comment and forwarding.RecordForwarder.forward).

def forward_plain(
    buf: bytes, topic: bytes, queue_id: int, first: int, stop: int, dropped: tuple[bytes, ...], suffix: bytes,
    max_properties_length: int, position: bytes,
) -> tuple[list[bytes], list[int], list[int], list[int], list[int], int, int | None] | None:
    """Entries, offsets, body sizes, born times, record starts, next offset and oldest store time of a
    pull's plain records; None when a record needs the Python path (``forward_each``)."""
