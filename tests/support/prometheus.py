"""A real Prometheus (Debian's ``prometheus``, installed by ``.ci/install-tools test``) on loopback for the
monitoring tests: the project's ``monitoring/prometheus.yml`` pointed at the test's targets, its rules checked
with ``promtool`` first, and the HTTP API's instant queries and alert list."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
import yaml

from broker_store.deploy.launcher import HOST, ChildProcess, free_port

MONITORING = Path(__file__).resolve().parents[2] / "monitoring"


def missing_programs() -> list[str]:
    """The Prometheus programs not on PATH (``.ci/system-tools`` names their package)."""
    return [p for p in ("prometheus", "promtool") if shutil.which(p) is None]


def promtool(*args: str) -> str:
    """``promtool ARGS``; AssertionError with its output when it fails."""
    done = subprocess.run(["promtool", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"promtool {' '.join(args)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def write_config(run_dir: Path, targets: list[str] | Mapping[str, list[str]], interval: str = "1s") -> Path:
    """The project's Prometheus config with ``targets`` (a list: the replicator jobs'; a mapping: scrape job name ->
    its targets, the jobs of ``monitoring/prometheus.yml`` it leaves out dropped) and a short scrape/evaluation
    ``interval``, its rule files made absolute (they are relative to ``monitoring/``), written to
    ``run_dir/prometheus.yml``."""
    config: dict[str, Any] = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    config["global"].update(scrape_interval=interval, evaluation_interval=interval)
    config["rule_files"] = [str(MONITORING / f) for f in config["rule_files"]]
    by_job = {"rmq_replicator": targets} if isinstance(targets, list) else dict(targets)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(by_job) <= set(jobs), f"no scrape job {sorted(set(by_job) - set(jobs))} in monitoring/prometheus.yml"
    config["scrape_configs"] = [{**jobs[name], "static_configs": [{"targets": t}]} for name, t in by_job.items()]
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class PrometheusReady:
    """Ready when ``/-/ready`` answers 200."""

    def __init__(self, url: str) -> None:
        self.url = url

    def check(self, proc: subprocess.Popen[bytes], wait: float) -> str | None:
        started = time.monotonic()
        try:
            if requests.get(f"{self.url}/-/ready", timeout=max(wait, 0.2)).status_code == 200:
                return self.url
        except requests.RequestException:  # not listening yet
            pass
        time.sleep(max(0.0, wait - (time.monotonic() - started)))
        return None


class PrometheusServer(ChildProcess):
    """``prometheus`` with ``config`` on a free loopback port, its TSDB and log under ``run_dir``."""

    def __init__(self, config: Path, run_dir: Path) -> None:
        self.url = f"http://{HOST}:{free_port()}"
        command = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={run_dir / 'tsdb'}",
                   f"--web.listen-address={self.url.removeprefix('http://')}", "--log.level=warn"]
        super().__init__("prometheus", command, run_dir / "prometheus.log", PrometheusReady(self.url))

    def _api(self, path: str, **params: str) -> Any:
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=5)
        body = response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (raises AssertionError on a query error)."""
        result: list[dict[str, Any]] = self._api("query", query=expr)["result"]
        return result

    def alert_states(self) -> dict[str, set[str]]:
        """Alert name -> the states (``pending``, ``firing``) its active alerts are in."""
        states: dict[str, set[str]] = {}
        for alert in self._api("alerts")["alerts"]:
            states.setdefault(alert["labels"]["alertname"], set()).add(alert["state"])
        return states

    def target_health(self) -> list[str]:
        return [t["health"] for t in self._api("targets")["activeTargets"]]
