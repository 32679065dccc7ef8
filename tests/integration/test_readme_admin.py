"""The admin block of docs/brokers.md ("Running processes by hand"), run as written against a real cluster: each
command of "Admin commands in the spirit of mqadmin" in file order, the name server address swapped for the test
cluster's. A new user runs exactly these; ``offsets --group g1`` must show the position
``consume --group g1 ... --commit`` stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.cli import main as cli
from tests.support.processes import local_cluster
from tests.support.readme_commands import Command, readme_commands

pytestmark = pytest.mark.integration

README_NAMESRV = "127.0.0.1:9876"


def admin_block() -> list[Command]:
    """The documentation's first run of admin commands: the block that starts with ``cluster -n``."""
    found: list[Command] = []
    for command in readme_commands():
        words = command.words
        is_admin = words[:3] == (".venv/bin/python", "-m", "broker_store") and README_NAMESRV in words
        if is_admin and (found or words[3] == "cluster") and "--controller" not in words:
            if found and (command.path, command.line) != (found[-1].path, found[-1].line + 1):
                break
            found.append(command)
    return found


def test_the_admin_block_runs_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    block = admin_block()
    assert [c.words[3] for c in block] == ["cluster", "topics", "create-topic", "produce", "consume", "offsets",
                                          "ha-status"]
    outputs: dict[str, str] = {}
    with local_cluster(tmp_path, "readme", brokers=1) as cluster:
        for command in block:
            argv = [cluster.namesrv_addr if w == README_NAMESRV else w for w in command.words[3:]]
            assert cli.main(argv) == 0, f"{command.where}: {' '.join(command.words)}"
            outputs[argv[0]] = capsys.readouterr().out
    consumed = [line for line in outputs["consume"].splitlines() if " offset=" in line]
    assert len(consumed) == 10 and all(" tags=A " in line and "None" not in line for line in consumed)
    header, _rule, *rows = outputs["offsets"].splitlines()
    assert header.split() == ["queue", "min", "max", "consumer", "offset", "lag"]
    # consume reads queue by queue: the first held the 10 messages, and their position is the one committed
    committed = [row.split()[3] for row in rows]
    assert len(rows) == 8 and committed == ["10"] + ["-"] * 7, outputs["offsets"]
    assert sum(int(row.split()[4]) for row in rows) == 1000 - 10
    assert "readme-a" in outputs["cluster"]
