"""A link's topic selection: which source topics it copies and under which target names (``topics:`` of a link
in the replicator config). The settings only: the rules that apply them are ``connectors.core.topic_mapping``.
Validated at load time with the rest of ``connectors.core.config``'s models."""

from __future__ import annotations

import re
import string
from typing import Any

from pydantic import PrivateAttr, field_validator, model_validator

from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.core.settings_base import SettingsModel as _Model
from connectors.core.settings_base import check_topic as _check_topic
from connectors.core.settings_base import compile_pattern as _compile
from connectors.core.settings_base import field_error
from connectors.core.sync_settings import GroupSelection

TOPIC_PLACEHOLDER = "topic"
"""The only field a pattern rule's target template may use: ``"DR_{topic}"``."""


class ExplicitTopic(_Model):
    """Named source topic(s) copied to one target topic."""

    source: tuple[str, ...]
    """One topic or a list; several sources with one ``target`` merge into that target topic."""
    target: str | None = None
    """Target topic name; ``None`` = same name as the (single) source topic."""

    @field_validator("source", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("source")
    @classmethod
    def _check_sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one source topic is required")
        for topic in value:
            _check_topic(topic)
        return value

    @field_validator("target")
    @classmethod
    def _check_target(cls, value: str | None) -> str | None:
        return None if value is None else _check_topic(value)

    @model_validator(mode="after")
    def _target_for_many(self) -> ExplicitTopic:
        if self.target is None and len(self.source) > 1:
            raise field_error("target", "several source topics need one explicit target topic")
        return self


class TopicPattern(_Model):
    """A regex rule: every source topic the pattern fully matches (and no exclude matches) is copied."""

    pattern: str
    """Python regex, matched against the whole topic name (``re.fullmatch``)."""
    target: str = "{topic}"
    """Target name template; ``{topic}`` is the source topic, a template without it merges all matches."""

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, value: str) -> str:
        _compile(value)
        return value

    @field_validator("target")
    @classmethod
    def _check_template(cls, value: str) -> str:
        try:
            fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(value)
                      if name is not None]
        except ValueError as exc:
            raise ValueError(f"bad target template {value!r}: {exc}") from exc
        for name, spec, conv in fields:
            if name != TOPIC_PLACEHOLDER or spec or conv:
                raise ValueError(f"target template {value!r} may only use {{{TOPIC_PLACEHOLDER}}}, "
                                 f"not {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}")
        _check_topic(value.replace("{topic}", "t"))
        return value


class TopicMappingConfig(_Model):
    """Which source topics a link copies, and their target names (see ``connectors.core.topic_mapping``)."""

    explicit: tuple[ExplicitTopic, ...] = ()
    """Named topics; they win over regex rules and may name system topics. The heartbeat topic needs no
    entry: every link replicates it under its own name (``connectors.core.topic_mapping``, rule 0)."""
    include: tuple[TopicPattern, ...] = ()
    """Regex rules, first match wins; topics created later are picked up on the next topic refresh."""
    exclude: tuple[str, ...] = ()
    """Regexes (full match); a topic matching any is never selected by ``include`` / ``all_topics``."""
    all_topics: bool = False
    """Copy every non-system topic of the source cluster under its own name (after ``exclude``)."""
    group_topics: bool = True
    """Also copy ``%RETRY%<group>`` and ``%DLQ%<group>`` of every group the link's checkpoints select by name or
    pattern (``checkpoints.groups.explicit`` / ``include``, when enabled), under their own names: a moved group
    finds its retries and dead letters. Not with the default selection (every group): that would copy the retry
    topics of every group of the source cluster, most of them unrelated to the link. ``exclude`` wins."""
    _groups: GroupSelection | None = PrivateAttr(default=None)  # set once by LinkConfig, while validated

    @property
    def checkpointed_groups(self) -> GroupSelection | None:
        """The groups whose retry and DLQ topics are copied (None: none, or a mapping outside a link)."""
        return self._groups if self.group_topics else None

    @field_validator("include", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple({"pattern": item} if isinstance(item, str) else item for item in value)
        return value

    @field_validator("exclude")
    @classmethod
    def _check_excludes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, pattern in enumerate(value):
            try:
                _compile(pattern)
            except ValueError as exc:
                raise field_error(f"[{index}]", str(exc)) from exc
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TopicMappingConfig:
        if not (self.explicit or self.include or self.all_topics):
            raise field_error("explicit", "the mapping selects no topic: give explicit topics, include "
                                           "patterns or all_topics: true")
        seen: dict[str, str] = {}
        excludes = [re.compile(p) for p in self.exclude]
        for index, entry in enumerate(self.explicit):
            for topic in entry.source:
                target = entry.target or topic
                if topic in seen and seen[topic] != target:
                    raise field_error(f"explicit[{index}].source",
                                       f"topic {topic!r} is mapped twice ({seen[topic]!r} and {target!r})")
                seen[topic] = target
                if topic == HEARTBEAT_TOPIC and target != HEARTBEAT_TOPIC:
                    raise field_error(f"explicit[{index}].target",
                                       f"{HEARTBEAT_TOPIC} is replicated by every link under its own name (the "
                                       f"heartbeat monitor reads it there); it cannot be renamed")
                hit = next((p.pattern for p in excludes if p.fullmatch(topic)), None)
                if hit is not None:
                    raise field_error(f"explicit[{index}].source",
                                       f"topic {topic!r} is listed explicitly but matches exclude {hit!r}; "
                                       f"remove one of the two")
        return self
