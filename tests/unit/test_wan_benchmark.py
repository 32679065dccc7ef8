"""``benchmarks/wan.py``'s pure parts: the last line's exact shape (its contract), the proxy routes that put the WAN
source behind 127.0.0.2, and the generated replicator.yaml (loaded by the real config loader). The run itself is
a heavy benchmark: ``benchmarks/wan.py --quick``."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from benchmarks.wan import WAN_IP, config_yaml, link, proxy_routes, summary_line
from connectors.core.config import load_replicator_config


def test_the_last_line_has_the_documented_shape() -> None:
    line = summary_line(50.0, 80.0, 68.0, 1.234)
    assert line == "wan rtt 50 ms: lan 80.0 MB/s, wan 68.0 MB/s, ratio 0.85, lag p99 1.23 s"
    assert re.fullmatch(r"wan rtt [\d.]+ ms: lan [\d.]+ MB/s, wan [\d.]+ MB/s, ratio [\d.]+, lag p99 [\d.]+ s", line)
    assert summary_line(12.5, 0.0, 1.0, 0.5).startswith("wan rtt 12.5 ms: lan 0.0 MB/s, wan 1.0 MB/s, ratio 0.00")


def test_the_proxy_listens_on_the_advertised_address_at_the_same_ports() -> None:
    cluster = SimpleNamespace(addr="127.0.0.1:4001", broker=SimpleNamespace(addr="127.0.0.1:4002"))
    routes = proxy_routes(cluster)  # type: ignore[arg-type]
    assert [(r.listen, r.upstream) for r in routes] == [(f"{WAN_IP}:4001", "127.0.0.1:4001"),
                                                        (f"{WAN_IP}:4002", "127.0.0.1:4002")]


def test_the_generated_config_names_the_wan_source_through_the_proxy(tmp_path: Path) -> None:
    path = tmp_path / "replicator.yaml"
    path.write_text(config_yaml({"bsrc": "127.0.0.1:4000", "bwan": f"{WAN_IP}:4001", "bdst": "127.0.0.1:4003"}, [
        link("l-lan", "bsrc", "TopicA", 1.0, tmp_path, 1000, 4),
        link("l-wan", "bwan", "TopicB", 0.5, tmp_path, 1000, 4)]))
    config = load_replicator_config(path)
    assert config.link("l-wan").source == "bwan" and config.link("l-lan").source == "bsrc"
    assert {c.name: c.namesrv for c in config.clusters}["bwan"] == (f"{WAN_IP}:4001",)
