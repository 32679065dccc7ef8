"""Every external program the project runs is installed by the project's own files, ships with the machine kind's
base image, or is named here as deliberately optional with the reason: a new machine of this kind (Debian 12,
Python 3.11, Java 17, nothing installed by hand) must pass `.ci/run`. Adding a program without an install step
(a line in .ci/system-tools) fails `test_every_program_run_is_installed_or_known`.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.support.program_audit import Invocation, project_invocations, python_invocations, shell_programs

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIRS = ("broker_store", "connectors", "jobs", "tests", "benchmarks")
SHELL_FILES = (".ci/run", ".ci/docker.sh", ".ci/install-tools")

# The programs of the base image of this machine kind that the project runs, by the Debian package (or part of
# the machine) that brings each: there on every new machine, so nothing installs them.
BASE_IMAGE = {
    "apt-get": "apt", "awk": "mawk", "cat": "coreutils", "chmod": "coreutils", "chroot": "coreutils",
    "dirname": "coreutils", "id": "coreutils", "mkdir": "coreutils", "nice": "coreutils", "rm": "coreutils",
    "seq": "coreutils", "sleep": "coreutils", "sort": "coreutils", "stat": "coreutils", "tail": "coreutils",
    "touch": "coreutils",
    "grep": "grep", "tar": "tar", "make": "make", "gcc": "gcc (and libc6-dev, for the C extensions too)",
    "mount": "mount", "umount": "mount", "unshare": "util-linux", "nsenter": "util-linux", "ip": "iproute2",
    "pgrep": "procps", "pkill": "procps", "openssl": "openssl", "systemctl": "systemd",
    "sh": "dash", "bash": "bash", "java": "the machine's Java 17 (pyspark starts it)",
}

# Run only on request or where present, never needed by `make test` or `.ci/run`.
OPTIONAL = {
    "py-spy": "benchmarks/replicator.py --py-spy only; a pip package the user adds to the venv by hand, and the "
              "benchmark says so when it is missing",
    "node": "benchmarks/ons_failover.py only (an off-the-shelf JavaScript client, ali-ons, through a failover); "
            "Debian's nodejs, which the benchmark names when it is missing",
    "npm": "benchmarks/ons_failover.py only: `npm ci` installs ali-ons from benchmarks/clients/ali-ons's lock file; "
           "Debian's npm, which the benchmark names when it is missing",
}


@cache
def invocations() -> tuple[Invocation, ...]:
    return tuple(project_invocations(ROOT, PYTHON_DIRS, SHELL_FILES, "Makefile"))


def system_tools() -> dict[str, tuple[str, str]]:
    """``.ci/system-tools``: program -> (Debian package, group)."""
    tools: dict[str, tuple[str, str]] = {}
    for line in (ROOT / ".ci/system-tools").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            program, package, group, _service, *_why = line.split()
            tools[program] = (package, group)
    return tools


def test_every_program_run_is_installed_or_known() -> None:
    installed = system_tools()
    unknown = sorted({f"{i.program} ({i.where})" for i in invocations()
                      if i.program not in installed and i.program not in BASE_IMAGE and i.program not in OPTIONAL})
    assert not unknown, ("programs run without an install step: add each to .ci/system-tools with its Debian "
                         f"package (or to BASE_IMAGE/OPTIONAL here, saying why): {unknown}")


def test_the_tables_name_only_programs_the_project_runs() -> None:
    """A stale entry (a program no longer run) would hide a missing one of the same name later."""
    found = {i.program for i in invocations()}
    stale = sorted((set(system_tools()) | set(OPTIONAL) | set(BASE_IMAGE)) - found - {"sh", "bash", "java"})
    assert not stale, f"listed but never run: {stale}"


def test_system_tools_groups_are_the_ones_the_makefile_installs() -> None:
    groups = {group for _package, group in system_tools().values()}
    assert groups == {"test", "containers"}
    makefile = (ROOT / "Makefile").read_text()
    assert "\t@.ci/install-tools test\n" in makefile and "\t@.ci/install-tools containers\n" in makefile
    assert "tools-containers" in makefile.split("test-containers:")[1].splitlines()[0]
    assert "tools" in makefile.split("\ntest:")[1].splitlines()[0]


def test_install_tools_refuses_an_unknown_group() -> None:
    done = subprocess.run([str(ROOT / ".ci/install-tools"), "no-such-group"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert "unknown group 'no-such-group'" in done.stderr and "containers test" in done.stderr


# The audit itself must be able to fail: each reader finds a program planted where the code would put one.
@pytest.mark.parametrize(("source", "expected"), [
    ('import subprocess\nsubprocess.run(["frobnicate", "-x"])\n', ["frobnicate"]),
    ('import subprocess\ncmd = ["frobnicate"]\nsubprocess.Popen(cmd)\n', ["frobnicate"]),
    ('import subprocess\ndef _run(step, argv):\n    subprocess.run(list(argv))\n_run("s", ["frobnicate"])\n',
     ["frobnicate"]),
    ('import subprocess\nbase = ["frobnicate", "x"]\nsubprocess.run([*base, "y"])\n', ["frobnicate"]),
    ('import shutil\nshutil.which("frobnicate")\n', ["frobnicate"]),
    ('import shutil\n[t for t in ("frob", "nicate") if shutil.which(t) is None]\n', ["frob", "nicate"]),
    ('import asyncio\nasyncio.create_subprocess_exec("frobnicate")\n', ["frobnicate"]),
    ('import subprocess, sys\nsubprocess.run([sys.executable, "-m", "x"])\nnames = ["a", "b"]\n', []),
])
def test_python_reader_finds_a_planted_program(source: str, expected: list[str]) -> None:
    assert [i.program for i in python_invocations(source, "planted.py")] == expected


@pytest.mark.parametrize(("script", "expected"), [
    ("frobnicate --x\n", ["frobnicate"]),
    ("a=1 b=2 frobnicate\n", ["frobnicate"]),
    ('if ! command -v frobnicate >/dev/null; then echo "no; frob" >&2; fi\n', ["frobnicate"]),
    ('x=$(frobnicate "$y") && for i in $(seq 3); do :; done\n', ["frobnicate", "seq"]),
    ('status="$(frobnicate)"\n', ["frobnicate"]),
    ("go() { frob; }\ncase $1 in\n  go) go ;;\nesac\n", ["frob"]),
    ("echo 'frobnicate; nothing' | grep -q x # frob\n", ["grep"]),
    ('nohup frobnicate --a "$B" >x 2>&1 &\n', ["frobnicate"]),
])
def test_shell_reader_finds_a_planted_program(script: str, expected: list[str]) -> None:
    assert shell_programs(script) == expected
