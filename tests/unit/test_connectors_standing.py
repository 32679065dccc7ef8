"""connectors.core.standing: a condition starts, changes and clears once; one the round could not judge
stands on (its users: tests/unit/test_connectors_config_sync_standing.py, test_connectors_checkpoint_problems.py)."""

from __future__ import annotations

from connectors.core.standing import StandingConditions


def test_a_condition_is_reported_when_it_starts_changes_and_clears() -> None:
    standing: StandingConditions[tuple[str, str], str] = StandingConditions()
    first = standing.update({("down", "a"): "refused"})
    assert first.started == ((("down", "a"), "refused"),) and not first.changed and not first.cleared and first
    again = standing.update({("down", "a"): "refused"})
    assert not again and again.unchanged == 1
    changed = standing.update({("down", "a"): "timeout"})
    assert changed.changed == ((("down", "a"), "timeout"),) and not changed.started
    cleared = standing.update({})
    assert cleared.cleared == ((("down", "a"), "timeout"),) and standing.standing == {}
    assert standing.update({("down", "a"): "refused"}).started  # back again: started again


def test_only_a_judged_condition_clears() -> None:
    standing: StandingConditions[str, str] = StandingConditions()
    standing.update({"a": "x", "b": "y"})
    done = standing.update({}, judged=lambda key: key == "a")
    assert done.cleared == (("a", "x"),) and standing.standing == {"b": "y"}
