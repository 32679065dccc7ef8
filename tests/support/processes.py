"""Start real namesrv/broker processes on free loopback ports and always stop them.

``LocalCluster`` is a context manager: every process it started is killed on exit, whatever the
test did. Ports come from the OS (bind to port 0, read it back, release) so parallel runs don't
collide; the VIP-channel port (listen - 2) is off except where a test asks for it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from broker_store.config import BrokerConfig, NamesrvConfig
from broker_store.launcher import ManagedProcess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """One name server and ``brokers`` broker groups (single replica) as separate processes."""

    def __init__(self, root: Path, name: str = "test", brokers: int = 1, **broker_options: Any) -> None:
        self.root = root / name
        self.root.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.namesrv = ManagedProcess(
            "namesrv", NamesrvConfig(listen=f"127.0.0.1:{free_port()}", broker_expiry_seconds=3.0),
            self.root, f"{name}-namesrv")
        self.namesrv_addr = self.namesrv.config.listen  # type: ignore[union-attr]
        options = {"fast_listen_enable": False, "commit_log_segment_size": 8 * 1024 * 1024,
                   "max_message_size": 1024 * 1024, **broker_options}
        self.brokers = [
            ManagedProcess("broker", BrokerConfig(
                cluster_name=name, broker_name=f"{name}-{chr(ord('a') + i)}", listen=f"127.0.0.1:{free_port()}",
                store_dir=self.root / f"store-{i}", namesrv_addrs=[self.namesrv_addr], **options),
                self.root, f"{name}-broker-{i}")
            for i in range(brokers)
        ]

    def start(self) -> LocalCluster:
        self.namesrv.start()
        for broker in self.brokers:
            broker.start()
        return self

    def stop(self) -> None:
        for proc in [*self.brokers, self.namesrv]:
            proc.kill()

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def local_cluster(root: Path, name: str = "test", brokers: int = 1, **options: Any) -> Iterator[LocalCluster]:
    with LocalCluster(root, name, brokers, **options) as cluster:
        yield cluster
