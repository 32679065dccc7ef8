"""A link's settings of the polling connectors that copy state rather than messages: consumer-group
checkpoints (``connectors.checkpoint``) and topic / subscription-group configuration
(``connectors.config_sync``).

``LinkConfig`` (``connectors.core.config``) holds one of each as ``checkpoints`` and ``config_sync``; the YAML
takes them by field name under the link, the connectors' Spark options by the camelCase alias, both validated
here. Imports no connector package.

YAML (every key optional)::

    links:
      - name: source-to-target
        ...
        checkpoints:
          enabled: true                          # false: jobs/run_all.py and jobs/checkpoint.py skip the link
          interval: 5 seconds                    # one snapshot of the source groups per interval
          groups: {explicit: [billing], include: ["app_.*"], exclude: [".*_test"]}
          max_runs_per_queue: 10000              # offset-map runs kept exactly per source queue (>= 2)
        config_sync:
          enabled: true                          # false: jobs/run_all.py and jobs/config_sync.py skip the link
          interval: 10 seconds
          subscription_groups: true
          propagate_deletion: false
          acl: {enabled: false, copy_secrets: false}   # ACL 1.0 accounts, topic perms through the mapping
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from connectors.core.settings_base import SettingsModel, compile_pattern, field_error, parse_duration

CHECKPOINT_TOPIC = "rmq_sys_replicator_checkpoint"
"""Topic on the target every translated checkpoint is also produced to (one JSON message per group and
checkpoint; ``connectors.checkpoint.committer`` documents the body)."""
REPLICATOR_GROUP_PREFIXES = ("CID_RMQ_SYS_", "PID_RMQ_SYS_")
"""Groups of the replicator itself: never checkpointed (their offsets belong to the source side)."""
SYSTEM_GROUP_PREFIXES = ("CID_ONSAPI_", "CID_ONS-HTTP-PROXY", "TOOLS_CONSUMER", "FILTERSRV_CONSUMER",
                         "SELF_TEST_C_GROUP", "CID_SYS_RMQ_TRANS")
"""RocketMQ's own consumer groups (MixAll): never checkpointed or copied."""


def is_system_group(group: str) -> bool:
    """True for the replicator's and RocketMQ's own groups."""
    return group.startswith(REPLICATOR_GROUP_PREFIXES) or group.startswith(SYSTEM_GROUP_PREFIXES)


