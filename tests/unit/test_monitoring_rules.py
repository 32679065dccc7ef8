"""monitoring/'s rules and config with ``promtool`` (no Prometheus server): they parse, and each alert fires on
synthetic series after its ``for`` duration (``monitoring/alerts_test.yml``). The live test against a real
Prometheus is tests/integration/test_monitoring.py."""

from __future__ import annotations

import json

import pytest

from tests.support.prometheus import MONITORING, missing_programs, promtool

needs_promtool = pytest.mark.skipif("promtool" in missing_programs(),
                                    reason="promtool not installed: .ci/install-tools test installs it")


@needs_promtool
def test_rules_and_config_pass_promtool() -> None:
    assert "SUCCESS" in promtool("check", "rules", str(MONITORING / "alerts.yml"))
    assert "SUCCESS" in promtool("check", "config", str(MONITORING / "prometheus.yml"))


@needs_promtool
def test_alerts_fire_on_synthetic_series() -> None:
    assert "SUCCESS" in promtool("test", "rules", str(MONITORING / "alerts_test.yml"))


def test_dashboard_panels_query_the_replicator_metrics() -> None:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and all("rmq_replicator_" in e for e in exprs)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
