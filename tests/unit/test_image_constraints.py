"""``image/constraints.txt`` is generated from the runtime dependencies (``broker_store.deploy.image_constraints``): the
committed file must match what this environment (the project's .venv) resolves, so a dependency change that
was not carried into the image's pins fails ``make test`` with the command that fixes it. The rest runs the
generator on a scratch checkout whose pyproject.toml names a few installed distributions."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from broker_store.deploy.image_constraints import CONSTRAINTS, REGENERATE, check, regenerate, render, runtime_pins
from broker_store.protocol.errors import ImageBuildError

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_constraints_are_those_of_the_installed_runtime_dependencies() -> None:
    check(REPO)  # raises naming every pin that differs and `python -m broker_store image constraints`


def _checkout(tmp_path: Path, *dependencies: str) -> Path:
    quoted = ", ".join(f'"{d}"' for d in dependencies)
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\ndependencies = [{quoted}]\n')
    (tmp_path / "image").mkdir()
    return tmp_path


def version(name: str) -> str:
    return importlib.metadata.version(name)


def test_the_pins_are_the_closure_of_the_dependencies_with_markers_and_extras(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "requests>=2", "PyYAML", "orjson; sys_platform == 'win32'")
    pins = runtime_pins(root)
    # requests pulls in its own requirements; orjson's marker is false here; names are normalised
    assert {"requests", "urllib3", "idna", "certifi", "charset-normalizer", "pyyaml"} <= set(pins)
    assert "orjson" not in pins
    assert pins["requests"] == version("requests") and pins["pyyaml"] == version("PyYAML")
    assert list(pins) == sorted(pins)


def test_a_stale_file_is_named_and_regenerated(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "PyYAML", "idna")
    path = root / CONSTRAINTS
    path.write_text(f"pyyaml==0.0.1\nrequests=={version('requests')}\n")
    with pytest.raises(ImageBuildError) as raised:
        check(root)
    message = str(raised.value)
    for part in (f"missing: idna=={version('idna')}", f"no longer needed: requests=={version('requests')}",
                 f"changed: pyyaml 0.0.1 -> {version('PyYAML')}", REGENERATE):
        assert part in message
    assert regenerate(root)
    assert path.read_text() == render({"idna": version("idna"), "pyyaml": version("PyYAML")})
    check(root)
    assert not regenerate(root)


def test_a_dependency_that_is_not_installed_is_refused_by_name(tmp_path: Path) -> None:
    root = _checkout(tmp_path, "PyYAML", "no-such-distribution-here>=1")
    with pytest.raises(ImageBuildError, match="no-such-distribution-here .*not installed"):
        runtime_pins(root)
