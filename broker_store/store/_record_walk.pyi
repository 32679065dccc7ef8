# Types of the C extension built from _record_walk.c (see its header comment and record_check.check_arrival).

def walk_arrival(data: bytes | memoryview, start: int, segment_size: int) -> tuple[int, bool]:
    """(the boundary after the last whole intact record, True), or (the damaged record's offset, False)."""
