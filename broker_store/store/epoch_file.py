"""The epoch file: an ``EpochCache`` on disk, in RocketMQ's ``epochFileCheckpoint`` layout, written crash-safely.

Controller mode only. ``EpochFile`` is what the broker holds: it loads the cache at start and writes every
change (promotion's cut and append, a replica's mirrored entries, rejoin truncation) before the change is
visible. The rules (strictly increasing entries, consistent point) are ``store.epoch_cache``'s.

Layout of ``<store_dir>/epochFileCheckpoint`` and of its copy ``epochFileCheckpoint.bak`` (ASCII, decimal,
every line ends with "\\n")::

    line        content                  meaning
    1           N                        number of entries
    2           CRC                      zlib.crc32 of lines 3..N+2, each with its "\\n", & 0x7FFFFFFF;
                                         0 = not checked (a hand-written file)
    3 .. N+2    <epoch>-<startOffset>    one EpochEntry per line, oldest first

    e.g. "2\\n773307083\\n7-7000\\n8-8000\\n" (the example of RocketMQ's CheckpointFile)

Version 1 (``EPOCH_FILE_VERSION``). The layout is RocketMQ's byte for byte and has no version field, so
the version is the file name: a different layout would get a different name, never this one.

Writing: RocketMQ rewrites both files in place without fsync. Here each file is replaced atomically (temp
file, fsync, rename, fsync of the directory), the main file first, then the ``.bak``: a crash leaves
each file either old or new and whole, and the main file is never older than the ``.bak``. Reading takes
the main file; when it is missing or fails its checks (count, CRC, entry syntax, entry order) the
``.bak``; when neither exists the cache is empty (a store that never ran in controller mode); when
files exist but none is valid, ``load_epoch_file`` raises rather than guess.
"""

from __future__ import annotations

import logging
import re
import zlib
from pathlib import Path

from broker_store.durable_file import replace_file
from broker_store.protocol.errors import CorruptRecordError, StoreError
from broker_store.store.epoch_cache import EpochCache, EpochEntry

log = logging.getLogger(__name__)

EPOCH_FILE = "epochFileCheckpoint"
EPOCH_FILE_BACKUP = EPOCH_FILE + ".bak"
EPOCH_FILE_VERSION = 1
"""The layout above; it is named, not stored (see the module docstring)."""
UNCHECKED_CRC = 0
_CRC_MASK = 0x7FFFFFFF
_NUMBER = re.compile(r"[0-9]+")
_ENTRY = re.compile(r"([0-9]+)-([0-9]+)")


def entry_lines_crc(entry_lines: bytes) -> int:
    """Line 2's checksum of the entry lines (each with its trailing newline)."""
    return zlib.crc32(entry_lines) & _CRC_MASK


def encode_epoch_file(cache: EpochCache) -> bytes:
    """The file content for ``cache`` (always with its CRC)."""
    body = "".join(f"{entry.epoch}-{entry.start_offset}\n" for entry in cache.entries).encode("ascii")
    return f"{len(cache)}\n{entry_lines_crc(body)}\n".encode("ascii") + body


