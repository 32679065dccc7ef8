"""Disk full: whether the store's writes are failing for lack of space, and what a refused put answers.

Owned by ``MessageStore``: its put path reports each write's outcome here under the store lock and logs what
this returns. Pure (no I/O, no clock of its own: callers pass the time), so the spell's life is unit-tested.

A full disk is not an I/O error: nothing written is damaged, a failed put leaves the CommitLog's max offset
where it was (its partial bytes past it are overwritten by the next put, or cut by recovery), so the store
stays writable and simply tries again on the next put; the first put that fits ends the spell. Reads never
need space and go on. Any other write error still turns the store read-only (``MessageStore._put``).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says the device (or the user's quota) has no space left."""
    return exc.errno in DISK_FULL_ERRNOS


@dataclass
class DiskFullSpell:
    """One store's disk-full state. Not thread-safe: the store lock guards it."""

    where: str
    """The directory the store writes to (named in the remark)."""
    since: float | None = None
    """When the current spell began (the time of its first failed write); None while writes succeed."""
    refused: int = 0
    """Puts refused in the current spell."""

    @property
    def full(self) -> bool:
        return self.since is not None

    def write_failed(self, exc: OSError, now: float) -> tuple[str, bool]:
        """A put's write failed with ``exc`` (``is_disk_full``). Returns (the remark of its SERVICE_NOT_AVAILABLE
        answer, whether this failure began a spell: the caller logs that once, not each refusal)."""
        began = self.since is None
        if began:
            self.since = now
            self.refused = 0
        self.refused += 1
        reason = os.strerror(exc.errno) if exc.errno is not None else str(exc)
        return (f"disk full: no space left to write the commit log in {self.where} ({reason}); "
                "sends are refused until space is freed, reads go on"), began

    def write_succeeded(self, now: float) -> tuple[float, int] | None:
        """A put's write succeeded. At the end of a spell returns (seconds it lasted, puts it refused), for the
        caller to log; else None."""
        if self.since is None:
            return None
        lasted, refused = now - self.since, self.refused
        self.since, self.refused = None, 0
        return lasted, refused
