"""A size-limited tmpfs that only some processes see: the tests' full disk (docs/operations.md, "Damaged files and a
full disk").

``private_tmpfs`` mounts a tmpfs of a given size at a directory inside a private mount namespace held by
a ``sleep`` it starts, so the files outlive the processes a test runs there and restarts (a broker, a
replicator job); they enter it with ``nsenter_argv`` in front of their command. The test itself reaches the
tmpfs through ``/proc/<holder>/root`` (``PrivateTmpfs.inside``) to fill it (``fill``) and free it again.
Nothing is mounted in the test's own namespace, so nothing is left behind: killing the holder after
the last process inside it ended takes the tmpfs with it. Needs root (or CAP_SYS_ADMIN), ``unshare``,
``nsenter`` and ``mount``: the test is skipped without them. Used by tests/integration/test_disk_full.py
(a broker's store) and tests/spark/test_disk_full_job.py (a job's checkpoint and Delta tables).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class PrivateTmpfs:
    mountpoint: Path
    """Where the tmpfs is mounted, as processes inside the namespace see it."""
    holder: subprocess.Popen[bytes]
    """The ``sleep`` that keeps the namespace (and so the tmpfs) alive."""

    def inside(self, path: Path | None = None) -> Path:
        """``path`` (default: the mount point) as the test's own namespace reaches it."""
        target = path or self.mountpoint
        return Path(f"/proc/{self.holder.pid}/root") / target.relative_to("/")

    def nsenter_argv(self, cwd: Path | None = None) -> list[str]:
        """The prefix that runs a command inside the namespace, in ``cwd`` (default: this process's working
        directory; entering a mount namespace moves nsenter to "/", and the command must import this
        checkout's code)."""
        return ["nsenter", "-t", str(self.holder.pid), "-m", f"--wd={cwd or os.getcwd()}", "--"]


@contextmanager
def private_tmpfs(mountpoint: Path, size: str) -> Iterator[PrivateTmpfs]:
    """A tmpfs of ``size`` (``mount -o size=``: ``6m``) at ``mountpoint`` (created), in a private mount
    namespace held until the block ends; skips the test when it cannot be mounted."""
    missing = [tool for tool in ("unshare", "nsenter", "mount") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mkdir -p "$0" && mount -t tmpfs -o size="$1" tmpfs "$0" && echo READY && exec sleep 600',
         str(mountpoint), size], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert holder.stdout is not None and holder.stderr is not None
    if holder.stdout.readline().strip() != b"READY":
        holder.wait(10)
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace: {holder.stderr.read().decode().strip()}")
    try:
        yield PrivateTmpfs(mountpoint, holder)
    finally:
        holder.kill()  # the last process of the namespace: the tmpfs goes with it
        holder.wait(10)


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the file system is full; returns the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk) or 0
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written
