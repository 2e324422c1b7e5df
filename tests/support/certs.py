"""A throwaway PKI for TLS tests, written as PEM files.

:func:`make_certs` creates a CA, a server certificate for ``127.0.0.1`` and ``localhost``, a
client certificate for mutual TLS, and the broken cases a TLS client must refuse: an expired
server certificate, one for another host, and a second CA that signed none of them. Keys are
EC P-256 (fast to generate), unencrypted PKCS#8.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost")
"""The names the good server certificate is valid for (an IP and a DNS SAN)."""

WRONG_HOST = "other.example"
"""The only name the wrong-host certificate is valid for."""

CLIENT_CN = "spark-client"
"""The common name of the client certificate: the principal of a ``tls`` login."""


@dataclass(frozen=True)
class TestCerts:
    """Paths of the PEM files :func:`make_certs` wrote."""

    __test__ = False  # not a test class, despite the name

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    expired_cert: Path
    expired_key: Path
    wrong_host_cert: Path
    wrong_host_key: Path
    other_ca: Path


@dataclass(frozen=True)
class _Issuer:
    name: x509.Name
    key: ec.EllipticCurvePrivateKey


def make_certs(directory: Path) -> TestCerts:
    """Write a CA, server, client and broken certificates into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=7))
    ca = _write_ca(directory / "ca.pem", "pulsar-spark test CA", valid)
    _write_ca(directory / "other-ca.pem", "pulsar-spark unrelated CA", valid)  # signs nothing
    server_sans = _sans(SERVER_HOSTS)
    past = (now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
    server = _write_leaf(
        directory, "server", ca, common_name="127.0.0.1", sans=server_sans, valid=valid, server=True
    )
    client = _write_leaf(
        directory, "client", ca, common_name=CLIENT_CN, sans=None, valid=valid, server=False
    )
    expired = _write_leaf(
        directory, "expired", ca, common_name="127.0.0.1", sans=server_sans, valid=past, server=True
    )
    wrong = _write_leaf(
        directory,
        "wrong-host",
        ca,
        common_name=WRONG_HOST,
        sans=_sans((WRONG_HOST,)),
        valid=valid,
        server=True,
    )
    return TestCerts(
        ca=directory / "ca.pem",
        server_cert=server[0],
        server_key=server[1],
        client_cert=client[0],
        client_key=client[1],
        expired_cert=expired[0],
        expired_key=expired[1],
        wrong_host_cert=wrong[0],
        wrong_host_key=wrong[1],
        other_ca=directory / "other-ca.pem",
    )


def _sans(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    valid: tuple[datetime.datetime, datetime.datetime],
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _write_ca(
    path: Path, common_name: str, valid: tuple[datetime.datetime, datetime.datetime]
) -> _Issuer:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        _builder(name, name, key.public_key(), valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return _Issuer(name, key)


def _write_leaf(
    directory: Path,
    stem: str,
    issuer: _Issuer,
    *,
    common_name: str,
    sans: x509.SubjectAlternativeName | None,
    valid: tuple[datetime.datetime, datetime.datetime],
    server: bool,
) -> tuple[Path, Path]:
    key = _new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(subject, issuer.name, key.public_key(), valid)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
            critical=False,
        )
    )
    if sans is not None:
        builder = builder.add_extension(sans, critical=False)
    certificate = builder.sign(issuer.key, hashes.SHA256())
    cert_path = directory / f"{stem}.pem"
    key_path = directory / f"{stem}-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def write_key_store(cert: Path, key: Path, path: Path, password: str) -> Path:
    """A PKCS#12 key store at ``path`` holding ``cert`` and its ``key``, for a JVM server
    (the JDK's JKS key store type reads PKCS#12 files too)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    private_key = serialization.load_pem_private_key(key.read_bytes(), password=None)
    assert isinstance(private_key, ec.EllipticCurvePrivateKey)
    store = pkcs12.serialize_key_and_certificates(
        b"server",
        private_key,
        x509.load_pem_x509_certificate(cert.read_bytes()),
        None,
        serialization.BestAvailableEncryption(password.encode()),
    )
    path.write_bytes(store)
    return path


def write_trust_store(ca: Path, path: Path, password: str) -> Path:
    """A JKS trust store at ``path`` holding the CA certificate ``ca`` (made by the JDK's
    keytool: a JVM takes only the certificates a trust store marks as trusted)."""
    import subprocess

    subprocess.run(
        [
            *("keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca)),
            *("-keystore", str(path), "-storetype", "JKS", "-storepass", password),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path
