"""Configuration as Java-properties text: the body of GET_CONTROLLER_CONFIG (1010, the answer) and
UPDATE_CONTROLLER_CONFIG (1009, the request), as RocketMQ writes and reads it (MixAll.properties2String and
string2Properties, i.e. ``java.util.Properties``). The one owner of that text; the controller
(``controller.runtime_settings``) says which keys exist, the client and the CLI send and print it.

Format, UTF-8 (RocketMQ's charset for these bodies), one entry per logical line::

    # comment            ('#' or '!' first on a line; blank lines are skipped too)
    key=value            ('=' or ':' or whitespace ends the key; whitespace around the separator is dropped)
    key=long\\
        continued        (a line ending in an odd number of backslashes continues on the next, its indent dropped)

Escapes in keys and values: ``\\t \\n \\r \\f \\\\``, ``\\uXXXX``, and a backslash before any other character
stands for that character (``\\=``, ``\\:``, ``\\#``, ``\\ ``). When a key repeats, the last entry wins (as
``Properties.load``). ``encode_config`` escapes what ``decode_config`` would misread, so the two round-trip.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_store.protocol.errors import ProtocolError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\", "=": "\\=", ":": "\\:",
            "#": "\\#", "!": "\\!"}
_KEY_ENDS = "=: \t\f"


def decode_config(body: bytes) -> dict[str, str]:
    """The entries of a properties text, in order. ProtocolError on bytes that are not UTF-8, a malformed
    ``\\u`` escape or an empty key."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"configuration text is not UTF-8: {exc}") from exc
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        if not key:
            raise ProtocolError(f"configuration text line {number}: no key before the value {value!r}")
        out[_unescape(key, number)] = _unescape(value, number)
    return out


def encode_config(entries: Mapping[str, str]) -> bytes:
    """``key=value`` lines (``\\n``-separated, in the mapping's order) that ``decode_config`` reads back."""
    lines = []
    for key, value in entries.items():
        escaped_value = _escape(value)
        if escaped_value.startswith(" "):  # leading blanks of a value are dropped on reading
            escaped_value = "\\" + escaped_value
        lines.append(f"{_escape(key).replace(' ', chr(92) + ' ')}={escaped_value}\n")
    return "".join(lines).encode("utf-8")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, the joined logical line) of every entry."""
    out: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending, start = "", number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an unescaped backslash last: the entry continues on the next line
            pending += line[:-1]
            continue
        out.append((start, pending + line))
        pending = None
    if pending is not None:  # continued past the end of the text: what there is, as Properties does
        out.append((start, pending))
    return out


def _split(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of one logical line."""
    i = 0
    while i < len(line) and line[i] not in _KEY_ENDS:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(raw: str, number: int) -> str:
    out = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 == len(raw):
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2:i + 6]
            try:
                if len(digits) != 4:
                    raise ValueError(digits)
                out.append(chr(int(digits, 16)))
            except ValueError as exc:
                raise ProtocolError(f"configuration text line {number}: malformed \\uXXXX escape "
                                    f"{raw[i:i + 6]!r}") from exc
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _escape(text: str) -> str:
    return "".join(_ESCAPED.get(ch, ch) for ch in text)
