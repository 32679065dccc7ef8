"""The base of every settings model of ``broker_store.config`` and the checks its modules share."""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


def check_ipv4(value: str) -> str:
    """A pydantic ``AfterValidator``: ``value`` is a dotted IPv4 address."""
    try:
        ipaddress.IPv4Address(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not an IPv4 address (stored messages hold IPv4 hosts)") from exc
    return value


class ConfigModel(BaseModel):
    """Frozen, unknown keys refused, field docstrings kept (the configuration reference shows them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def duplicates(values: Iterable[str]) -> list[str]:
    """The values given more than once, sorted."""
    return sorted(v for v, n in Counter(values).items() if n > 1)
