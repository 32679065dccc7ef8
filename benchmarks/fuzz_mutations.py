"""Mutation of valid seed inputs for ``benchmarks/fuzz.py``: byte-level (bit flips, overwritten and inserted
bytes, truncation, length fields that lie, random bytes) and structural (a JSON or YAML document with one
value replaced by another of a random type). Deterministic for a given ``random.Random``: a run is repeated
exactly with the same ``--seed``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Any

# Integers a length or count field is most likely to mishandle: zero, one, sign and width boundaries.
_LIES = (0, 1, 2, 3, 4, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF,
         0x80000000, 0xFFFFFFFF, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF, 16 * 1024 * 1024,
         16 * 1024 * 1024 + 1)
_WIDTHS = (1, 2, 4, 8)

Mutation = Callable[[random.Random, bytearray], None]


def _bit_flips(rng: random.Random, buf: bytearray) -> None:
    for _ in range(rng.randint(1, 4)):
        if buf:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)


def _set_bytes(rng: random.Random, buf: bytearray) -> None:
    for _ in range(rng.randint(1, 4)):
        if buf:
            buf[rng.randrange(len(buf))] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))


def _truncate(rng: random.Random, buf: bytearray) -> None:
    if buf:
        del buf[rng.randrange(len(buf)):]


def _cut_middle(rng: random.Random, buf: bytearray) -> None:
    if len(buf) > 1:
        start = rng.randrange(len(buf))
        del buf[start:start + rng.randint(1, max(1, len(buf) // 4))]


def _insert_random(rng: random.Random, buf: bytearray) -> None:
    at = rng.randint(0, len(buf))
    buf[at:at] = rng.randbytes(rng.choice((1, 2, 4, 8, rng.randint(1, 64))))


def _duplicate_chunk(rng: random.Random, buf: bytearray) -> None:
    if buf:
        start = rng.randrange(len(buf))
        chunk = buf[start:start + rng.randint(1, 64)]
        at = rng.randint(0, len(buf))
        buf[at:at] = chunk * rng.randint(1, 3)


def _length_lie(rng: random.Random, buf: bytearray) -> None:
    """Overwrite a big-endian integer (1, 2, 4 or 8 bytes; most often at the start of the buffer or at an
    aligned offset, where the formats keep their length fields) with a boundary value or the buffer's own
    length give or take a little."""
    width = rng.choice(_WIDTHS)
    if len(buf) < width:
        return
    if rng.random() < 0.3:
        at = 0
    else:
        at = rng.randrange(0, len(buf) - width + 1)
        if rng.random() < 0.6:
            at -= at % width
    value = rng.choice((*_LIES, len(buf) + rng.randint(-8, 8), rng.getrandbits(8 * width)))
    value &= (1 << (8 * width)) - 1
    buf[at:at + width] = value.to_bytes(width, "big")


def _random_bytes(rng: random.Random, buf: bytearray) -> None:
    buf[:] = rng.randbytes(rng.choice((0, 1, 3, 4, 8, 12, 16, 20, 36, rng.randint(0, 512))))


BYTE_MUTATIONS: tuple[Mutation, ...] = (_bit_flips, _set_bytes, _truncate, _cut_middle, _insert_random,
                                         _duplicate_chunk, _length_lie, _length_lie)


def mutate_bytes(rng: random.Random, seed: bytes, *, random_share: float = 0.05) -> bytes:
    """One to three byte-level mutations of ``seed`` (``random_share`` of the time: random bytes instead)."""
    buf = bytearray(seed)
    if rng.random() < random_share:
        _random_bytes(rng, buf)
        return bytes(buf)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        rng.choice(BYTE_MUTATIONS)(rng, buf)
    return bytes(buf)


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON/YAML value of a random type: the wrong type where a decoder expects another is the point."""
    kind = rng.randrange(10 if depth < 2 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((True, False))
    if kind == 2:
        return rng.choice((0, -1, 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**64, 10**30, rng.randint(-99, 99)))
    if kind == 3:
        return rng.choice((0.5, -1.5, 1e308, -0.0))
    if kind in (4, 5, 6):
        return rng.choice(("", " ", "x", "-1", "0", "1e3", "true", "null", "\x00", "é", "a" * 300, "127.0.0.1:0",
                           "*", "DENY", "PUB|SUB", "%RETRY%", "TopicA=PUB", "{}", "[]", str(rng.random())))
    if kind in (7, 8):
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(("a", "topicName", "brokerAddrs", "0", "1", "", "accessKey")): random_value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``doc`` (dict keys and list indexes), the root's ``()`` first."""
    out = [path]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_nodes(value, (*path, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out.extend(_nodes(value, (*path, index)))
    return out


def mutate_document(rng: random.Random, doc: Any) -> Any:
    """A copy of a parsed JSON/YAML document with one to three nodes replaced, dropped or duplicated."""
    import copy

    doc = copy.deepcopy(doc)
    for _ in range(rng.choice((1, 1, 2, 3))):
        paths = _nodes(doc)
        path = rng.choice(paths)
        if not path:
            doc = random_value(rng) if rng.random() < 0.2 else doc
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = rng.randrange(3)
        if action == 0 or not isinstance(parent, dict | list):
            parent[last] = random_value(rng)
        elif action == 1:
            del parent[last]
        elif isinstance(parent, dict):
            parent[f"{last}{rng.choice(('', '_', 'X'))}" if isinstance(last, str) else last] = random_value(rng)
        else:
            parent.insert(last, random_value(rng))
    return doc


def pick(rng: random.Random, seeds: Sequence[bytes]) -> bytes:
    return seeds[rng.randrange(len(seeds))]


def pack_be(fmt: str, *values: int) -> bytes:
    return struct.pack(">" + fmt, *values)
