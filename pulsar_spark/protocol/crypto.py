"""End-to-end message encryption as Pulsar's official clients do it, without I/O.

How this works
--------------
A producer encrypts each entry's payload (one message, a whole batch, or one chunk), after
compressing it: AES-256 in GCM mode under a random 32-byte *data key*, with a fresh random
12-byte IV per payload and the 16-byte tag appended to the ciphertext. The IV goes into
``MessageMetadata.encryption_param``. The data key is wrapped (encrypted) once per key name
with that name's RSA public key, RSA-OAEP with SHA-1 for both the hash and MGF1 and no label
(Java's ``RSA/NONE/OAEPWithSHA1AndMGF1Padding``, OpenSSL's ``RSA_PKCS1_OAEP_PADDING`` in the
C++ client), and every message carries one ``EncryptionKeys`` (name, wrapped key) per name.
``encryption_algo`` is left unset, as both official clients leave it. Keys, properties and
the rest of the metadata stay in clear text.

A consumer looks for a key name it has a private key for, unwraps the data key, decrypts the
payload and checks its tag, then decompresses it. Unwrapping is an RSA private-key operation
(about a millisecond), so unwrapped data keys are kept, by wrapped value, for the messages
after: a producer wraps one data key for its lifetime.

Only RSA keys are taken. The Java client also accepts EC keys, which it wraps with Bouncy
Castle's ECIES; that format is not implemented here, and the C++ client (under the official
Python one) does not read it either, so an EC key is refused with an error saying so.

Key material arrives as PEM bytes; nothing here reads files. No error, log line or repr shows
a key, a data key or a PEM.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pulsar_spark.errors import ConfigurationError, CryptoError
from pulsar_spark.protocol import pb

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey


class CryptoFailureAction(enum.Enum):
    """What a reader does with a message it cannot decrypt (the Java consumer's values)."""

    FAIL = "fail"  # raise CryptoError naming the key names the message needs
    DISCARD = "discard"  # skip it, counted
    CONSUME = "consume"  # deliver its encrypted payload as the value, flagged


DATA_KEY_SIZE = 32  # AES-256
IV_SIZE = 12
TAG_SIZE = 16
# Data keys unwrapped and kept per Decryptor at most (one per producer seen, usually few).
_MAX_CACHED_KEYS = 1024


def _require() -> None:
    """Raise a :class:`ConfigurationError` saying what to install when ``cryptography`` is
    missing (it is an optional dependency: reads and writes without encryption never need
    it)."""
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigurationError(
            "message encryption needs the 'cryptography' package: pip install "
            "'pulsar-spark[crypto]'"
        ) from exc


def _oaep() -> Any:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    return padding.OAEP(
        mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None
    )


def load_public_key(name: str, pem: bytes) -> RSAPublicKey:
    """The RSA public key for key ``name`` from PEM (``PUBLIC KEY`` or ``RSA PUBLIC KEY``, or a
    certificate); :class:`ConfigurationError` naming ``name`` (never showing the PEM) if it is
    not one."""
    _require()
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    def parse() -> object:
        if b"-----BEGIN CERTIFICATE-----" in pem:
            return x509.load_pem_x509_certificate(pem).public_key()
        return serialization.load_pem_public_key(pem)

    key = _parsed(name, "public", "a PEM public key or certificate", parse, rsa.RSAPublicKey)
    assert isinstance(key, rsa.RSAPublicKey)
    return key


def load_private_key(name: str, pem: bytes) -> RSAPrivateKey:
    """The RSA private key for key ``name`` from unencrypted PEM (PKCS#8 ``PRIVATE KEY`` or
    ``RSA PRIVATE KEY``); :class:`ConfigurationError` naming ``name`` otherwise."""
    _require()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    def parse() -> object:
        try:
            return serialization.load_pem_private_key(pem, password=None)
        except TypeError:
            raise ConfigurationError(
                f"the private key of encryption key {name!r} is protected by a password, "
                "which is not supported: give it unencrypted"
            ) from None

    key = _parsed(name, "private", "a PEM private key", parse, rsa.RSAPrivateKey)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


def _parsed(
    name: str, kind: str, wanted: str, parse: Callable[[], object], rsa_type: type
) -> object:
    """What ``parse`` reads from a PEM, which must be an RSA key (``rsa_type``); errors name
    the key and never show the PEM."""
    from cryptography.exceptions import UnsupportedAlgorithm

    try:
        key = parse()
    except ConfigurationError:
        raise
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigurationError(
            f"the {kind} key of encryption key {name!r} is not {wanted}"
        ) from None
    _rsa_only(name, key, rsa_type, kind)
    return key


def _rsa_only(name: str, key: object, rsa_type: type, kind: str) -> None:
    if isinstance(key, rsa_type):
        return
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        raise ConfigurationError(
            f"the {kind} key of encryption key {name!r} is an EC key: only RSA keys are "
            "supported (the Java client wraps data keys for EC keys with Bouncy Castle's "
            "ECIES, which pulsar-spark does not implement, and the C++ and Python clients do "
            "not read)"
        )
    raise ConfigurationError(
        f"the {kind} key of encryption key {name!r} is a {type(key).__name__}: only RSA keys "
        "are supported"
    )


class Encryptor:
    """Encrypts payloads for a producer: one data key, wrapped once for each key name.

    ``public_keys`` maps each key name to its PEM; ``key_metadata`` optionally gives each
    name's metadata pairs, sent beside its wrapped key (the official key readers may use
    them to find the private key).
    """

    def __init__(
        self,
        public_keys: Mapping[str, bytes],
        key_metadata: Mapping[str, Mapping[str, str]] | None = None,
        *,
        data_key: bytes | None = None,
    ) -> None:
        if not public_keys:
            raise ConfigurationError("encryption needs at least one key name")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        key = data_key if data_key is not None else os.urandom(DATA_KEY_SIZE)
        if len(key) != DATA_KEY_SIZE:
            raise ValueError("a data key is 32 bytes")
        self._aead = AESGCM(key)
        oaep = _oaep()
        metadata = key_metadata or {}
        self._keys = []
        for name in sorted(public_keys):
            wrapped = load_public_key(name, public_keys[name]).encrypt(key, oaep)
            entry = pb.EncryptionKeys(key=name, value=wrapped)
            for meta_key, meta_value in sorted(metadata.get(name, {}).items()):
                entry.metadata.add(key=meta_key, value=meta_value)
            self._keys.append(entry)
        # What encryption adds to an entry at most: the tag, the IV and the keys with their
        # field headers (a few bytes each, counted generously).
        keys_size = sum(k.ByteSize() + 8 for k in self._keys)
        self.overhead = TAG_SIZE + IV_SIZE + 8 + keys_size

    def __repr__(self) -> str:
        return f"Encryptor(keys={[k.key for k in self._keys]!r})"

    @property
    def key_names(self) -> list[str]:
        return [k.key for k in self._keys]

    def encrypt(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        """``payload`` (already compressed) encrypted; ``metadata`` gets the wrapped keys and
        the IV."""
        iv = os.urandom(IV_SIZE)
        metadata.encryption_keys.extend(self._keys)
        metadata.encryption_param = iv
        sealed: bytes = self._aead.encrypt(iv, bytes(payload), None)
        return sealed


def is_encrypted(metadata: pb.MessageMetadata) -> bool:
    """Whether an entry's payload is encrypted (the official clients' test: it names keys)."""
    return len(metadata.encryption_keys) > 0


def key_names(metadata: pb.MessageMetadata) -> list[str]:
    """The key names an encrypted entry's data key is wrapped for."""
    return [k.key for k in metadata.encryption_keys]


class Decryptor:
    """Decrypts payloads with the private keys of some key names; keeps data keys it has
    unwrapped (see the module docstring)."""

    def __init__(self, private_keys: Mapping[str, bytes]) -> None:
        self._private = {name: load_private_key(name, pem) for name, pem in private_keys.items()}
        self._cache: dict[bytes, Any] = {}  # wrapped data key: its AESGCM
        self._unopenable: set[bytes] = set()  # wrapped data keys our private keys do not open

    def __repr__(self) -> str:
        return f"Decryptor(keys={sorted(self._private)!r})"

    @property
    def key_names(self) -> list[str]:
        return sorted(self._private)

    def decrypt(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        """The plain (still compressed) payload of an encrypted entry.

        Raises :class:`CryptoError` naming the key names the entry needs when none of them is
        one of ours, when unwrapping fails (another key pair under that name) or when the
        payload does not authenticate.
        """
        keys = metadata.encryption_keys
        iv = metadata.encryption_param
        if len(iv) != IV_SIZE:
            raise CryptoError(
                f"encrypted message has an IV of {len(iv)} bytes, not {IV_SIZE} (not AES-GCM "
                "as the official clients write it)"
            )
        for entry in keys:
            aead = self._cache.get(entry.value)
            if aead is not None:
                opened = _open(aead, iv, payload)
                if opened is not None:
                    return opened
        failed: list[str] = []
        for entry in keys:
            private = self._private.get(entry.key)
            if private is None:
                continue
            wrapped = entry.value
            aead = None if wrapped in self._unopenable else self._unwrap(private, wrapped)
            if aead is None:  # not this key pair's: not tried again for the next messages
                if len(self._unopenable) >= _MAX_CACHED_KEYS:
                    self._unopenable.clear()
                self._unopenable.add(wrapped)
            opened = None if aead is None else _open(aead, iv, payload)
            if opened is not None:
                if len(self._cache) >= _MAX_CACHED_KEYS:
                    self._cache.clear()
                self._cache[entry.value] = aead
                return opened
            failed.append(entry.key)
        needed = _names(k.key for k in keys)
        if failed:
            raise CryptoError(
                f"could not decrypt a message encrypted for key(s) {needed}: the private key "
                f"given for {_names(failed)} does not open it (another key pair under that name?)"
            )
        have = _names(self._private) if self._private else "none"
        raise CryptoError(
            f"could not decrypt a message encrypted for key(s) {needed}: no private key given "
            f"for any of them (private keys given: {have})"
        )

    @staticmethod
    def _unwrap(private: RSAPrivateKey, wrapped: bytes) -> Any:
        try:
            key = private.decrypt(wrapped, _oaep())
        except ValueError:
            return None
        if len(key) not in (16, 24, 32):
            return None
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return AESGCM(key)


def _open(aead: Any, iv: bytes, payload: bytes) -> bytes | None:
    from cryptography.exceptions import InvalidTag

    try:
        opened: bytes = aead.decrypt(iv, bytes(payload), None)
    except InvalidTag:
        return None
    return opened


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)
