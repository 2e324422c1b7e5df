"""RSA key pairs for the encryption tests and benchmark, made with ``cryptography``."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def rsa_key_pair(bits: int = 2048) -> tuple[bytes, bytes]:
    """A new key pair as PEM: (``PUBLIC KEY``, unencrypted ``RSA PRIVATE KEY``), the forms
    the official clients' default key reader loads."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return public_pem, private_pem


def write_key_pair(directory: Path, name: str) -> tuple[Path, Path]:
    """A new key pair written to ``<name>-public.pem`` and ``<name>-private.pem``."""
    public_pem, private_pem = rsa_key_pair()
    public, private = directory / f"{name}-public.pem", directory / f"{name}-private.pem"
    public.write_bytes(public_pem)
    private.write_bytes(private_pem)
    return public, private
