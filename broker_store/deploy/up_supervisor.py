"""``up``'s supervision of its children once they all started: restarts by policy, restarts asked for, pid files.

Called by ``broker_store.deploy.up.run_up`` once a round (every 0.2 s) until SIGINT/SIGTERM. Each round, per child:

    a restart asked for      ``<run_dir>/<name>.restart`` exists (``request_restart``, i.e. ``python -m broker_store
                             restart-member``): the file is removed, the child stopped (SIGTERM, then SIGKILL after
                             the grace period) and started again at once, whatever its state or policy
    found exited             ``restart_policy.RestartPolicy.exited`` says when to restart it (logged with the delay)
                             or that it stays down (logged once)
    restart due              started again; ``<run_dir>/<name>.pid`` is rewritten with the new pid before it is
                             waited for, and the child's READY address is logged. One that dies before it is ready
                             is found exited at the next round (the back-off grows)

Restarting waits for the child's readiness in the round (up to ``ready_timeout``): meanwhile the others are not
looked at, which costs nothing that matters (a member found exited a few seconds late is restarted a few seconds
late). ``up`` answers SIGINT/SIGTERM during that wait too and stops every child, the restarted one included.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from broker_store.deploy.launcher import ChildProcess
from broker_store.restart_policy import RestartMode, RestartPolicy

RESTART_SUFFIX = ".restart"
"""``<run_dir>/<name>.restart``: a restart of member ``name`` asked for (the file's content is not read)."""
PID_SUFFIX = ".pid"
"""``<run_dir>/<name>.pid``: the member's current pid, one decimal line."""


def write_pid(run_dir: Path, child: ChildProcess) -> None:
    """Record ``child``'s current pid in ``<run_dir>/<name>.pid`` (replaced atomically: a reader never sees half)."""
    if child.proc is None:
        return
    path = run_dir / f"{child.name}{PID_SUFFIX}"
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(f"{child.pid}\n")
    os.replace(temp, path)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Supervisor:
    """See the module docstring. ``policies`` by child name; a child without one is never restarted by policy."""

    def __init__(self, children: Sequence[ChildProcess], policies: Mapping[str, RestartPolicy], run_dir: Path, *,
                 now: Callable[[], float] = time.monotonic, ready_timeout: float = 60.0, grace: float = 10.0,
                 log: Callable[[str], None] = _log) -> None:
        self._children = list(children)
        self._policies = dict(policies)
        self._run_dir = run_dir
        self._now = now
        self._ready_timeout = ready_timeout
        self._grace = grace
        self._log = log
        self._due: dict[str, float] = {}
        """Children waiting for their restart, by name: when."""
        self._down: set[str] = set()
        """Children found exited and left down (reported once)."""
        start = now()
        for policy in self._policies.values():
            policy.started(start)

    def round(self) -> None:
        """One look at every child (see the module docstring)."""
        for child in self._children:
            name = child.name
            request = self._run_dir / f"{name}{RESTART_SUFFIX}"
            if request.exists():
                request.unlink(missing_ok=True)
                self._log(f"{name}: restart requested")
                policy = self._policies.get(name)
                if policy is not None:
                    policy.requested()
                child.stop(self._grace)
                self._due.pop(name, None)
                self._down.discard(name)
                self._restart(child)
                continue
            due = self._due.get(name)
            if due is not None:
                if self._now() >= due:
                    del self._due[name]
                    self._restart(child)
                continue
            if name in self._down or child.running():
                continue
            self._exited(child)

    def _exited(self, child: ChildProcess) -> None:
        code = child.proc.poll() if child.proc is not None else None
        policy = self._policies.get(child.name)
        now = self._now()
        when = policy.exited(code, now) if policy is not None else None
        if when is None:
            self._down.add(child.name)
            why = "restart: no" if policy is None or policy.mode is RestartMode.NO else "a clean exit"
            self._log(f"{child.name} exited with code {code}; left down ({why})")
            return
        assert policy is not None
        self._due[child.name] = when
        self._log(f"{child.name} exited with code {code}; restarting in {when - now:.1f} s "
                  f"(failure {policy.failures} in a row)")

    def _restart(self, child: ChildProcess) -> None:
        policy = self._policies.get(child.name)
        if policy is not None:
            policy.started(self._now())
        child.spawn()
        write_pid(self._run_dir, child)
        try:
            addr = child.wait_ready(self._ready_timeout)
        except RuntimeError as exc:  # it is dead now: the next round finds it exited
            self._log(f"{child.name}: restart failed: {exc}")
            return
        self._log(f"{child.name} restarted (pid {child.pid}) at {addr}")


def request_restart(run_dir: Path, name: str, timeout: float = 60.0, *,
                    now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    """Ask the ``up`` running with ``run_dir`` to restart member ``name`` and wait until its pid file names a new
    live process; that pid. ValueError when ``run_dir`` has no such member (the message lists the members),
    TimeoutError when nothing happened within ``timeout`` (is ``up`` running with this run directory?)."""
    pid_file = run_dir / f"{name}{PID_SUFFIX}"
    if not pid_file.exists():
        members = sorted(p.name.removesuffix(PID_SUFFIX) for p in run_dir.glob(f"*{PID_SUFFIX}"))
        raise ValueError(f"{run_dir} has no member {name!r} (members: {', '.join(members) or 'none'}); is it the "
                         "--run-dir of a running up?")
    before = pid_file.read_text().strip()
    request = run_dir / f"{name}{RESTART_SUFFIX}"
    request.write_text("")
    deadline = now() + timeout
    while now() < deadline:
        current = pid_file.read_text().strip()
        if current != before and current.isdigit() and not request.exists() and _alive(int(current)):
            return int(current)
        sleep(0.1)
    request.unlink(missing_ok=True)
    raise TimeoutError(f"{name} was not restarted within {timeout:g} s (its pid file still says {before}); is up "
                       f"running with --run-dir {run_dir}?")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
