"""RSA and EC key pairs for the encryption tests and benchmark, made with ``cryptography``."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

# The curves the EC tests use: NIST's and the one Pulsar's documentation names (secp256k1).
CURVES: dict[str, ec.EllipticCurve] = {
    "secp256r1": ec.SECP256R1(),
    "secp384r1": ec.SECP384R1(),
    "secp521r1": ec.SECP521R1(),
    "secp256k1": ec.SECP256K1(),
}


def rsa_key_pair(bits: int = 2048) -> tuple[bytes, bytes]:
    """A new key pair as PEM: (``PUBLIC KEY``, unencrypted ``RSA PRIVATE KEY``), the forms
    the official clients' default key reader loads."""
    return _pems(rsa.generate_private_key(public_exponent=65537, key_size=bits))


def ec_key_pair(curve: str = "secp256r1") -> tuple[bytes, bytes]:
    """A new EC key pair on the named curve as PEM: (``PUBLIC KEY``, unencrypted ``EC PRIVATE
    KEY``, the curve named by its OID), what the Java client's key reader loads."""
    return _pems(ec.generate_private_key(CURVES[curve]))


def _pems(private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return public_pem, private_pem


def write_key_pair(directory: Path, name: str, curve: str | None = None) -> tuple[Path, Path]:
    """A new key pair written to ``<name>-public.pem`` and ``<name>-private.pem``: RSA, or EC
    on ``curve``."""
    public_pem, private_pem = rsa_key_pair() if curve is None else ec_key_pair(curve)
    public, private = directory / f"{name}-public.pem", directory / f"{name}-private.pem"
    public.write_bytes(public_pem)
    private.write_bytes(private_pem)
    return public, private
