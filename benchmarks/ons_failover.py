"""An off-the-shelf RocketMQ 4.x client through the failure of a controller-mode primary: ali-ons 3.12.0 (pure
JavaScript, pinned in ``benchmarks/clients/ali-ons``) sending every 20 ms; how long from the fault to its first
SEND_OK?

    .venv/bin/python benchmarks/ons_failover.py                      # client defaults (pollNameServerInteval 30 s)
    .venv/bin/python benchmarks/ons_failover.py --poll-ms 1000       # the setting docs/brokers.md recommends
    .venv/bin/python benchmarks/ons_failover.py --groups 2           # the topic on two groups, client defaults
    .venv/bin/python benchmarks/ons_failover.py --kind pause         # SIGSTOP instead of kill -9
    .venv/bin/python benchmarks/ons_failover.py --kind pause --poll-ms 1000 --send-timeout-ms 1000
    .venv/bin/python benchmarks/ons_failover.py --primary-address --interval 10   # each group a primary address

One run: ``python -m broker_store up`` starts a name server with the embedded controller (heartbeat timeout 1.5 s)
and ``--groups`` controller-mode groups of three (SYNC_MASTER, ``in_sync_replicas`` 2, ``restart: on-failure``) in a
temporary directory; topic OnsFailover gets 4 queues on every group; ``node send.js`` (installed first with
``npm ci`` from the lock file there when ``node_modules`` is missing; needs ``node`` and ``npm``) sends one message
every 20 ms, one at a time, with the client's settings but ``--poll-ms`` and ``--send-timeout-ms``. ``--faults``
times, ``--interval`` s apart (the first after ``--warmup`` s), the primary of the first group (the member the
controller names) is killed with kill -9 (``up`` restarts it as a replica) or, with ``--kind pause``, SIGSTOPped for
``--pause`` s. ``--primary-address`` gives each group a ``primary_address`` (a free loopback port), which routes name
instead of the primary's own address. Recovery of a fault: the
fault -> the end of the first SEND_OK of a send started after it (as in benchmarks/failover.py).

What to expect (docs/brokers.md, "Clients through a failover"): ali-ons re-reads a topic's route only on its timer
(``pollNameServerInteval``) or while the topic has no writable queue with a primary; a send failing against the dead
address is retried only on another broker group, so with one group the recovery is the time to the client's next
route refresh (up to 30 s at the default) and nothing a broker answers changes that; with two groups, or a poll
interval of about a second, a kill -9 costs less than the 3 s target. With ``--primary-address`` the client keeps
the address it has, and the new primary serves it once elected: a kill -9 costs the election, at the client's
defaults. A frozen primary also costs the send in flight its ``sendMsgTimeout`` (3 s by default).

The last line is exactly ``ali-ons <settings>, groups G, <kind>: faults N, first SEND_OK after the fault p50 X s,
max Y s, within 3 s: M of N``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_store.client import Admin
from broker_store.client.controller_admin import sync_state_data
from broker_store.deploy.launcher import HOST, broker_listen_port, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError

REPO = Path(__file__).resolve().parent.parent
CLIENT_DIR = REPO / "benchmarks" / "clients" / "ali-ons"
TOPIC = "OnsFailover"
TARGET_S = 3.0


@dataclass(frozen=True)
class Send:
    """One send of the node producer as it logged it."""

    started_ms: int
    """Wall clock (ms) when the send was called."""
    ended_ms: int
    """Wall clock (ms) when it returned or threw."""
    outcome: str
    """``SEND_OK``, another SendStatus, or ``ERR <message>``."""


@dataclass(frozen=True)
class Fault:
    at_ms: int
    """Wall clock (ms) of the kill -9 or SIGSTOP."""
    victim: str
    """The member's ``up`` name and address."""


