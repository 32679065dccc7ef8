"""``image/constraints.txt``, the container image's pins, derived from the project's runtime dependencies.

The image installs the project's wheel with its dependencies from PyPI; the pins make it install the versions the
project is tested with: those installed in the environment running this (the project's .venv). The file is the
closure of ``[project].dependencies`` in pyproject.toml over the installed distributions' own requirements
(markers evaluated for this interpreter and platform, extras followed), one ``name==version`` per line, names
normalised (PEP 503), sorted. It is generated, never edited:

- ``python -m broker_store image constraints`` rewrites it; ``--check`` only says whether it is stale (exit 1,
  naming every pin that differs and the command to run);
- ``broker_store.deploy.image.build_image`` regenerates it before hashing the image's inputs, so a build after a
  dependency change uses (and is tagged by) the new pins;
- a unit test runs the check, so ``make test`` fails on a committed stale file before anything is built.

Needs ``packaging`` (a dev dependency; the image build runs from a development checkout).
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from broker_store.protocol.errors import ImageBuildError

CONSTRAINTS = Path("image/constraints.txt")
"""Relative to the checkout."""
REGENERATE = "python -m broker_store image constraints"
HEADER = f"""\
# The image's runtime dependencies, pinned to the versions the project is tested with: the closure of
# pyproject.toml's [project].dependencies over the distributions installed in the .venv that ran
# `{REGENERATE}`.
# Generated (the image build regenerates it; `make test` fails when it is stale): do not edit.
# Part of the image tag's hash, so a change here rebuilds the image.
"""


def runtime_pins(root: Path) -> dict[str, str]:
    """Normalised name -> installed version for every distribution the project needs at run time."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        wanted = [Requirement(text) for text in project.get("dependencies", [])]
    except (OSError, KeyError, tomllib.TOMLDecodeError, InvalidRequirement) as exc:
        raise ImageBuildError(f"{root / 'pyproject.toml'}: cannot read [project].dependencies: {exc}") from exc
    pins: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    pending = [(req, "pyproject.toml") for req in wanted if _applies(req, frozenset())]
    while pending:
        req, wanted_by = pending.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise ImageBuildError(f"{req.name} (needed by {wanted_by}) is not installed in this environment: run "
                                  f"from the project's .venv (`make` builds it) to pin the image") from exc
        pins[name] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            if _applies(sub, extras):
                pending.append((sub, f"{name} {dist.version}"))
    return dict(sorted(pins.items()))


def _applies(req: Requirement, extras: frozenset[str]) -> bool:
    """Whether ``req`` is needed here: its marker holds for this interpreter with no extra or one of ``extras``."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": extra}) for extra in ("", *sorted(extras)))


def render(pins: Mapping[str, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in pins.items())


def parse(text: str) -> dict[str, str]:
    """The ``name==version`` lines of a constraints file (comments and blank lines skipped)."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


@dataclass(frozen=True)
class Staleness:
    """How the committed file differs from the environment's pins (all empty: up to date)."""

    added: tuple[str, ...]
    """``name==version`` pins the file lacks."""
    removed: tuple[str, ...]
    """Pins of the file no runtime dependency needs any more."""
    changed: tuple[str, ...]
    """``name old -> new``."""
    layout: bool
    """Same pins, different text (order, header): regenerating rewrites it."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.layout)

    def describe(self) -> str:
        parts = [f"{label}: {', '.join(items)}" for label, items in
                 (("missing", self.added), ("no longer needed", self.removed), ("changed", self.changed)) if items]
        return "; ".join(parts) or "the pins match but the file is not in its generated form"


def staleness(root: Path, pins: Mapping[str, str] | None = None) -> Staleness:
    path = root / CONSTRAINTS
    text = path.read_text() if path.is_file() else ""
    pins = runtime_pins(root) if pins is None else pins
    old = parse(text)
    return Staleness(added=tuple(f"{n}=={v}" for n, v in pins.items() if n not in old),
                     removed=tuple(f"{n}=={v}" for n, v in old.items() if n not in pins),
                     changed=tuple(f"{n} {old[n]} -> {v}" for n, v in pins.items() if n in old and old[n] != v),
                     layout=text != render(pins))


def check(root: Path) -> None:
    """Raise ``ImageBuildError`` naming what differs when ``image/constraints.txt`` is stale."""
    stale = staleness(root)
    if stale:
        raise ImageBuildError(f"{CONSTRAINTS} is stale for the installed runtime dependencies ({stale.describe()}): "
                              f"run `{REGENERATE}` and commit it")


def regenerate(root: Path) -> Staleness:
    """Rewrite ``image/constraints.txt`` when stale; what was stale (falsy: the file was up to date)."""
    pins = runtime_pins(root)
    stale = staleness(root, pins)
    if stale:
        (root / CONSTRAINTS).write_text(render(pins))
    return stale


def cmd_image_constraints(root: Path, *, check_only: bool) -> int:
    """``image constraints [--check]``: 0 when the file is (now) up to date; 1 with ``--check`` when stale."""
    if check_only:
        stale = staleness(root)
        if stale:
            print(f"{CONSTRAINTS} is STALE: {stale.describe()}; run `{REGENERATE}` and commit it")
            return 1
        print(f"{CONSTRAINTS} is up to date")
        return 0
    stale = regenerate(root)
    print(f"{CONSTRAINTS} regenerated: {stale.describe()}" if stale else f"{CONSTRAINTS} is up to date")
    return 0
