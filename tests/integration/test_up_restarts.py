"""`python -m broker_store up` supervising its members (real processes on 127.0.0.1): a broker killed -9 is restarted
(its pid file names the new process, it serves sends again), `restart-member` restarts a member on request, a
broker with ``restart: "no"`` stays down, and up's SIGTERM stops the restarted members too. The restart rule alone
is tests/unit/test_restart_policy.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from broker_store.client import Producer, new_message
from broker_store.protocol.errors import RocketMQError
from tests.support.processes import broker_listen_port, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


def sends(namesrv: str) -> bool:
    try:
        with Producer(namesrv, send_timeout=2.0) as producer:
            return producer.send(new_message("Restarts", b"hello")).ok
    except RocketMQError:
        return False


def test_up_restarts_a_killed_broker_on_request_and_leaves_a_restart_no_one_down(tmp_path: Path) -> None:
    namesrv = f"127.0.0.1:{free_port()}"
    config = {"clusters": [{"name": "r", "namesrv": {"listen": namesrv}, "brokers": [
        {"broker_name": "r-a", "listen": f"127.0.0.1:{broker_listen_port(fast_listen=False)}", "store_dir": "a",
         "fast_listen_enable": False},
        {"broker_name": "r-b", "listen": f"127.0.0.1:{broker_listen_port(fast_listen=False)}", "store_dir": "b",
         "fast_listen_enable": False, "restart": "no"}]}]}
    path, run, log = tmp_path / "clusters.yaml", tmp_path / "run", tmp_path / "up.log"
    path.write_text(yaml.safe_dump(config))
    with log.open("ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "broker_store", "up", "--config", str(path), "--run-dir",
                                 str(run)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, text=True)

    def pid(name: str) -> int:
        return int((run / f"{name}.pid").read_text())

    def logs() -> str:
        return log.read_text(errors="replace")[-4000:]

    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("READY "), logs()
        eventually(lambda: sends(namesrv), 30, "a send before the kill")

        first = pid("r-a")
        os.kill(first, signal.SIGKILL)
        eventually(lambda: pid("r-a") != first and alive(pid("r-a")), 30, lambda: f"r-a restarted:\n{logs()}")
        eventually(lambda: "r-a restarted (pid" in logs(), 30, lambda: f"r-a ready again:\n{logs()}")
        assert "r-a exited with code -9; restarting in 0.5 s (failure 1 in a row)" in logs()
        eventually(lambda: sends(namesrv), 30, "a send after the restart")

        second = pid("r-a")
        out = subprocess.run([sys.executable, "-m", "broker_store", "restart-member", "--run-dir", str(run), "r-a"],
                             capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr
        third = pid("r-a")
        assert out.stdout.strip() == f"r-a restarted: pid {third}" and third != second and not alive(second)
        assert "r-a: restart requested" in logs()

        down = pid("r-b")
        os.kill(down, signal.SIGKILL)
        eventually(lambda: "r-b exited with code -9; left down (restart: no)" in logs(), 30, logs)
        assert pid("r-b") == down

        eventually(lambda: "r-a restarted (pid" in logs().split("r-a: restart requested")[-1], 30, logs)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not alive(third)  # up stops what it restarted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid_file in run.glob("*.pid"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
