"""Test certificates made with the ``openssl`` command line (the ``cryptography`` package is not in the test
environment): a CA, a server certificate for 127.0.0.1 and a client certificate it signed, and a second,
unrelated CA with its own client certificate (one the servers must refuse). EC P-256 keys: each
``openssl`` call takes milliseconds. Keys are unencrypted PEM, as ``net.tls_settings`` reads them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl("req", "-x509", *_CURVE, "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}.pem", directory / f"{name}.key", directory / f"{name}.csr",
                           directory / f"{name}.ext")
    _openssl("req", *_CURVE, "-keyout", key, "-out", csr, "-subj", f"/CN={name}", cwd=directory)
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", ext, cwd=directory)
    return cert, key


@dataclass(frozen=True)
class CertSet:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed neither the server's nor the client's certificate."""
    stranger_cert: Path
    """A client certificate signed by ``other_ca``."""
    stranger_key: Path

    def server_tls(self, mode: str, need_client_auth: str = "none") -> dict[str, str]:
        """A ``tls.server`` section in RocketMQ's key names."""
        return {"mode": mode, "certPath": str(self.server_cert), "keyPath": str(self.server_key),
                "trustCertPath": str(self.ca), "need.client.auth": need_client_auth}

    def client_tls(self, *, with_cert: bool = False) -> dict[str, str]:
        """A ``tls.client`` section trusting the test CA (with the client certificate when ``with_cert``)."""
        out = {"trustCertPath": str(self.ca)}
        if with_cert:
            out |= {"certPath": str(self.client_cert), "keyPath": str(self.client_key)}
        return out


def make_test_certs(directory: Path) -> CertSet:
    """Write the CA, server and client certificates into ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    server = _signed(directory, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                             "extendedKeyUsage=serverAuth\n")
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    other = _ca(directory, "other-ca")
    stranger = _signed(directory, "stranger", other, "extendedKeyUsage=clientAuth\n")
    return CertSet(ca=ca[0], server_cert=server[0], server_key=server[1], client_cert=client[0],
                     client_key=client[1], other_ca=other[0], stranger_cert=stranger[0], stranger_key=stranger[1])