def decode_epoch_file(raw: bytes) -> EpochCache:
    """The cache in ``raw``; CorruptRecordError saying what is wrong when a check fails."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"not ASCII: {exc}") from exc
    if text.endswith("\n"):
        text = text[:-1]
    lines = text.split("\n")
    if len(lines) < 2 or not _NUMBER.fullmatch(lines[0]) or not _NUMBER.fullmatch(lines[1]):
        raise CorruptRecordError("the first two lines are not an entry count and a checksum")
    count, crc = int(lines[0]), int(lines[1])
    entry_lines = lines[2:]
    if count != len(entry_lines):
        raise CorruptRecordError(f"the count line says {count} entries, the file holds {len(entry_lines)}")
    if crc != UNCHECKED_CRC:
        actual = entry_lines_crc("".join(line + "\n" for line in entry_lines).encode("ascii"))
        if actual != crc:
            raise CorruptRecordError(f"checksum {crc} does not match the entries' {actual}")
    entries = []
    for number, line in enumerate(entry_lines, start=3):
        match = _ENTRY.fullmatch(line)
        if match is None:
            raise CorruptRecordError(f"line {number} {line!r} is not <epoch>-<startOffset>")
        entries.append(EpochEntry(int(match[1]), int(match[2])))
    try:
        return EpochCache(entries)
    except StoreError as exc:
        raise CorruptRecordError(str(exc)) from exc


def load_epoch_file(directory: Path) -> EpochCache:
    """The cache in ``directory``: the main file, else the ``.bak``, else empty when neither exists.

    Raises CorruptRecordError when a file exists but none is valid (naming each file's problem), and
    StoreError when a file cannot be read.
    """
    problems: list[str] = []
    for name in (EPOCH_FILE, EPOCH_FILE_BACKUP):
        path = directory / name
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(f"cannot read the epoch file {path}: {exc}") from exc
        try:
            cache = decode_epoch_file(raw)
        except CorruptRecordError as exc:
            log.warning("epoch file %s is corrupt: %s", path, exc)
            problems.append(f"{path}: {exc}")
            continue
        if name == EPOCH_FILE_BACKUP:
            log.warning("epoch file %s missing or corrupt; using its backup %s", directory / EPOCH_FILE, path)
        return cache
    if problems:
        raise CorruptRecordError("no valid epoch file: " + "; ".join(problems))
    return EpochCache()


def write_epoch_file(directory: Path, cache: EpochCache) -> None:
    """Replace the main file, then the ``.bak``, each atomically (temp file, fsync, rename, fsync directory).

    Raises StoreError on an I/O failure; the files then hold the old or the new cache, each whole.
    """
    raw = encode_epoch_file(cache)
    for name in (EPOCH_FILE, EPOCH_FILE_BACKUP):
        path = directory / name
        try:
            replace_file(path, raw)
        except OSError as exc:
            raise StoreError(f"cannot write the epoch file {path}: {exc}") from exc


class EpochFile:
    """A broker's epoch cache, kept in ``directory`` (the store directory). Each change is written to disk
    before ``cache`` shows it. A failed write (StoreError) leaves ``cache`` as it was, though the main file
    may already hold the change (the next load then returns it): stop, or retry the same change. Not
    thread-safe: the role change and HA code that change it run one at a time."""

    def __init__(self, directory: Path, cache: EpochCache) -> None:
        self.directory = directory
        self._cache = cache

    @classmethod
    def open(cls, directory: Path) -> EpochFile:
        """Load the cache in ``directory`` (see ``load_epoch_file``)."""
        return cls(directory, load_epoch_file(directory))

    @property
    def cache(self) -> EpochCache:
        return self._cache

    def append(self, entry: EpochEntry) -> None:
        """Add ``entry`` as the newest (``EpochCache.appended``'s rules) and persist it."""
        self._replace(self._cache.appended(entry))

    def begin_epoch(self, epoch: int, start_offset: int) -> None:
        """A promotion (RocketMQ's changeToMaster): cut the entries starting at or past ``start_offset`` (they
        describe bytes the log no longer holds, or an epoch that wrote nothing), then append (epoch,
        start_offset), each durably. When the newest entry left is already ``epoch`` (a primary promoted again
        within its own epoch, after a restart before the controller noticed) it is kept: that epoch's range
        still starts where it started, and nobody else wrote in it. An older epoch raises StoreError."""
        self.truncate_suffix(start_offset)
        if self.cache.last_epoch != epoch:
            self.append(EpochEntry(epoch, start_offset))

    def truncate_suffix(self, offset: int) -> None:
        """Drop entries starting at or past ``offset`` (the CommitLog was, or is about to be, cut there)."""
        self._replace(self._cache.truncated_suffix(offset))

    def _replace(self, cache: EpochCache) -> None:
        if cache is not self._cache:
            write_epoch_file(self.directory, cache)
            self._cache = cache
