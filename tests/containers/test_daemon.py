"""The container tier's first check: the daemon does what the fault tests will ask of it, on a tiny image made
here (a static program ``docker import``-ed, no registry): host networking, a memory limit, ``docker pause`` /
``unpause`` (the cgroup freezer), ``docker kill`` (SIGKILL), and a container killed by its memory limit."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator

import pytest

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "hog") == 0) {      /* touch memory until the limit kills us */
        for (;;) { char *p = malloc(1 << 20); if (!p) return 3; memset(p, 1, 1 << 20); }
    }
    printf("up pid=%d\n", getpid()); fflush(stdout);
    sleep(argc > 1 ? atoi(argv[1]) : 0);
    return 0;
}
"""


def docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture(scope="module")
def tiny_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("gcc") is None:
        pytest.skip("containers tier: no gcc to build the tiny static test program")
    work = tmp_path_factory.mktemp("tiny-image")
    (work / "tiny.c").write_text(PROGRAM)
    rootfs = work / "rootfs"
    rootfs.mkdir()
    subprocess.run(["gcc", "-static", "-O2", "-o", str(rootfs / "tiny"), str(work / "tiny.c")], check=True)
    with tarfile.open(work / "rootfs.tar", "w") as tar:
        tar.add(rootfs / "tiny", arcname="tiny")
    tag = f"rmq-tiny-test:{uuid.uuid4().hex[:8]}"
    docker("import", str(work / "rootfs.tar"), tag)
    yield tag
    docker("rmi", "-f", tag, check=False)


def _state(name: str) -> str:
    return docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}", name)


def test_pause_unpause_and_kill_a_container_with_a_memory_limit_on_the_host_network(tiny_image: str) -> None:
    name = f"rmq-tiny-{uuid.uuid4().hex[:8]}"
    try:
        docker("run", "-d", "--name", name, "--network", "host", "--memory", "64m", tiny_image, "/tiny", "120")
        assert docker("inspect", "-f", "{{.HostConfig.NetworkMode}} {{.HostConfig.Memory}}", name) \
            == f"host {64 * 1024 * 1024}"
        docker("pause", name)
        assert _state(name).split()[0] == "paused"
        docker("unpause", name)
        assert _state(name).split()[0] == "running"
        docker("kill", name)
        docker("wait", name)
        assert _state(name).split()[:2] == ["exited", "137"]
    finally:
        docker("rm", "-f", name, check=False)


def test_a_container_over_its_memory_limit_is_killed_and_marked_oom(tiny_image: str) -> None:
    name = f"rmq-tiny-{uuid.uuid4().hex[:8]}"
    try:
        docker("run", "--name", name, "--network", "host", "--memory", "32m", "--memory-swap", "32m",
               tiny_image, "/tiny", "hog", check=False)
        assert _state(name) == "exited 137 true"
    finally:
        docker("rm", "-f", name, check=False)


def test_the_tiny_image_needs_nothing_but_itself(tiny_image: str) -> None:
    assert docker("run", "--rm", "--network", "host", tiny_image, "/tiny").startswith("up pid=1")
