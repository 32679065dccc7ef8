"""The project's processes each in its own container, for the container tier (``tests/containers``).

``ContainerProcess`` runs one name server or broker of the tier's image (``broker_store.deploy.image``) with
testcontainers: host networking (the process listens on 127.0.0.1 like the loopback tiers' ones), a memory limit
with no swap beyond it, and its run directory (config, store) bind-mounted at the same path, so the config file
the host wrote names paths valid on both sides and the host reads the store after the container is gone.
Faults are the daemon's: ``kill`` (SIGKILL), ``pause`` / ``unpause`` (the cgroup freezer); ``restart`` starts the
same container again; ``new_primary``, ``bring_back`` and ``assert_acked_kept`` are the failover tests' shared steps
(wait for a new primary and time it, revive the faulted container, check every acknowledged key). Every container
is removed by ``remove`` (the tests' ``finally``) and, for one a test left behind, at interpreter exit:
testcontainers' reaper is off here (its image cannot be pulled).
"""

from __future__ import annotations

import asyncio
import atexit
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docker.errors import DockerException, NotFound
from testcontainers.core.container import DockerContainer

from broker_store.client import AsyncAdmin
from broker_store.config import BrokerConfig, ControllerConfig, NamesrvConfig
from broker_store.deploy.launcher import write_config
from tests.support.controller_group import master_addr, until
from tests.support.log_check import commitlog_image, stored_keys

ServerConfig = NamesrvConfig | BrokerConfig | ControllerConfig

READY = "READY "
LOG_TAIL_CHARS = 3000

_live: set[ContainerProcess] = set()


class ContainerProcess:
    """``command`` in a container of ``image``; ``server`` makes the name server / broker ones."""

    def __init__(self, image: str, command: list[str], run_dir: Path, name: str, *, memory: str = "512m",
                 env: dict[str, str] | None = None, config: ServerConfig | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.name, self.memory, self.config = name, memory, config
        self.listen = "" if config is None else config.listen
        self.container_name = f"rmq-{name}-{uuid.uuid4().hex[:8]}"
        self.container = (DockerContainer(image)
                          .with_name(self.container_name)
                          .with_command(command)
                          .with_envs(**(env or {}))
                          .with_volume_mapping(str(run_dir), str(run_dir), "rw")
                          .with_kwargs(network_mode="host", mem_limit=memory, memswap_limit=memory))
        self._ready_seen = 0

    @classmethod
    def server(cls, image: str, kind: str, config: ServerConfig, run_dir: Path, name: str, *,
               memory: str = "512m") -> ContainerProcess:
        """``python -m broker_store <kind> --config <run_dir>/<name>.yaml``."""
        config_file = write_config(run_dir, name, config)
        return cls(image, ["python", "-m", "broker_store", kind, "--config", str(config_file)], run_dir, name,
                   memory=memory, config=config)

    @property
    def store_dir(self) -> Path:
        assert isinstance(self.config, BrokerConfig)
        return Path(self.config.store_dir)

    def _docker(self) -> Any:
        return self.container.get_wrapped_container()

    def start(self, timeout: float = 60.0, *, wait_ready: bool = True) -> ContainerProcess:
        """Create and start the container; with ``wait_ready``, returns once the process printed READY."""
        self.container.start()
        _live.add(self)
        if wait_ready:
            self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            out = self.logs()
            if out.count(READY) > self._ready_seen:
                self._ready_seen = out.count(READY)
                return
            state = self.state()
            if state["Status"] == "exited" or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} ({self.container_name}) not READY ({state['Status']}, exit "
                                     f"{state['ExitCode']}, OOM {state['OOMKilled']}):\n{self.log_tail()}")
            time.sleep(0.1)

    def restart(self, timeout: float = 60.0, *, wait_ready: bool = True) -> None:
        """The same container started again after it exited (same config, same store); with ``wait_ready``,
        returns once the process printed READY again."""
        self._docker().start()
        if wait_ready:
            self._wait_ready(timeout)

    def kill(self) -> None:
        """``docker kill`` (SIGKILL to the container's processes); returns once the daemon says it exited."""
        self._docker().kill()
        self._docker().wait(timeout=30)

    def pause(self) -> None:
        """``docker pause``: every process of the container frozen (cgroup freezer) until ``unpause``."""
        self._docker().pause()

    def unpause(self) -> None:
        self._docker().unpause()

    def state(self) -> dict[str, Any]:
        """The daemon's ``State`` of the container (Status, ExitCode, OOMKilled, ...)."""
        container = self._docker()
        container.reload()
        return dict(container.attrs["State"])

    def logs(self) -> str:
        return self._docker().logs(stdout=True, stderr=True).decode(errors="replace")  # type: ignore[no-any-return]

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            return self.logs()[-chars:]
        except DockerException as exc:  # a log tail is for the failure report: never mask the failure
            return f"(no log: {exc})"

    def remove(self) -> None:
        """Kill and remove the container (idempotent)."""
        _live.discard(self)
        try:
            self.container.stop(force=True, delete_volume=True)
        except NotFound:  # already removed
            pass


LEFTOVER_AGE_S = 1800.0
"""A stopped ``rmq-`` container older than this is a leftover of a run killed before its cleanup; a younger one
may be a concurrent run's victim waiting for its restart."""


def remove_leftovers(age_s: float = LEFTOVER_AGE_S) -> list[str]:
    """Remove stopped tier containers (``rmq-`` names) created more than ``age_s`` ago; their names. A run killed
    by SIGKILL or a timeout skips ``remove`` and the interpreter-exit hook, and a stopped container keeps its
    image from being removed after the next build."""
    import docker

    client = docker.from_env()
    gone = []
    now = time.time()
    for container in client.containers.list(all=True, filters={"name": "rmq-", "status": "exited"}):
        created = container.attrs.get("Created", "")
        try:
            age = now - datetime.fromisoformat(created.split(".")[0].rstrip("Z")).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
        if container.name.startswith("rmq-") and age > age_s:
            container.remove(force=True)
            gone.append(container.name)
    return gone


@atexit.register
def _remove_left_behind() -> None:
    for proc in list(_live):
        proc.remove()


async def new_primary(admin: AsyncAdmin, group: str, old: str, started: float,
                      timeout: float = 30.0) -> tuple[str, float]:
    """The group's primary once the name server lists one other than ``old``, and the seconds from ``started``
    (``time.monotonic()`` at the fault) until then: the recovery time the failover tests hold to their target."""
    async def replaced() -> str | None:
        now = await master_addr(admin, group)
        return now if now not in (None, old) else None
    new = await until(replaced, "a new primary", timeout=timeout)
    return new, time.monotonic() - started


async def bring_back(victim: ContainerProcess, paused: bool, *, wait_ready: bool = True) -> None:
    """The faulted container back: thawed if ``paused``, else started again (same config, same store)."""
    if paused:
        await asyncio.to_thread(victim.unpause)
    else:
        await asyncio.to_thread(victim.restart, wait_ready=wait_ready)


def assert_acked_kept(primary: ContainerProcess, topic: str, acked: Sequence[str]) -> None:
    """Every acknowledged key of ``topic`` is in ``primary``'s CommitLog (read from its store on the host)."""
    stored = stored_keys(commitlog_image(primary.store_dir), topic)
    lost = [k for k in acked if k not in stored]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged keys missing on the new primary: {lost[:10]}"
