"""TLS settings under RocketMQ's key names: errors naming the key (a missing file by its path), the three modes'
requirements, the client side's pairs, the CLI's options, the replicator's cluster ``tls`` block (files, never
inline PEM), contexts that load (or name the files that do not), and a launcher-written config reloading."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import pytest
import yaml

from broker_store.cli.tls import add_tls_arguments, tls_from_args
from broker_store.config import BrokerConfig, NamesrvConfig, load_yaml
from broker_store.deploy.launcher import write_config
from broker_store.net.tls import ServerTls, client_context, server_context
from broker_store.net.tls_settings import ClientAuth, TlsClientSettings, TlsMode, TlsServerSettings
from broker_store.protocol.errors import ConfigError
from connectors.core.config import parse_replicator_config
from connectors.core.errors import ReplicatorConfigError
from tests.support.certs import CertSet, make_test_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertSet:
    return make_test_certs(tmp_path_factory.mktemp("certs"))


def load_broker(tmp_path: Path, tls: dict[str, object]) -> BrokerConfig:
    path = tmp_path / "broker.yaml"
    path.write_text(yaml.safe_dump({"broker_name": "b", "store_dir": str(tmp_path / "store"), "tls": tls}))
    return load_yaml(path, BrokerConfig)


def test_rocketmq_key_names_load(tmp_path: Path, certs: CertSet) -> None:
    cfg = load_broker(tmp_path, {"server": certs.server_tls("permissive", "optional"), "enable": True,
                                 "client": certs.client_tls(with_cert=True)})
    server = cfg.tls.server
    assert (server.mode, server.cert_path, server.need_client_auth) == (TlsMode.PERMISSIVE, certs.server_cert,
                                                                        ClientAuth.OPTIONAL)
    client = cfg.tls.client_settings()
    assert client is not None and client.key_path == certs.client_key and client.auth_server
    assert BrokerConfig(broker_name="b", store_dir=tmp_path).tls.server.mode is TlsMode.DISABLED
    assert BrokerConfig(broker_name="b", store_dir=tmp_path).tls.client_settings() is None


def test_a_missing_certificate_file_is_named_with_its_key(tmp_path: Path, certs: CertSet) -> None:
    server = {**certs.server_tls("enforcing"), "certPath": str(tmp_path / "gone.pem")}
    with pytest.raises(ConfigError) as info:
        load_broker(tmp_path, {"server": server})
    assert "broker.yaml: tls.server.certPath: Value error, file not found: " in str(info.value)
    assert "gone.pem" in str(info.value)


def test_a_mode_typo_lists_the_modes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tls\.server\.mode: Input should be 'disabled', 'permissive' or "
                                          r"'enforcing' \(got 'strict'\)"):
        load_broker(tmp_path, {"server": {"mode": "strict"}})


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tls\.server\.keyPassword: Extra inputs are not permitted"):
        load_broker(tmp_path, {"server": {"keyPassword": "123456"}})


def test_enforcing_needs_a_certificate_and_key(certs: CertSet) -> None:
    with pytest.raises(ValueError, match="mode enforcing needs keyPath"):
        TlsServerSettings.model_validate({"mode": "enforcing", "certPath": certs.server_cert})
    with pytest.raises(ValueError, match="mode permissive needs certPath and keyPath"):
        TlsServerSettings.model_validate({"mode": "permissive"})
    assert TlsServerSettings.model_validate({"mode": "disabled"}).mode is TlsMode.DISABLED


def test_client_auth_needs_trusted_cas(certs: CertSet) -> None:
    with pytest.raises(ValueError, match="need.client.auth require needs trustCertPath"):
        TlsServerSettings.model_validate({"mode": "enforcing", "certPath": certs.server_cert,
                                           "keyPath": certs.server_key, "need.client.auth": "require"})


def test_a_client_certificate_needs_its_key(certs: CertSet) -> None:
    with pytest.raises(ValueError, match="keyPath is missing"):
        TlsClientSettings.model_validate({"certPath": certs.client_cert})


def test_inline_pem_is_refused() -> None:
    with pytest.raises(ValueError, match="inline PEM text is not allowed"):
        TlsClientSettings.model_validate({"keyPath": "-----BEGIN PRIVATE KEY-----\nMIG...", "certPath": "x"})


def test_contexts_load_and_name_files_that_do_not(certs: CertSet) -> None:
    server = server_context(TlsServerSettings.model_validate(certs.server_tls("enforcing", "require")))
    assert server.verify_mode == ssl.CERT_REQUIRED
    client = client_context(TlsClientSettings.model_validate(certs.client_tls(with_cert=True)))
    assert (client.verify_mode, client.check_hostname) == (ssl.CERT_REQUIRED, False)
    assert client_context(TlsClientSettings.model_validate({"authServer": False})).verify_mode == ssl.CERT_NONE
    mismatched = TlsServerSettings.model_validate({"mode": "enforcing", "certPath": certs.server_cert,
                                                 "keyPath": certs.client_key})
    with pytest.raises(ConfigError, match=r"tls\.server\.certPath / tls\.server\.keyPath .*cannot load"):
        server_context(mismatched)
    not_pem = TlsClientSettings.model_validate({"trustCertPath": certs.client_key})  # a key where CA certs belong
    with pytest.raises(ConfigError, match=r"tls\.client\.trustCertPath .*cannot load"):
        client_context(not_pem)
    assert ServerTls.from_settings(TlsServerSettings()).context is None


def test_a_launcher_written_config_reloads(tmp_path: Path, certs: CertSet) -> None:
    cfg = NamesrvConfig.model_validate({"tls": {"server": certs.server_tls("enforcing"), "enable": True,
                                                   "client": certs.client_tls()}})
    path = write_config(tmp_path, "ns", cfg)
    assert load_yaml(path, NamesrvConfig) == cfg


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tls_arguments(parser)
    return parser.parse_args(argv)


def test_cli_options(tmp_path: Path, certs: CertSet, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TLS_ENABLE", "TLS_CLIENT_TRUST_CERT_PATH", "TLS_CLIENT_CERT_PATH", "TLS_CLIENT_KEY_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert tls_from_args(cli_args()) is None
    assert tls_from_args(cli_args("--tls")) == TlsClientSettings()
    settings = tls_from_args(cli_args("--tls-trust-cert", str(certs.ca), "--tls-cert", str(certs.client_cert),
                                      "--tls-key", str(certs.client_key)))
    assert settings == TlsClientSettings.model_validate(
        {"trustCertPath": certs.ca, "certPath": certs.client_cert, "keyPath": certs.client_key})
    assert tls_from_args(cli_args("--tls-no-verify")) == TlsClientSettings.model_validate({"authServer": False})
    with pytest.raises(ConfigError, match=r"--tls-trust-cert \(tls.client.trustCertPath\): .*file not found: .*x.pem"):
        tls_from_args(cli_args("--tls-trust-cert", str(tmp_path / "x.pem")))
    with pytest.raises(ConfigError, match="keyPath is missing"):
        tls_from_args(cli_args("--tls-cert", str(certs.client_cert)))


def replicator(tls: object) -> dict[str, object]:
    return {"clusters": [{"name": "A", "namesrv": "127.0.0.1:9876", "tls": tls},
                         {"name": "B", "namesrv": "127.0.0.1:9877"}],
            "links": [{"name": "l", "source": "A", "target": "B", "topics": {"explicit": [{"source": "T"}]},
                       "checkpoint_location": "cp", "delta_location": "delta"}]}


def test_replicator_cluster_tls_block(tmp_path: Path, certs: CertSet) -> None:
    config = parse_replicator_config(replicator(certs.client_tls(with_cert=True)))
    assert config.cluster("A").tls == TlsClientSettings.model_validate(certs.client_tls(with_cert=True))
    assert config.cluster("B").tls is None
    with pytest.raises(ReplicatorConfigError) as info:
        parse_replicator_config(replicator({"trustCertPath": str(tmp_path / "ca-missing.pem")}))
    assert info.value.field == "clusters[0].tls.trustCertPath" and "ca-missing.pem" in info.value.reason
    with pytest.raises(ReplicatorConfigError) as info:
        parse_replicator_config(replicator({"certPath": str(certs.client_cert),
                                            "keyPath": "-----BEGIN EC PRIVATE KEY-----\nAAAA"}))
    assert "inline PEM text is not allowed" in info.value.reason and "AAAA" not in str(info.value)
