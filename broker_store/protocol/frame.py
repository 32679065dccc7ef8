"""Remoting frames: the envelope every RocketMQ request and response travels in.

Used by ``broker_store.net`` (framing, correlation) and nothing else touches raw frames.

Wire layout (big-endian)::

    +-----------+----------------------------+----------------+--------------+
    | total: i32| type:u8 | header_len: u24  | header bytes   | body bytes   |
    +-----------+----------------------------+----------------+--------------+
    total = 4 + header_len + len(body); frames with total > MAX_FRAME_SIZE are refused.

Header serialisations (``type``):
  0 JSON: {"code":10,"language":"JAVA","version":395,"opaque":7,"flag":0,
           "remark":null,"extFields":{...},"serializeTypeCurrentRPC":"JSON"}
     extFields values may arrive as strings, numbers or booleans; they are normalised to the
     strings a Java client would have sent (True -> "true").
  1 ROCKETMQ (binary)::
       code i16 | language u8 | version i16 | opaque i32 | flag i32 |
       remark_len i32 | remark | ext_len i32 | (key_len i16 | key | val_len i32 | val)*
A response uses the serialisation of the request it answers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

from broker_store.protocol.codes import ROCKETMQ_VERSION, LanguageCode, SerializeType
from broker_store.protocol.errors import FrameTooLargeError, ProtocolError

MAX_FRAME_SIZE = 16 * 1024 * 1024
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_BIN_FIXED = struct.Struct(">hbhii")
_LANG_BY_NAME = {lang.name: lang for lang in LanguageCode}


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. Mutable envelope; the domain records inside are not."""

    code: int
    """Request code (requests) or response code (responses)."""
    ext_fields: dict[str, str] = field(default_factory=dict)
    """Header fields, always strings as a Java client sends them."""
    body: bytes = b""
    opaque: int = 0
    """Correlation id; a response echoes its request's."""
    flag: int = 0
    """Bit 0 response, bit 1 oneway."""
    remark: str | None = None
    language: LanguageCode = LanguageCode.PYTHON
    version: int = ROCKETMQ_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes = b"") -> RemotingCommand:
        """A response to this request, echoing its opaque and serialisation."""
        return RemotingCommand(code=code, ext_fields=ext_fields or {}, body=body, opaque=self.opaque,
                               flag=FLAG_RESPONSE, remark=remark, language=LanguageCode.JAVA,
                               version=self.version, serialize_type=self.serialize_type)


def _ext_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ProtocolError(f"extFields value of type {type(value).__name__} is not a string, number or boolean")


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "language": cmd.language.name,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "serializeTypeCurrentRPC": "JSON",
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    return orjson.dumps(header)


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        parts = [_BIN_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag)]
    except struct.error as exc:  # the binary header's code and version are i16, opaque and flag i32
        raise ProtocolError(f"code {cmd.code}, version {cmd.version}, opaque {cmd.opaque} or flag {cmd.flag} does "
                            f"not fit the binary (ROCKETMQ) header: {exc}") from exc
    remark = (cmd.remark or "").encode()
    parts.append(_I32.pack(len(remark)) + remark if cmd.remark is not None else _I32.pack(0))
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        k, v = key.encode(), value.encode()
        ext += struct.pack(">h", len(k)) + k + _I32.pack(len(v)) + v
    parts.append(_I32.pack(len(ext)) + bytes(ext))
    return b"".join(parts)


