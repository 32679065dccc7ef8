"""The demo's console carries only its own lines (docs/getting-started.md, "The demo"): the local clusters' INFO lines
(``up``'s stderr) go to ``logs/clusters.log`` beside the job's logs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.demo import CLUSTERS_LOG, start_clusters
from tests.support.processes import broker_listen_port, free_port

pytestmark = pytest.mark.integration


def test_the_clusters_log_to_the_demos_logs_directory(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "clusters.yaml"
    config.write_text(yaml.safe_dump({"clusters": [
        {"name": "src", "namesrv": {"listen": f"127.0.0.1:{free_port()}"},
         "brokers": [{"broker_name": "src-a", "listen": f"127.0.0.1:{broker_listen_port(fast_listen=False)}",
                      "store_dir": "s-a", "fast_listen_enable": False}]}]}))
    proc, namesrvs = start_clusters(config, tmp_path)
    try:
        assert len(namesrvs) == 1
    finally:
        proc.terminate()
        proc.wait(60)
    log = (tmp_path / "logs" / CLUSTERS_LOG).read_text()
    assert "src-a" in log and " INFO " in log, log
    assert " INFO " not in capfd.readouterr().err
