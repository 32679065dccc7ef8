"""``python -m broker_store image build``: the container tier's image (docs/testing.md, "The container tier"), built on
this machine from Debian packages and the project's own wheel, since no image registry is reachable.

Two layers, each cached in the docker daemon under a tag that is a content hash of what made it:

- the base, ``rocketmq-replicator-base:<hash>``: ``debootstrap --variant=minbase`` of Debian ``SUITE`` with
  ``BASE_PACKAGES`` (Python 3.11, its venv module, Java 17, etcd 3.4), ``docker import``-ed. Its hash covers the
  suite and the package list, so it is made once per machine (the slow step) and again only when they change;
- the image, ``rocketmq-replicator:<hash>``: ``image/Dockerfile`` on the base installs the project's wheel (built
  here from a copy of its inputs) into /opt/venv with its runtime dependencies from PyPI, pinned by
  ``image/constraints.txt`` (``broker_store.deploy.image_constraints``: regenerated from the installed runtime
  dependencies at the start of every build). Its hash covers the base tag and every input of the wheel
  (pyproject.toml, setup.py, README.md, the packages' sources) and of the Dockerfile, so any change there
  rebuilds it and nothing else does.

Used by the CLI and by the container tier (``tests/containers``), which builds or reuses the image through
``build_image``. Needs a docker daemon (``DOCKER_HOST``, ``.ci/docker.sh``) and, for the base, root and debootstrap.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_store.protocol.errors import ImageBuildError

SUITE = "bookworm"
BASE_PACKAGES = ("python3.11", "python3.11-venv", "openjdk-17-jre-headless", "procps", "etcd-server")
"""procps: ``ps``/``kill`` for whoever debugs inside a container; the JRE pulls in its own certificates;
etcd-server: Debian's etcd 3.4, the replicated controllers' store, so the tier runs etcd members in containers of
this image too."""
DEFAULT_MIRROR = "http://deb.debian.org/debian"
IMAGE_NAME = "rocketmq-replicator"
BASE_NAME = "rocketmq-replicator-base"
PACKAGES = ("broker_store", "connectors", "jobs")
SOURCE_SUFFIXES = frozenset({".py", ".pyi", ".c", ".h"})
TOP_LEVEL_INPUTS = ("pyproject.toml", "setup.py", "README.md", "image/Dockerfile", "image/constraints.txt")
KEEP_IMAGES = 3
"""Older ``rocketmq-replicator`` tags beyond the newest few (and base images but the current one) are removed
after a build (each is ~1.3 GB)."""
TAG_HEX = 16
"""64 bits of SHA-256: no accidental clash among the few images one machine keeps."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    """What ``build_image`` did."""

    tag: str
    """The image to run (``rocketmq-replicator:<hash>``)."""
    base_tag: str
    """The Debian layer under it."""
    built: tuple[str, ...]
    """The layers made by this call ("base", "image"); empty when both came from the cache."""
    seconds: float
    """Wall time of the call."""


def repo_root() -> Path:
    """The checkout this module was imported from (the image is built from its files)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise ImageBuildError(f"{root} holds no pyproject.toml: image build needs a checkout of the project")
    return root


def image_inputs(root: Path) -> list[Path]:
    """Every file the image's top layer is made of, relative to ``root``, sorted (bytecode and the in-place
    built extension are outputs, not inputs)."""
    files = [Path(name) for name in TOP_LEVEL_INPUTS]
    for package in PACKAGES:
        files += [p.relative_to(root) for p in (root / package).rglob("*")
                  if p.is_file() and p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts]
    return sorted(files)


