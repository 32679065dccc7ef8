"""CI refuses to run without both C extensions built from their current sources; users may skip them
(tests/support/c_extensions.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import conftest
from tests.support import c_extensions
from tests.support.c_extensions import CExtension


def test_both_extensions_are_usable_here_or_the_suite_says_why() -> None:
    for extension in c_extensions.EXTENSIONS:
        why = c_extensions.problem(extension)
        if why is not None:  # a user's machine without a compiler: said, not hidden
            assert extension.module in why


def test_a_missing_extension_is_named() -> None:
    missing = CExtension("connectors.replication._no_such_module", "connectors/replication/_forward.c")
    why = c_extensions.problem(missing)
    assert why is not None and why.startswith("connectors.replication._no_such_module is not built")


def test_an_extension_older_than_its_source_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stalepkg").mkdir()
    (tmp_path / "stalepkg" / "__init__.py").write_text("")
    built = tmp_path / "stalepkg" / "_ext.py"
    built.write_text("")
    source = tmp_path / "ext.c"
    source.write_text("int x;\n")
    os.utime(built, (1_000_000, 1_000_000))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(c_extensions, "ROOT", tmp_path)
    try:
        why = c_extensions.problem(CExtension("stalepkg._ext", "ext.c"))
        assert why is not None and "older than ext.c" in why
        os.utime(built, None)
        os.utime(source, (1_000_000, 1_000_000))
        assert c_extensions.problem(CExtension("stalepkg._ext", "ext.c")) is None
    finally:
        sys.modules.pop("stalepkg._ext", None)
        sys.modules.pop("stalepkg", None)


@pytest.mark.parametrize(("ci", "expected"), [("true", True), ("1", True), ("", False), ("false", False)])
def test_under_ci_reads_the_ci_variable(monkeypatch: pytest.MonkeyPatch, ci: str, expected: bool) -> None:
    monkeypatch.setenv("CI", ci)
    assert c_extensions.under_ci() is expected


def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = CExtension("connectors.replication._no_such_module", "connectors/replication/_forward.c")
    monkeypatch.setattr(c_extensions, "EXTENSIONS", (missing,))


def test_a_test_needing_an_unbuilt_extension_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    broken(monkeypatch)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI requires the C extensions"):
        c_extensions.skip_without("connectors.replication._no_such_module")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="is not built"):
        c_extensions.skip_without("connectors.replication._no_such_module")


def test_the_suite_refuses_to_start_under_ci_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    broken(monkeypatch)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.exit.Exception, match="CI refuses to run without both C extensions built") as exited:
        conftest.pytest_sessionstart(None)  # type: ignore[arg-type]
    assert exited.value.returncode == 3
    monkeypatch.setenv("CI", "")
    conftest.pytest_sessionstart(None)  # type: ignore[arg-type]
