"""ACL credentials from a file the configuration names (RocketMQ's tools.yml layout), without a broker: the
YAML cluster's ``credentials_file`` and the data sources' ``credentialsFile`` options, each error naming the
setting and the file but never the secret."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import yaml

from broker_store.protocol.acl import SessionCredentials
from connectors.core.config import load_replicator_config, read_credentials_file
from connectors.core.errors import CredentialError, ReplicatorConfigError
from connectors.replication.reader_options import SourceOptions
from connectors.replication.writer_options import SinkOptions


def secret_file(tmp_path: Path, name: str, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_file_of_rocketmqs_layout_is_read_and_loose_modes_are_warned(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = secret_file(tmp_path, "src.yml", "accessKey: rocketmq2\nsecretKey: s3cr3t-value\n")
    with caplog.at_level(logging.WARNING):
        assert read_credentials_file(path, field="f") == SessionCredentials("rocketmq2", "s3cr3t-value")
    assert not caplog.records
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        token = secret_file(tmp_path, "t.yml", "accessKey: a\nsecretKey: b\nsecurityToken: tok\n", 0o640)
        assert read_credentials_file(token, field="f") == SessionCredentials("a", "b", "tok")
    assert ["chmod 600" in r.getMessage() and "t.yml" in r.getMessage() for r in caplog.records] == [True]


@pytest.mark.parametrize(("text", "reason"), [
    ("accessKey: a\n", "has no secretKey"),
    ("accessKey: a\nsecretKey: ''\n", "has no secretKey"),
    ("accessKey: a\nsecretKey: s3cr3t-value\nsecret: x\n", "unknown key(s) secret"),
    ("- accessKey\n", "must be a mapping"),
    ("accessKey: [a\nsecretKey: s3cr3t-value\n", "is not YAML"),
])
def test_a_malformed_file_is_named_and_its_secret_never_shown(tmp_path: Path, text: str, reason: str) -> None:
    path = secret_file(tmp_path, "bad.yml", text)
    with pytest.raises(CredentialError, match=re.escape(reason)) as err:
        read_credentials_file(path, field="clusters[A].credentials_file")
    assert err.value.field == "clusters[A].credentials_file" and "bad.yml" in str(err.value)
    assert "s3cr3t" not in str(err.value)
    with pytest.raises(CredentialError, match="cannot read credentials file"):
        read_credentials_file(tmp_path / "absent.yml", field="f")


def test_clusters_and_data_source_options_name_a_file(tmp_path: Path) -> None:
    src = secret_file(tmp_path, "src.yml", "accessKey: src-ak\nsecretKey: src-secret\n")
    dst = secret_file(tmp_path, "dst.yml", "accessKey: dst-ak\nsecretKey: dst-secret\n")
    config = tmp_path / "replicator.yaml"
    clusters: list[dict[str, str]] = [{"name": "A", "namesrv": "127.0.0.1:9876", "credentials_file": str(src)},
                                      {"name": "B", "namesrv": "127.0.0.1:9886", "credentials_file": str(dst)}]
    doc = {
        "clusters": clusters,
        "links": [{"name": "ab", "source": "A", "target": "B", "topics": {"explicit": [{"source": "T"}]},
                   "checkpoint_location": str(tmp_path / "cp"), "delta_location": str(tmp_path / "d")}]}
    config.write_text(yaml.safe_dump(doc))
    opts = {"config": str(config), "link": "ab"}
    assert SourceOptions.from_options(opts).credentials == SessionCredentials("src-ak", "src-secret")
    sink = SinkOptions.from_options(opts)
    assert (sink.credentials, sink.source_credentials) == (SessionCredentials("dst-ak", "dst-secret"),
                                                           SessionCredentials("src-ak", "src-secret"))
    direct = SourceOptions.from_options({"namesrv": "h:1", "topics": "T", "cluster": "A",
                                         "credentialsFile": str(dst)})
    assert direct.credentials == SessionCredentials("dst-ak", "dst-secret")
    with pytest.raises(ReplicatorConfigError, match="not both") as err:
        SinkOptions.from_options({"namesrv": "h:1", "targetCluster": "B", "sourceCredentialsFile": str(src),
                                  "sourceAccessKeyEnv": "X", "sourceSecretKeyEnv": "Y"})
    assert err.value.field == "sourceCredentialsFile"
    clusters[0].update(access_key_env="AK", secret_key_env="SK")
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(ReplicatorConfigError, match="not both") as err:
        load_replicator_config(config)
    assert err.value.field == "clusters[0].credentials_file"