def content_hash(root: Path, files: Iterable[Path], *extra: str) -> str:
    """SHA-256 over the files' relative paths and bytes, then ``extra``; the first ``TAG_HEX`` hex digits."""
    digest = hashlib.sha256()
    for rel in files:
        data = (root / rel).read_bytes()
        digest.update(f"{rel.as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    for item in extra:
        digest.update(f"{item}\0".encode())
    return digest.hexdigest()[:TAG_HEX]


def base_tag() -> str:
    recipe = "\n".join(("debootstrap --variant=minbase, then apt-get install", SUITE, *BASE_PACKAGES))
    return f"{BASE_NAME}:{hashlib.sha256(recipe.encode()).hexdigest()[:TAG_HEX]}"


def image_tag(root: Path) -> str:
    return f"{IMAGE_NAME}:{content_hash(root, image_inputs(root), base_tag())}"


def _run(step: str, argv: Sequence[str], log: Log, **kwargs: object) -> None:
    log(f"image: {step}: {' '.join(argv)}")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    except OSError as exc:
        raise ImageBuildError(f"{step}: {argv[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(f"{step} failed (exit {done.returncode}):\n{tail}")


def image_exists(tag: str) -> bool:
    try:
        done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageBuildError(f"docker image inspect {tag}: {exc}") from exc
    return done.returncode == 0


def _build_base(tag: str, mirror: str, work: Path, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is missing (`make tools-containers` installs it, from Debian's "
                              "debootstrap package)")
    rootfs = work / "rootfs"
    # debootstrap only lays down minbase: it configures --include'd packages in one pass and Java's certificate
    # hook (ca-certificates-java) then fails for want of a configured JRE; apt inside the new root orders them.
    _run("debootstrap", ["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror], log)
    shutil.copy2("/etc/resolv.conf", rootfs / "etc/resolv.conf")
    (rootfs / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")  # no daemon starts in the chroot
    (rootfs / "usr/sbin/policy-rc.d").chmod(0o755)
    _run("mount /proc in the root filesystem", ["mount", "-t", "proc", "proc", str(rootfs / "proc")], log)
    try:
        chroot = ["chroot", str(rootfs), "env", "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8"]
        _run("apt-get update", [*chroot, "apt-get", "update", "-q"], log)
        _run("apt-get install", [*chroot, "apt-get", "install", "-y", "-q", "--no-install-recommends",
                                 *BASE_PACKAGES], log)
        _run("apt-get clean", [*chroot, "apt-get", "clean"], log)
    finally:
        subprocess.run(["umount", str(rootfs / "proc")], check=False)
    # The package lists, the host's resolver and the chroot's guard are of no use in the image.
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
    for leftover in ("etc/resolv.conf", "usr/sbin/policy-rc.d"):
        (rootfs / leftover).unlink()
    tarball = work / "rootfs.tar"
    _run("tar the root filesystem", ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], log)
    _run("docker import", ["docker", "import", "--message", f"debootstrap {SUITE} {' '.join(BASE_PACKAGES)}",
                           str(tarball), tag], log)


def _build_image(root: Path, tag: str, base: str, work: Path, log: Log) -> None:
    # The wheel is built from a copy of exactly the hashed inputs, so the tag names what is inside and the
    # checkout gets no build/ or egg-info of the build.
    source = work / "source"
    for rel in image_inputs(root):
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, source / rel)
    context = work / "context"
    context.mkdir()
    _run("build the wheel", [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                             "-q", "-w", str(context), str(source)], log)
    wheels = sorted(context.glob("*.whl"))
    if len(wheels) != 1:
        raise ImageBuildError(f"pip wheel left {len(wheels)} wheels, expected one: {wheels}")
    for name in ("Dockerfile", "constraints.txt"):
        shutil.copy2(root / "image" / name, context / name)
    # Not an input of the tag: used to reach PyPI during the build, not kept in the image.
    shutil.copy2(_ca_bundle(), context / "ca-bundle.crt")
    # The classic builder: Debian's daemon has no buildx here. Host networking: the daemon has no bridge.
    _run("docker build", ["docker", "build", "--force-rm", "--network", "host", "--build-arg", f"BASE={base}",
                          "--build-arg", f"WHEEL={wheels[0].name}", "--label",
                          f"org.opencontainers.image.revision={tag}", "-t", tag, str(context)],
         log, env=_classic_builder_env())


def _ca_bundle() -> Path:
    """The CA bundle this host's pip trusts (``PIP_CERT``, else Debian's system bundle)."""
    bundle = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        raise ImageBuildError(f"no CA bundle at {bundle} for pip inside the build (set PIP_CERT)")
    return bundle


def _classic_builder_env() -> dict[str, str]:
    return {**os.environ, "DOCKER_BUILDKIT": "0"}


def _remove_old_images(base: str, log: Log) -> None:
    """``rocketmq-replicator`` tags beyond the newest ``KEEP_IMAGES`` and base images other than ``base``, with
    the stopped containers that still name them (a tier run killed before its cleanup leaves those, and the
    daemon refuses to remove an image a container names). Running containers are left alone, and a base that
    a kept image is built on stays: the daemon refuses to remove a parent image."""
    old = [f"{IMAGE_NAME}:{t}" for t in _tags(IMAGE_NAME)[KEEP_IMAGES:]]  # newest first
    old += [f"{BASE_NAME}:{t}" for t in _tags(BASE_NAME) if f"{BASE_NAME}:{t}" != base]
    if not old:
        return
    stopped = []
    for image in old:
        done = subprocess.run(["docker", "ps", "-aq", "--filter", f"ancestor={image}", "--filter", "status=exited",
                               "--filter", "status=created"], capture_output=True, text=True, timeout=60)
        stopped += done.stdout.split()
    if stopped:
        subprocess.run(["docker", "rm", *stopped], capture_output=True, timeout=300)
    log(f"image: removing older images {' '.join(old)}" + (f" and {len(stopped)} stopped container(s)" if stopped
                                                         else ""))
    subprocess.run(["docker", "rmi", *old], capture_output=True, timeout=300)


def _tags(name: str) -> list[str]:
    done = subprocess.run(["docker", "images", name, "--format", "{{.Tag}}"], capture_output=True, text=True,
                          timeout=60)
    return done.stdout.split()


def build_image(root: Path | None = None, *, mirror: str = DEFAULT_MIRROR, force: bool = False,
                log: Log = print) -> BuildResult:
    """The image of this checkout: reused when the daemon holds its tag, else built (the base too when
    missing). ``force`` rebuilds the top layer even when cached (the base stays cached)."""
    started = time.monotonic()
    root = root or repo_root()
    # Before hashing: a dependency change must reach the pins, and the tag must name the pins inside.
    # Not imported at the top: `cli` imports this module, and the image lacks packaging (a dev dependency), which
    # every `python -m broker_store` in a container would then need.
    from broker_store.deploy.image_constraints import CONSTRAINTS, regenerate

    stale = regenerate(root)
    if stale:
        log(f"image: {CONSTRAINTS} regenerated ({stale.describe()})")
    base, tag = base_tag(), image_tag(root)
    built: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rmq-image-", dir="/var/tmp") as tmp:
        if not image_exists(base):
            (Path(tmp) / "base").mkdir()
            _build_base(base, mirror, Path(tmp) / "base", log)
            built.append("base")
        if force or not image_exists(tag):
            (Path(tmp) / "image").mkdir()
            _build_image(root, tag, base, Path(tmp) / "image", log)
            built.append("image")
            _remove_old_images(base, log)
    return BuildResult(tag, base, tuple(built), time.monotonic() - started)


def cmd_image_build(mirror: str, force: bool) -> int:
    result = build_image(mirror=mirror, force=force)
    what = "built " + " and ".join(result.built) if result.built else "cached"
    print(f"IMAGE {result.tag} ({what}, base {result.base_tag}, {result.seconds:.1f} s)")
    return 0


def cmd_image_tag() -> int:
    print(image_tag(repo_root()))
    return 0


def cmd_image_constraints(check_only: bool) -> int:
    from broker_store.deploy.image_constraints import cmd_image_constraints as run

    return run(repo_root(), check_only=check_only)