def ensure_client() -> None:
    """``npm ci`` in the client directory when ali-ons is not installed there (the lock file pins every package)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        sys.exit("error: this benchmark needs node and npm on PATH (Debian: apt-get install nodejs npm)")
    if not (CLIENT_DIR / "node_modules" / "ali-ons" / "package.json").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CLIENT_DIR, check=True)


def clusters_yaml(namesrv: str, groups: list[list[str]], primary_addresses: list[str] | None = None) -> str:
    """The ``up`` file: one cluster, the embedded controller, each group three controller-mode members (group ``g``
    with ``primary_address`` ``primary_addresses[g]`` when given)."""
    lines = ["clusters:", "  - name: ons",
             f'    namesrv: {{listen: "{namesrv}", broker_expiry_seconds: 3.0,'
             " controller: {heartbeat_timeout_ms: 1500, scan_interval_ms: 200}}",
             "    brokers:"]
    for g, members in enumerate(groups):
        moving = f' primary_address: "{primary_addresses[g]}",' if primary_addresses else ""
        for i, addr in enumerate(members):
            lines += [
                f'      - {{broker_name: g{g}, listen: "{addr}", store_dir: g{g}-{i}, enable_controller_mode: true,'
                f" fast_listen_enable: false,{moving}",
                f'         controller: {{controller_addrs: ["{namesrv}"], replica_info_poll_interval_ms: 500,'
                " heartbeat_timeout_ms: 1500, heartbeat_interval_ms: 500},",
                "         ha: {role: SYNC_MASTER, total_replicas: 3, in_sync_replicas: 2, min_in_sync_replicas: 2,"
                " ha_send_heartbeat_interval_ms: 500, ha_housekeeping_interval_ms: 3000}}"]
    return "\n".join(lines) + "\n"


def wait_for_line(path: Path, text: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            sys.exit(f"error: {proc.args!r} exited with code {proc.returncode} before printing {text!r}")
        time.sleep(0.2)
    sys.exit(f"error: no {text!r} in {path} within {timeout:.0f} s")


def primary_of(namesrv: str, group: str, timeout: float = 30.0) -> str:
    """The own address of the group's primary, waiting while there is none: the member the controller names, once
    the name server lists a primary too (with a primary address, the name server lists the address, not a member)."""
    async def controller_names() -> str | None:
        client = RemotingClient()
        try:
            info = (await sync_state_data(client, namesrv, [group])).get(group)
        finally:
            await client.close()
        return None if info is None else info.master_address

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with Admin(namesrv) as admin:
                data = admin.cluster_info().broker_addr_table.get(group)
            master = asyncio.run(controller_names()) if data is not None and data.master_addr else None
            if master:
                return master
        except RocketMQError:
            pass
        time.sleep(0.2)
    sys.exit(f"error: group {group} had no primary for {timeout:.0f} s")


def read_sends(path: Path) -> list[Send]:
    sends = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            sends.append(Send(int(parts[0]), int(parts[1]), parts[2]))
    return sends


def recovery_s(fault: Fault, sends: list[Send], until_ms: int) -> tuple[float | None, int]:
    """Seconds from the fault to the end of the first SEND_OK of a send started after it (None: none before
    ``until_ms``), and how many sends started after it failed before that one."""
    failed = 0
    for send in sends:
        if send.started_ms < fault.at_ms or send.started_ms >= until_ms:
            continue
        if send.outcome == "SEND_OK":
            return (send.ended_ms - fault.at_ms) / 1000, failed
        failed += 1
    return None, failed


def summary_line(settings: str, groups: int, kind: str, recoveries: list[float | None]) -> str:
    """The benchmark's last line (its contract, module docstring); a fault without a SEND_OK counts as infinite."""
    seconds = [float("inf") if r is None else r for r in recoveries]
    p50 = statistics.median(seconds) if seconds else float("nan")
    worst = max(seconds, default=float("nan"))
    within = sum(1 for r in seconds if r <= TARGET_S)
    return (f"ali-ons {settings}, groups {groups}, {kind}: faults {len(seconds)}, first SEND_OK after the fault "
            f"p50 {p50:.2f} s, max {worst:.2f} s, within {TARGET_S:g} s: {within} of {len(seconds)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--poll-ms", type=int, default=None,
                        help="ali-ons pollNameServerInteval (default: the client's own, 30000)")
    parser.add_argument("--send-timeout-ms", type=int, default=None,
                        help="ali-ons sendMsgTimeout (default: the client's own, 3000)")
    parser.add_argument("--groups", type=int, choices=(1, 2), default=1, help="broker groups holding the topic")
    parser.add_argument("--kind", choices=("kill", "pause"), default="kill")
    parser.add_argument("--faults", type=int, default=3)
    parser.add_argument("--interval", type=float, default=35.0,
                        help="seconds between faults and after the last (longer than the poll interval)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--pause", type=float, default=5.0, help="seconds a paused primary stays stopped")
    parser.add_argument("--primary-address", action="store_true",
                        help="give each group a primary_address (routes name it; the primary serves it)")
    args = parser.parse_args()
    ensure_client()

    work = Path(tempfile.mkdtemp(prefix="ons-failover-"))
    namesrv = f"{HOST}:{free_port()}"
    groups = [[f"{HOST}:{broker_listen_port(False)}" for _ in range(3)] for _ in range(args.groups)]
    names = {addr: f"g{g}.{i}" for g, members in enumerate(groups) for i, addr in enumerate(members)}
    moving = [f"{HOST}:{free_port()}" for _ in groups] if args.primary_address else None
    (work / "clusters.yaml").write_text(clusters_yaml(namesrv, groups, moving))
    print(f"work directory (up's logs, the client's sends; removed after a complete run): {work}", flush=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run_dir = work / "run"
    with open(work / "up.out", "wb") as up_out, open(work / "up.log", "wb") as up_log:
        up = subprocess.Popen([sys.executable, "-m", "broker_store", "up", "--config", str(work / "clusters.yaml"),
                               "--run-dir", str(run_dir), "--data-dir", str(work / "data")],
                              stdout=up_out, stderr=up_log, env=env)
    node: subprocess.Popen[bytes] | None = None
    faults: list[Fault] = []
    try:
        wait_for_line(work / "up.out", "READY", 120, up)
        subprocess.run([sys.executable, "-m", "broker_store", "create-topic", "-n", namesrv, "-t", TOPIC,
                        "--queues", "4"], check=True, env=env, stdout=subprocess.DEVNULL)
        command = ["node", "send.js", namesrv, TOPIC, str(args.poll_ms or ""), str(args.send_timeout_ms or "")]
        with open(work / "sends.log", "wb") as sends_out:
            node = subprocess.Popen(command, cwd=CLIENT_DIR, stdout=sends_out, stderr=subprocess.STDOUT)
        wait_for_line(work / "sends.log", "READY", 60, node)
        time.sleep(args.warmup)
        for n in range(args.faults):
            if n:
                time.sleep(args.interval)
            primary = primary_of(namesrv, "g0")
            name = names[primary]
            pid = int((run_dir / f"{name}.pid").read_text())
            at_ms = int(time.time() * 1000)
            os.kill(pid, signal.SIGKILL if args.kind == "kill" else signal.SIGSTOP)
            faults.append(Fault(at_ms, f"{name} ({primary})"))
            print(f"fault {n + 1}: {'kill -9' if args.kind == 'kill' else 'SIGSTOP'} of {name} ({primary})",
                  flush=True)
            if args.kind == "pause":
                time.sleep(args.pause)
                os.kill(pid, signal.SIGCONT)
        time.sleep(args.interval)
    finally:
        if node is not None:
            node.terminate()
            node.wait()
        up.send_signal(signal.SIGTERM)
        up.wait()

    sends = read_sends(work / "sends.log")
    recoveries: list[float | None] = []
    for n, fault in enumerate(faults):
        until = faults[n + 1].at_ms if n + 1 < len(faults) else sends[-1].started_ms + 1 if sends else 0
        seconds, failed = recovery_s(fault, sends, until)
        shown = "none" if seconds is None else f"{seconds:.2f} s"
        print(f"fault {n + 1} ({fault.victim}): first SEND_OK after {shown}, {failed} sends failed before it")
        recoveries.append(seconds)
    shutil.rmtree(work, ignore_errors=True)
    settings = [f"pollNameServerInteval {args.poll_ms} ms"] if args.poll_ms else []
    settings += [f"sendMsgTimeout {args.send_timeout_ms} ms"] if args.send_timeout_ms else []
    kind = "kill -9" if args.kind == "kill" else f"SIGSTOP {args.pause:g} s"
    described = (", ".join(settings) or "defaults (pollNameServerInteval 30 s)") + (
        ", primary address" if args.primary_address else "")
    print(summary_line(described, args.groups, kind, recoveries))


if __name__ == "__main__":
    main()
