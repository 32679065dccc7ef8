"""Every command the shell blocks of the README and the documentation pages (``docs/*.md``) show works as written
after ``make``: it calls the project's
environment literally (``.venv/bin/python``, ``.venv/bin/spark-submit``; a bare ``python`` is the system's, which
lacks the dependencies), names a module, script or make target that exists, and its arguments parse with the
entry point's own argparse parser. Parsing is the dry form: each entry point runs in this process up to its
``parse_args`` and stops there, so nothing connects or starts (the whole file takes a few seconds). How a line is
read: ``tests/support/readme_commands.py``; ``tests/integration/test_readme_admin.py`` runs the admin block for
real against a cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.readme_commands import NOT_LITERAL, ROOT, Command, readme_commands

README_COMMANDS = readme_commands()
PROJECT_COMMANDS = [c for c in README_COMMANDS if c.words[0].startswith(".venv/bin/")]
MAKE_COMMANDS = [c for c in README_COMMANDS if c.words[0] == "make"]


class _Parsed(BaseException):
    """Raised by the patched ``parse_args`` once the arguments parsed: the entry point goes no further."""


@contextlib.contextmanager
def parse_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        original(self, *args, **kwargs)
        raise _Parsed

    stderr = io.StringIO()
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        yield stderr


def entry_point(words: tuple[str, ...]) -> tuple[str, str, list[str]]:
    """("module" or "script", its name, its arguments) of a ``.venv/bin/python`` or ``spark-submit`` line."""
    program, *rest = words
    if program == ".venv/bin/spark-submit":
        script = next(i for i, w in enumerate(rest) if w.endswith(".py"))
        return "script", rest[script], rest[script + 1:]
    assert program == ".venv/bin/python", f"{program}: not an interpreter make builds"
    if rest[0] == "-m":
        return "module", rest[1], rest[2:]
    return "script", rest[0], rest[1:]


def test_the_readme_shows_commands() -> None:
    # The reader works: pages whose blocks were all skipped would pass everything below.
    assert len(PROJECT_COMMANDS) >= 30 and len(MAKE_COMMANDS) >= 3
    assert any("--commit" in c.words for c in PROJECT_COMMANDS if "consume" in c.words)


@pytest.mark.parametrize("command", README_COMMANDS, ids=lambda c: f"{c.path}:{c.line}")
def test_no_command_needs_an_activated_environment(command: Command) -> None:
    assert command.words[0] not in NOT_LITERAL, (
        f"{command.where}: {command.words[0]} is the system's; write .venv/bin/{command.words[0]}")


@pytest.mark.parametrize("command", MAKE_COMMANDS, ids=lambda c: f"{c.path}:{c.line}")
def test_make_targets_exist(command: Command) -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    for word in command.words[1:]:
        if "=" not in word:
            assert word in targets, f"{command.where}: no make target {word!r}"


@pytest.mark.parametrize("command", PROJECT_COMMANDS, ids=lambda c: f"{c.path}:{c.line}")
def test_command_parses_with_its_entry_point(command: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    where = f"{command.where}: {' '.join(command.words)}"
    if command.words[0] == ".venv/bin/spark-submit":
        # make installs pyspark into .venv, whose bin holds spark-submit beside the interpreter.
        assert (Path(sys.executable).parent / "spark-submit").exists(), where
    kind, name, args = entry_point(command.words)
    for arg in args:
        if arg.startswith("conf/"):
            assert (ROOT / arg).exists(), f"{where}: {arg} does not exist"
    if kind == "script":
        assert (ROOT / name).is_file(), f"{where}: no script {name}"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [name, *args])
    with parse_only(monkeypatch) as stderr:
        try:
            if kind == "module":
                # as `python -m` runs it: not already imported (runpy warns when another test imported it)
                monkeypatch.delitem(sys.modules, name, raising=False)
                runpy.run_module(name, run_name="__main__", alter_sys=False)
            else:
                runpy.run_path(str(ROOT / name), run_name="__main__")
        except _Parsed:
            return
        except SystemExit as exc:
            pytest.fail(f"{where}: exit {exc.code}: {stderr.getvalue().strip()}")
    pytest.fail(f"{where}: the entry point ended without parsing its arguments")
