"""Whether a Docker daemon answers here: the one check the container tier (``tests/containers``) skips on.

The tier needs an engine, not only the ``docker`` client (some machines ship the client alone). The daemon is
asked with ``docker info``, as every later ``docker`` call of the tier would reach it (``DOCKER_HOST`` or the
default socket), so the reason a skip prints is the error those calls would have met.
"""

from __future__ import annotations

import shutil
import subprocess

DOCKER_TIMEOUT_S = 15.0
"""``docker info`` against a daemon that is starting up answers in well under a second; a hung one is no use."""


def docker_unavailable_reason(docker: str = "docker") -> str | None:
    """None when a daemon answers ``docker info``; otherwise why not, in one line with the client's own error."""
    path = shutil.which(docker)
    if path is None:
        return f"no {docker!r} client on PATH (Debian: apt-get install docker.io, then start dockerd)"
    try:
        done = subprocess.run([path, "info", "--format", "{{.ServerVersion}} {{.Driver}}"], capture_output=True,
                              text=True, timeout=DOCKER_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"no docker daemon answered `{path} info` within {DOCKER_TIMEOUT_S:g} s"
    text = " ".join((done.stderr or done.stdout).split())
    if done.returncode != 0:
        return f"no docker daemon answers `{path} info` (exit {done.returncode}): {text or 'no output'}"
    server = done.stdout.strip()
    if not server or server.startswith("<no value>"):
        return f"`{path} info` names no server: {text or 'no output'}"
    return None
