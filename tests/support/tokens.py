"""Minimal JSON Web Tokens, the kinds Apache Pulsar's token providers accept.

A token is ``base64url(header) . base64url(claims) . base64url(signature of the first two)``
with unpadded base64url. :func:`sign` makes HS256 tokens (HMAC-SHA256 with a shared secret,
what ``tokenSecretKey`` verifies) whose claims are ``sub`` (the principal) and, optionally,
``exp`` (seconds since the epoch); :func:`sign_rs256` makes RS256 tokens (RSASSA-PKCS1-v1_5
with SHA-256, verified with the issuer's public key) with any claims, as an OAuth2 issuer does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

_HEADER = {"alg": "HS256", "typ": "JWT"}


def sign(subject: str, secret: bytes, expires_at: float | None) -> str:
    """Return a token for ``subject``, expiring at ``expires_at`` (never when ``None``).

    ``exp`` is whole seconds, rounded up: a token never expires before ``expires_at``.
    """
    claims: dict[str, Any] = {"sub": subject}
    if expires_at is not None:
        claims["exp"] = math.ceil(expires_at)
    signing_input = f"{_encode_json(_HEADER)}.{_encode_json(claims)}"
    return f"{signing_input}.{_b64encode(_mac(secret, signing_input))}"


def sign_rs256(claims: dict[str, Any], key: rsa.RSAPrivateKey, key_id: str) -> str:
    """Return an RS256 token with ``claims``, naming its key ``key_id`` in the header."""
    header = {"alg": "RS256", "typ": "JWT", "kid": key_id}
    signing_input = f"{_encode_json(header)}.{_encode_json(claims)}"
    signature = key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64encode(signature)}"


def verify_rs256(token: str, key: rsa.RSAPublicKey) -> dict[str, Any] | None:
    """The claims of an RS256 ``token`` signed by ``key``'s private half; else ``None``.

    Only the signature is checked, not ``exp``.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        signature = _b64decode(parts[2])
        key.verify(
            signature, f"{parts[0]}.{parts[1]}".encode("ascii"), padding.PKCS1v15(), hashes.SHA256()
        )
    except (ValueError, binascii.Error, InvalidSignature):
        return None
    return claims(token)


def claims(token: str) -> dict[str, Any] | None:
    """The token's claims, without checking anything; ``None`` if it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        decoded = json.loads(_b64decode(parts[1]))
    except (ValueError, binascii.Error):
        return None
    return decoded if isinstance(decoded, dict) else None


def expires_at(token: str) -> float | None:
    """The token's ``exp`` claim, or ``None`` if it has none (or is not a JWT)."""
    exp = (claims(token) or {}).get("exp")
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _mac(secret: bytes, signing_input: str) -> bytes:
    return hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()


def _encode_json(value: dict[str, Any]) -> str:
    return _b64encode(json.dumps(value, separators=(",", ":")).encode())


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    if not text or "=" in text:
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
