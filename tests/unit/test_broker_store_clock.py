"""Every timer of ``broker_store`` reads the one injected clock (``broker_store/clock.py``): no module but the clock
reads the time module or arms an asyncio timer of its own, so none can slip past a ``ManualClock`` a test moves.
The process tools below are the exceptions, each with its reason; the remoting layer's timers driven by a
``ManualClock`` are tests/unit/test_remoting_clock.py's."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.import_graph import REPO

PACKAGE = REPO / "broker_store"

CLOCK_MODULE = "broker_store/clock.py"
"""The owner: ``SystemClock`` is where real time is read and real timers are armed."""

PROCESS_TOOLS: dict[str, str] = {
    "broker_store/cli/main.py": "the command line's produce/consume commands: a person's deadline and the elapsed "
                                "time printed for them, in the command's own process",
    "broker_store/deploy/image.py": "the container image build: the wall time the build took, reported to the "
                                    "operator",
    "broker_store/deploy/launcher.py": "starts broker, name server and controller processes and waits in real time "
                                       "for their readiness and exit (a child process runs on real time, not on a "
                                       "clock)",
    "broker_store/deploy/up.py": "`python -m broker_store up`: waits for the processes it started to be ready",
    "broker_store/deploy/etcd_members.py": "starts etcd member processes and waits for them to listen",
    "broker_store/deploy/up_supervisor.py": "`up`'s supervision rounds: restarts exited child processes with "
                                            "back-off (its ``now``/``sleep`` are injectable for its own tests)",
}
"""Modules that drive real processes from the outside, so real time is what they wait on."""

TIME_READS = frozenset({"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep"})
ASYNCIO_TIMERS = frozenset({"sleep", "wait_for", "timeout", "timeout_at"})
LOOP_TIMERS = frozenset({"call_later", "call_at"})


def _receiver(node: ast.expr) -> str:
    """The name a method is called on: ``clock`` for ``clock.f()``, ``_clock`` for ``self._clock.f()``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _on_a_clock(node: ast.Attribute) -> bool:
    return "clock" in _receiver(node.value).lower()


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


def _has_timeout(call: ast.Call, position: int) -> bool:
    return len(call.args) > position or any(k.arg == "timeout" for k in call.keywords)


def clock_reads(path: Path) -> list[str]:
    """Where ``path`` reads real time or arms a timer past the clock, as ``file:line what``."""
    return source_clock_reads(path.read_text(), path.relative_to(REPO).as_posix())


def source_clock_reads(source: str, where: str) -> list[str]:
    """``clock_reads`` of ``source``, named ``where``, in line order."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        at = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import) and any(alias.name == "time" for alias in node.names):
            found.append(f"{at} imports time")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found.append(f"{at} imports from time")
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            found.extend(f"{at} imports asyncio.{a.name}" for a in node.names if a.name in ASYNCIO_TIMERS)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func, name = node.func, node.func.attr
            module = func.value.id if isinstance(func.value, ast.Name) else ""
            if module == "time" and name in TIME_READS:
                found.append(f"{at} calls time.{name}")
            elif module == "asyncio" and name == "sleep" and not (node.args and _is_zero(node.args[0])):
                found.append(f"{at} calls asyncio.sleep")  # sleep(0) only yields to the loop: no timer
            elif module == "asyncio" and name in {"wait_for", "timeout", "timeout_at"}:
                found.append(f"{at} calls asyncio.{name}")
            elif module == "asyncio" and name == "wait" and _has_timeout(node, 1):
                found.append(f"{at} calls asyncio.wait with a timeout")
            elif name in LOOP_TIMERS and not _on_a_clock(func):
                found.append(f"{at} calls {_receiver(func.value) or '<expression>'}.{name}")
            elif name == "wait_for" and not _on_a_clock(func) and _has_timeout(node, 1):
                found.append(f"{at} calls {_receiver(func.value) or '<expression>'}.wait_for with a timeout")
    return sorted(found, key=lambda hit: int(hit.split(" ", 1)[0].rsplit(":", 1)[1]))


def test_no_broker_store_module_but_the_clock_and_the_process_tools_reads_time_or_arms_a_timer() -> None:
    """The request timeouts, connect waits, TLS timers, client back-offs and heartbeats, the etcd store's retry
    deadline and every server loop take their time from an injected ``Clock`` / ``ThreadClock``
    (``SYSTEM_CLOCK`` by default)."""
    skipped = {CLOCK_MODULE, *PROCESS_TOOLS}
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(REPO).as_posix() not in skipped
             for hit in clock_reads(path)]
    assert found == []


def test_the_exceptions_still_need_their_exception() -> None:
    """An exception for a module that reads no time any more is dropped, not kept (one whose file is gone exempts
    nothing)."""
    assert (REPO / CLOCK_MODULE).is_file()
    for module in (CLOCK_MODULE, *PROCESS_TOOLS):
        path = REPO / module
        assert not path.is_file() or clock_reads(path), f"{module} reads no time: remove it from the exceptions"


def test_the_guard_sees_each_kind_of_timer() -> None:
    """The checker itself: each way past the clock is reported, the clock's own calls and a bare yield are not."""
    lines = [
        "import time",  # 1
        "import asyncio",
        "from asyncio import wait_for",  # 3
        "async def f(loop, clock, self, cond):",
        "    time.monotonic()",  # 5
        "    await asyncio.sleep(0.5)",  # 6
        "    await asyncio.sleep(0)",
        "    await asyncio.wait_for(g(), 3)",  # 8
        "    async with asyncio.timeout(1): pass",  # 9
        "    await asyncio.wait({g()}, timeout=1)",  # 10
        "    loop.call_later(1, g)",  # 11
        "    asyncio.get_running_loop().call_at(1, g)",  # 12
        "    cond.wait_for(g, 2)",  # 13
        "    clock.call_later(1, g)",
        "    self._clock.call_later(1, g)",
        "    await self.clock.wait_for(g(), 1)",
        "    await asyncio.wait({g()})",
        "    cond.wait_for(g)",
    ]
    hits = source_clock_reads("\n".join(lines), "probe.py")
    assert [hit.split(" ", 1)[0] for hit in hits] == [f"probe.py:{n}" for n in (1, 3, 5, 6, 8, 9, 10, 11, 12, 13)]
