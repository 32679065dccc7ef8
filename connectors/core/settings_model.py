"""The base of every settings model (YAML sections and Spark options) and the duration format they share.

Imported by ``connectors.core.config`` and ``connectors.core.monitoring``; kept apart so a settings
module can define models without importing the whole config (which references them).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

_DURATION_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
_DURATION_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)?\s*")


class SettingsModel(BaseModel):
    # YAML keys are the field names; the camelCase aliases are the same settings' Spark option names
    # (``connectors.core.options``), never accepted from YAML.
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, validate_by_name=True,
                              validate_by_alias=False)


def field_error(field_path: str, reason: str) -> PydanticCustomError:
    """A validation error that ``load_replicator_config`` reports at ``<model path>.<field_path>``."""
    return PydanticCustomError("replicator_field", "{reason}", {"field": field_path, "reason": reason})


def parse_duration(value: Any) -> float:
    """Seconds (> 0) from a number or a string like ``"5 seconds"`` / ``"500 milliseconds"`` / ``"1 min"``."""
    if isinstance(value, bool):
        raise ValueError("expected seconds as a number or a string like '5 seconds'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_PATTERN.fullmatch(value)
        unit = (match.group(2) or "seconds").lower() if match else ""
        if not match or unit not in _DURATION_UNITS:
            raise ValueError(f"{value!r} is not a duration like '5 seconds', '500 milliseconds' or "
                             f"'1 minute' (units: {sorted(set(_DURATION_UNITS))})")
        seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    else:
        raise ValueError("expected seconds as a number or a string like '5 seconds'")
    if seconds <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    return seconds