def encode_frame(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    if cmd.serialize_type == SerializeType.JSON:
        header = _encode_json_header(cmd)
    else:
        header = _encode_binary_header(cmd)
    total = 4 + len(header) + len(cmd.body)
    if total > MAX_FRAME_SIZE:
        raise FrameTooLargeError(f"frame of {total} bytes exceeds the {MAX_FRAME_SIZE}-byte limit")
    return b"".join((_PREFIX.pack(total, (int(cmd.serialize_type) << 24) | len(header)), header, cmd.body))


def _int32_field(header: dict[str, Any], name: str) -> int:
    value = header.get(name, 0)
    if value.__class__ is not int or not -(2**31) <= value < 2**31:
        raise ProtocolError(f"header field {name!r} must be a 32-bit integer, got {value!r}")
    return int(value)


def _decode_json_header(raw: bytes | bytearray | memoryview) -> RemotingCommand:
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from exc
    if header.__class__ is not dict:
        raise ProtocolError("header JSON is not an object")
    code = header.get("code")
    if code.__class__ is not int:  # excludes bool, a subclass of int
        raise ProtocolError(f"header field 'code' must be an integer, got {code!r}")
    lang_raw = header.get("language", "JAVA")
    if isinstance(lang_raw, str):
        language = _LANG_BY_NAME.get(lang_raw, LanguageCode.OTHER)
    elif isinstance(lang_raw, int) and 0 <= lang_raw < len(LanguageCode):
        language = LanguageCode(lang_raw)
    else:
        language = LanguageCode.OTHER
    version = _int32_field(header, "version")
    opaque = _int32_field(header, "opaque")
    flag = _int32_field(header, "flag")
    remark = header.get("remark")
    if remark is not None and remark.__class__ is not str:
        raise ProtocolError("header field 'remark' must be a string")
    ext_raw = header.get("extFields") or {}
    if ext_raw.__class__ is not dict:
        raise ProtocolError("header field 'extFields' must be an object")
    ext_fields = ext_raw
    for value in ext_raw.values():
        if value.__class__ is not str:  # Java clients send strings; convert only when someone did not
            ext_fields = {k: _ext_str(v) for k, v in ext_raw.items() if v is not None}
            break
    return RemotingCommand(code, ext_fields, b"", opaque, flag, remark, language, version)


def _decode_binary_header(raw: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
        pos = _BIN_FIXED.size
        (remark_len,) = _I32.unpack_from(raw, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(raw):
            raise ProtocolError(f"binary header remark length {remark_len} out of bounds")
        remark = raw[pos:pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(raw, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end != len(raw):
            raise ProtocolError(f"binary header extFields length {ext_len} does not match the header")
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = struct.unpack_from(">h", raw, pos)
            pos += 2
            key = raw[pos:pos + klen].decode()
            pos += klen
            (vlen,) = _I32.unpack_from(raw, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise ProtocolError("binary header extFields entry out of bounds")
            ext[key] = raw[pos:pos + vlen].decode()
            pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"malformed binary header: {exc}") from exc
    language = LanguageCode(lang) if 0 <= lang < len(LanguageCode) else LanguageCode.OTHER
    return RemotingCommand(code=code, ext_fields=ext, opaque=opaque, flag=flag, remark=remark,
                           language=language, version=version, serialize_type=SerializeType.ROCKETMQ)


def decode_frame(payload: bytes) -> RemotingCommand:
    """Decode one frame given everything after its 4-byte total-length prefix."""
    return decode_frame_at(payload, 0, len(payload))


def decode_frame_at(buf: bytes | bytearray, start: int, end: int) -> RemotingCommand:
    """Decode the frame whose payload (after the length prefix) is ``buf[start:end]``.

    Reads the header in place and copies only the body, once (the stream reader's hot path).
    """
    size = end - start
    if size < 4:
        raise ProtocolError(f"frame of {size} bytes is shorter than its header-length field")
    (mark,) = _I32.unpack_from(buf, start)
    serialize, header_len = (mark >> 24) & 0xFF, mark & 0xFFFFFF
    if 4 + header_len > size:
        raise ProtocolError(f"header length {header_len} exceeds the frame ({size} bytes)")
    h0 = start + 4
    h1 = h0 + header_len
    if serialize == SerializeType.JSON:
        cmd = _decode_json_header(memoryview(buf)[h0:h1] if buf.__class__ is bytearray else buf[h0:h1])
    elif serialize == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(bytes(buf[h0:h1]))
    else:
        raise ProtocolError(f"unknown header serialisation type {serialize}")
    if h1 < end:
        cmd.body = buf[h1:end] if buf.__class__ is bytes else bytes(memoryview(buf)[h1:end])
    return cmd


def read_frame_length(prefix: bytes | bytearray, pos: int = 0) -> int:
    """Validate the 4-byte total-length prefix at ``pos`` and return the payload length after it."""
    (total,) = _I32.unpack_from(prefix, pos)
    if total < 4 or total > MAX_FRAME_SIZE:
        raise FrameTooLargeError(f"frame length {total} outside [4, {MAX_FRAME_SIZE}]")
    return int(total)