class GroupSelection(SettingsModel):
    """Which source consumer groups a link checkpoints: the explicit ones, plus every group an ``include``
    pattern fully matches and no ``exclude`` pattern matches. Nothing given = every non-system group."""

    explicit: tuple[str, ...] = ()
    """Groups named explicitly; one that has no offsets on the source is reported as unknown each round."""
    include: tuple[str, ...] = ()
    """Regexes (full match)."""
    exclude: tuple[str, ...] = ()
    """Regexes (full match); win over ``include``, never over ``explicit``."""

    @field_validator("include", "exclude")
    @classmethod
    def _check_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, pattern in enumerate(value):
            try:
                compile_pattern(pattern)
            except ValueError as exc:
                raise field_error(f"[{index}]", str(exc)) from exc
        return value

    @field_validator("explicit")
    @classmethod
    def _check_explicit(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for index, group in enumerate(value):
            if not group or is_system_group(group):
                raise field_error(f"[{index}]", f"{group!r} is empty or a system group")
        return value

    @property
    def selects_all(self) -> bool:
        return not (self.explicit or self.include)

    def selects(self, group: str) -> bool:
        """True when ``group`` is checkpointed (system groups never are)."""
        if group in self.explicit:
            return True
        if is_system_group(group) or any(re.fullmatch(p, group) for p in self.exclude):
            return False
        return self.selects_all or any(re.fullmatch(p, group) for p in self.include)


DEFAULT_MAX_RUNS_PER_QUEUE = 10_000
"""Default of ``CheckpointSettings.max_runs_per_queue`` (a run costs a few hundred bytes of the driver)."""
MIN_MAX_RUNS_PER_QUEUE = 2
"""The cap's floor: the oldest runs fold into one summary run, and the newest run is never folded."""


class CheckpointSettings(SettingsModel):
    """A link's consumer-group checkpoints (``connectors.checkpoint``)."""

    enabled: bool = True
    """Run the link's checkpoint query (``jobs/run_all.py``, ``jobs/checkpoint.py``) and export its
    checkpoint age; false: the link has none."""
    interval: float = 5.0
    """Seconds between two snapshots of the source groups (the Spark trigger of the checkpoint query);
    a number or ``"5 seconds"``. The recovery point is this plus the translation's own time."""
    groups: GroupSelection = GroupSelection()
    """The groups checkpointed (default: every non-system group of the linked topics)."""
    produce_topic: bool = True
    """Also produce each checkpoint to ``rmq_sys_replicator_checkpoint`` on the target."""
    max_runs_per_queue: int = Field(default=DEFAULT_MAX_RUNS_PER_QUEUE, ge=MIN_MAX_RUNS_PER_QUEUE)
    """Offset-map runs the checkpoint translator keeps per source queue (``OffsetTranslator.forget_below``;
    a run per discontinuity of the queue: skipped message, re-replicated range, placement change). At the
    cap the oldest runs are folded into one summary run: a group whose offset is older than the oldest run
    kept exactly is translated to the summary's lowest target offset (its consumer on the target re-reads
    from there, never skips a message), reported as inexact. Runs below every checkpointed group's offset
    are folded whatever the cap. At least 2 (the summary and the newest run)."""

    @field_validator("interval", mode="before")
    @classmethod
    def _check_interval(cls, value: Any) -> float:
        return parse_duration(value)

    @property
    def spark_trigger(self) -> str:
        return f"{round(self.interval * 1000)} milliseconds"


class AclSyncSettings(SettingsModel):
    """The copy of the source's ACL 1.0 accounts to the target (``connectors.config_sync.acl_sync``)."""

    enabled: bool = False
    """Copy every source account's permissions to the target's primaries, topic permissions through the link's
    topic mapping (entries for topics the link does not copy are left out). The link's target credentials must
    be an admin account there; nothing is ever deleted on the target."""
    copy_secrets: bool = False
    """Also copy secret keys: a source account missing on the target is created with the source's secret, and an
    existing one takes it. False: an existing target account keeps its own secret, a missing one is reported
    (refused) until someone creates it on the target."""


class ConfigSyncSettings(SettingsModel):
    """A link's copy of topic configuration and subscription groups (``connectors.config_sync``)."""

    enabled: bool = True
    """Run the link's config-sync query (``jobs/run_all.py``, ``jobs/config_sync.py``) and export its
    pending changes; false: the target's topics are managed by hand."""
    interval: float = 10.0
    """Seconds between two snapshots of the source configuration; a new source topic exists on the
    target within two intervals."""
    subscription_groups: bool = True
    """Copy the source's subscription groups of the selected consumer groups."""
    groups: GroupSelection = GroupSelection()
    """The subscription groups copied (default: every non-system group)."""
    propagate_deletion: bool = False
    """Delete a target topic when its source topic(s) are deleted, and a copied subscription group (selected by
    ``groups``) when it is deleted on the source; a group only on the target is never deleted. Off: reported,
    never applied."""
    max_queue_nums: int = Field(default=1024, gt=0)
    """Queues per target broker group at most: a source broker group with more is refused on the target
    (recorded as a refused change); the source's total spread over the target's groups is capped here (those
    source queues then share target queues, ``connectors.config_sync.sizing``)."""
    acl: AclSyncSettings = AclSyncSettings()
    """The ACL accounts' copy (off by default)."""

    @field_validator("interval", mode="before")
    @classmethod
    def _check_interval(cls, value: Any) -> float:
        return parse_duration(value)

    @model_validator(mode="after")
    def _consistent(self) -> ConfigSyncSettings:
        if not self.subscription_groups and (self.groups.explicit or self.groups.include):
            raise field_error("groups", "groups are only used with subscription_groups: true")
        return self

    @property
    def spark_trigger(self) -> str:
        return f"{round(self.interval * 1000)} milliseconds"
