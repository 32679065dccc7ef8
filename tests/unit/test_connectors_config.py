"""Replicator config: the shipped conf/replicator.yaml loads; every bad input names file and field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.core.config import FailurePolicy, LinkConfig, load_replicator_config, parse_replicator_config
from connectors.core.errors import CredentialError, ReplicatorConfigError
from connectors.core.monitoring import HeartbeatSettings

REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "clusters": [
        {"name": "A", "namesrv": ["127.0.0.1:9876"]},
        {"name": "B", "namesrv": "127.0.0.1:9886;127.0.0.1:9887"},
    ],
    "links": [
        {"name": "a-to-b", "source": "A", "target": "B", "topics": {"explicit": [{"source": "Orders"}]},
         "checkpoint_location": "run/cp/a-to-b", "delta_location": "run/delta"},
    ],
}


def load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "replicator.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_replicator_config(path)


def with_link(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["links"][0].update(changes)
    return doc


def error_of(tmp_path: Path, doc: dict[str, Any]) -> ReplicatorConfigError:
    with pytest.raises(ReplicatorConfigError) as info:
        load(tmp_path, doc)
    err = info.value
    assert err.file == str(tmp_path / "replicator.yaml")
    assert str(err).startswith(f"{err.file}: {err.field}: ")
    return err


def test_shipped_config_is_valid_and_matches_local_clusters() -> None:
    config = load_replicator_config(REPO / "conf" / "replicator.yaml")
    local = yaml.safe_load((REPO / "conf" / "cluster-local.yaml").read_text())
    local_addrs = {c["name"]: c["namesrv"]["listen"] for c in local["clusters"]}
    assert {c.name: c.namesrv for c in config.clusters} == {n: (a,) for n, a in local_addrs.items()}
    link = config.link("source-to-target")
    assert (link.source, link.target) == ("source", "target")
    assert link.group == "CID_RMQ_SYS_REPLICATOR_source-to-target"
    # the example shows the defaults (RIP-45's heartbeat interval); `make demo` shortens them its own way
    default = LinkConfig.model_validate({"name": "d", "source": "s", "target": "t", "topics": {"all_topics": True},
                                         "checkpoint_location": "c", "delta_location": "d"})
    assert link.trigger_interval == default.trigger_interval == 5.0 and link.spark_trigger == "5000 milliseconds"
    assert link.checkpoints == default.checkpoints and link.checkpoints.enabled and link.checkpoints.interval == 5.0
    assert link.config_sync == default.config_sync and link.config_sync.enabled and link.config_sync.interval == 10.0
    heartbeat = HeartbeatSettings()
    assert (config.heartbeat.interval, config.heartbeat.lagging_threshold) == (heartbeat.interval, 10.0) == (10.0, 10.0)
    assert link.tables_location == Path("run/delta/source-to-target")
    assert link.failure_policy is FailurePolicy.DISMISS


def test_defaults_and_normalisation(tmp_path: Path) -> None:
    config = load(tmp_path, with_link(trigger_interval="500 milliseconds", tag_filter="TagA||TagB "))
    link = config.links[0]
    assert config.cluster("B").namesrv == ("127.0.0.1:9886", "127.0.0.1:9887")
    assert link.trigger_interval == 0.5
    assert link.tag_filter == "TagA || TagB" and link.tags == frozenset({"TagA", "TagB"})
    knobs = (link.max_retries, link.retry_backoff_ms, link.max_in_flight, link.preserve_queues)
    assert knobs == (3, 1000, 4, True)
    assert load(tmp_path, with_link(trigger_interval=2)).links[0].trigger_interval == 2.0


def test_unknown_key_is_named(tmp_path: Path) -> None:
    err = error_of(tmp_path, with_link(max_retrys=5))
    assert err.field == "links[0].max_retrys"
    assert "unknown key" in err.reason


def test_missing_target_cluster_is_named(tmp_path: Path) -> None:
    err = error_of(tmp_path, with_link(target="C"))
    assert err.field == "links[0].target"
    assert "'C' is not defined" in err.reason and "['A', 'B']" in err.reason


def test_source_equals_target(tmp_path: Path) -> None:
    assert error_of(tmp_path, with_link(target="A")).field == "links[0].target"


@pytest.mark.parametrize("key", ["secret_key", "access_key", "password"])
def test_inline_secret_is_rejected(tmp_path: Path, key: str) -> None:
    doc = copy.deepcopy(BASE)
    doc["clusters"][0][key] = "s3cr3t"
    err = error_of(tmp_path, doc)
    assert err.field == f"clusters[0].{key}"
    assert "inline credentials are not allowed" in err.reason and "secret_key_env" in err.reason
    assert "s3cr3t" not in str(err)


def test_env_reference_that_looks_like_a_secret(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["clusters"][0].update(access_key_env="RMQ_AK", secret_key_env="abc/+=123")
    err = error_of(tmp_path, doc)
    assert err.field == "clusters[0].secret_key_env" and "environment variable" in err.reason


def test_credentials_need_both_and_resolve_at_use_time(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["clusters"][0]["access_key_env"] = "RMQ_AK"
    assert error_of(tmp_path, doc).field == "clusters[0].secret_key_env"

    doc["clusters"][0]["secret_key_env"] = "RMQ_SK"
    cluster = load(tmp_path, doc).cluster("A")
    creds = cluster.credentials({"RMQ_AK": "ak", "RMQ_SK": "sk"})
    assert creds is not None and (creds.access_key, creds.secret_key) == ("ak", "sk")
    assert "sk" not in repr(creds).replace("secret_key", "")
    with pytest.raises(CredentialError, match="RMQ_SK is not set"):
        cluster.credentials({"RMQ_AK": "ak"})
    assert load(tmp_path, BASE).cluster("B").credentials({}) is None


def test_bad_regex_is_named(tmp_path: Path) -> None:
    err = error_of(tmp_path, with_link(topics={"include": ["Orders_(.*"]}))
    assert err.field == "links[0].topics.include[0].pattern"
    assert "invalid regular expression" in err.reason
    err = error_of(tmp_path, with_link(topics={"all_topics": True, "exclude": ["ok", "[bad"]}))
    assert err.field == "links[0].topics.exclude[1]"


def test_custom_policy_without_hook(tmp_path: Path) -> None:
    err = error_of(tmp_path, with_link(failure_policy="custom"))
    assert err.field == "links[0].failure_hook" and "required when failure_policy is custom" in err.reason
    assert error_of(tmp_path, with_link(failure_policy="custom", failure_hook="not a hook")).field == \
        "links[0].failure_hook"
    assert error_of(tmp_path, with_link(failure_hook="pkg.mod:fn")).field == "links[0].failure_hook"
    err = error_of(tmp_path, with_link(failure_policy="retry"))
    assert err.field == "links[0].failure_policy" and "'dismiss'" in err.reason and "'custom'" in err.reason
    link = load(tmp_path, with_link(failure_policy="custom", failure_hook="pkg.mod:Cls.fn")).links[0]
    assert link.failure_hook == "pkg.mod:Cls.fn"


def test_cluster_name_with_chain_separator(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["clusters"][0]["name"] = "A,B"
    err = error_of(tmp_path, doc)
    assert err.field == "clusters[0].name" and "separator" in err.reason


def test_mapping_shapes_validated(tmp_path: Path) -> None:
    many_no_target = with_link(topics={"explicit": [{"source": ["X", "Y"]}]})
    assert error_of(tmp_path, many_no_target).field == "links[0].topics.explicit[0].target"
    contradiction = with_link(topics={"explicit": [{"source": "X_debug"}], "exclude": [".*_debug"]})
    assert "matches exclude" in error_of(tmp_path, contradiction).reason
    twice = with_link(topics={"explicit": [{"source": "X"}, {"source": "X", "target": "Z"}]})
    assert error_of(tmp_path, twice).field == "links[0].topics.explicit[1].source"
    assert error_of(tmp_path, with_link(topics={})).field == "links[0].topics.explicit"
    bad_template = with_link(topics={"include": [{"pattern": "A.*", "target": "DR_{name}"}]})
    assert error_of(tmp_path, bad_template).field == "links[0].topics.include[0].target"
    formatted = with_link(topics={"include": [{"pattern": "A.*", "target": "DR_{topic!r}"}]})
    assert "not {topic!r}" in error_of(tmp_path, formatted).reason
    assert error_of(tmp_path, with_link(topics={"explicit": [{"source": "bad topic"}]})).field == \
        "links[0].topics.explicit[0].source"


def test_bidirectional_links_and_uniqueness(tmp_path: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["links"].append({"name": "b-to-a", "source": "B", "target": "A",
                         "topics": {"explicit": [{"source": "Orders"}]},
                         "checkpoint_location": "run/cp/b-to-a", "delta_location": "run/delta"})
    config = load(tmp_path, doc)
    assert [(link.source, link.target) for link in config.links] == [("A", "B"), ("B", "A")]
    assert config.links[0].group != config.links[1].group

    shared = copy.deepcopy(doc)
    shared["links"][1]["checkpoint_location"] = "run/cp/./a-to-b"
    assert error_of(tmp_path, shared).field == "links[1].checkpoint_location"
    dup = copy.deepcopy(doc)
    dup["links"][1]["name"] = "a-to-b"
    assert error_of(tmp_path, dup).field == "links[1].name"


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ReplicatorConfigError, match="cannot read"):
        load_replicator_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n")
    with pytest.raises(ReplicatorConfigError, match="not valid YAML"):
        load_replicator_config(bad)
    with pytest.raises(ReplicatorConfigError, match="expected a mapping"):
        parse_replicator_config(["x"], file="f.yaml")
    with pytest.raises(ReplicatorConfigError, match="no link 'zz'"):
        parse_replicator_config(BASE).link("zz")


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """Found by benchmarks/fuzz.py: safe_load reads the file itself, so the UnicodeDecodeError came from inside
    it, past the OSError handler, instead of a ReplicatorConfigError naming the file."""
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"version: 1\nclusters: []\n# caf\xe9\n")
    with pytest.raises(ReplicatorConfigError, match="not UTF-8") as caught:
        load_replicator_config(bad)
    assert str(bad) in str(caught.value)


def test_several_errors_are_all_reported(tmp_path: Path) -> None:
    err = error_of(tmp_path, with_link(max_retries=-1, max_in_flight=0))
    assert err.field == "links[0].max_retries"
    assert "links[0].max_in_flight" in err.reason
