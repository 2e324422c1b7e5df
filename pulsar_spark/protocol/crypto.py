"""End-to-end message encryption as Pulsar's official clients do it, without I/O.

How this works
--------------
A producer encrypts each entry's payload (one message, a whole batch, or one chunk), after
compressing it: AES-256 in GCM mode under a random 32-byte *data key*, with a fresh random
12-byte IV per payload and the 16-byte tag appended to the ciphertext. The IV goes into
``MessageMetadata.encryption_param``. The data key is wrapped (encrypted) once per key name
with that name's public key, and every message carries one ``EncryptionKeys`` (name, wrapped
key) per name. ``encryption_algo`` is left unset, as both official clients leave it. Keys,
properties and the rest of the metadata stay in clear text.

An RSA key wraps with RSA-OAEP, SHA-1 for both the hash and MGF1 and no label (Java's
``RSA/NONE/OAEPWithSHA1AndMGF1Padding``, OpenSSL's ``RSA_PKCS1_OAEP_PADDING`` in the C++
client). An EC key wraps as the Java client does, with Bouncy Castle's ``ECIES`` cipher under
``IESParameterSpec(null, null, 128)`` (:func:`ecies_encrypt`); the C++ client, under the
official Python one, does not read EC keys.

A consumer looks for a key name it has a private key for, unwraps the data key, decrypts the
payload and checks its tag, then decompresses it. Unwrapping is a private-key operation
(about a millisecond), so unwrapped data keys are kept, by wrapped value, for the messages
after: a producer wraps one data key for its lifetime.

Key material arrives as PEM bytes; nothing here reads files. No error, log line or repr shows
a key, a data key or a PEM.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pulsar_spark.errors import ConfigurationError, CryptoError
from pulsar_spark.protocol import pb

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import (
        EllipticCurvePrivateKey,
        EllipticCurvePublicKey,
    )
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey

    PublicKey = RSAPublicKey | EllipticCurvePublicKey
    PrivateKey = RSAPrivateKey | EllipticCurvePrivateKey


class CryptoFailureAction(enum.Enum):
    """What a reader does with a message it cannot decrypt (the Java consumer's values)."""

    FAIL = "fail"  # raise CryptoError naming the key names the message needs
    DISCARD = "discard"  # skip it, counted
    CONSUME = "consume"  # deliver its encrypted payload as the value, flagged


DATA_KEY_SIZE = 32  # AES-256
IV_SIZE = 12
TAG_SIZE = 16

RandomBytes = Callable[[int], bytes]
"""Gives that many random bytes (``os.urandom``)."""
# Data keys unwrapped and kept per Decryptor at most (one per producer seen, usually few).
_MAX_CACHED_KEYS = 1024
# Bouncy Castle's ECIES as the Java client sets it up: IESParameterSpec(null, null, 128), a
# 128-bit MAC key, HMAC-SHA1 (20-byte tag), no derivation or encoding vector.
ECIES_MAC_KEY_SIZE = 16
ECIES_TAG_SIZE = 20
# IESEngine.getLengthTag(null): the encoding vector's length in bits, 8 bytes big-endian, MACed
# after the ciphertext whenever an ephemeral key is sent (always, with the JCE cipher).
_ECIES_LENGTH_TAG = bytes(8)


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


def load_public_key(name: str, pem: bytes) -> PublicKey:
    """The RSA or EC public key for key ``name`` from PEM (``PUBLIC KEY`` or ``RSA PUBLIC
    KEY``, or a certificate); :class:`ConfigurationError` naming ``name`` (never showing the
    PEM) if it is not one."""
    _require()
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    def parse() -> object:
        if b"-----BEGIN CERTIFICATE-----" in pem:
            return x509.load_pem_x509_certificate(pem).public_key()
        return serialization.load_pem_public_key(pem)

    key = _parsed(name, "public", "a PEM public key or certificate", parse)
    assert isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey)
    return key


def load_private_key(name: str, pem: bytes) -> PrivateKey:
    """The RSA or EC private key for key ``name`` from unencrypted PEM (PKCS#8 ``PRIVATE
    KEY``, ``RSA PRIVATE KEY`` or ``EC PRIVATE KEY``, after ``EC PARAMETERS`` as ``openssl
    ecparam -genkey`` writes it); :class:`ConfigurationError` naming ``name`` otherwise."""
    _require()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    def parse() -> object:
        try:
            return serialization.load_pem_private_key(pem, password=None)
        except TypeError:
            raise ConfigurationError(
                f"the private key of encryption key {name!r} is protected by a password, "
                "which is not supported: give it unencrypted"
            ) from None

    key = _parsed(name, "private", "a PEM private key", parse)
    assert isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey)
    return key


def _parsed(name: str, kind: str, wanted: str, parse: Callable[[], object]) -> object:
    """What ``parse`` reads from a PEM, which must be an RSA or EC key; errors name the key and
    never show the PEM."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        key = parse()
    except ConfigurationError:
        raise
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigurationError(
            f"the {kind} key of encryption key {name!r} is not {wanted}"
        ) from None
    usable: tuple[type, ...] = (rsa.RSAPublicKey, ec.EllipticCurvePublicKey)
    if kind == "private":
        usable = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)
    if not isinstance(key, usable):
        raise ConfigurationError(
            f"the {kind} key of encryption key {name!r} is a {type(key).__name__}: only RSA "
            "and EC keys are supported"
        )
    return key


def _wrap(public: PublicKey, data_key: bytes) -> bytes:
    """``data_key`` wrapped for ``public`` as the Java client wraps it."""
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(public, ec.EllipticCurvePublicKey):
        return ecies_encrypt(public, data_key)
    wrapped: bytes = public.encrypt(data_key, _oaep())
    return wrapped


def ecies_encrypt(
    public: EllipticCurvePublicKey,
    message: bytes,
    *,
    ephemeral: EllipticCurvePrivateKey | None = None,
) -> bytes:
    """``message`` encrypted for ``public`` as Bouncy Castle's JCE cipher ``ECIES`` does with
    ``IESParameterSpec(null, null, 128)``, the Java client's wrapping of a data key for an EC
    key (``IESCipher.ECIES``: ``IESEngine`` over ECDH, KDF2 with SHA-1 and HMAC-SHA1, in
    stream mode).

    With a new ephemeral key pair on ``public``'s curve (``ephemeral``, for tests, fixes it):
    V is its public point, uncompressed; Z the ECDH shared secret, the x coordinate padded to
    the field's size; K = KDF2-SHA1(V || Z) (ANSI X9.63, counter from 1, no shared info) of
    16 + len(message) bytes, whose first 16 bytes are the MAC key K2 and the rest K1;
    C = message XOR K1; T = HMAC-SHA1(K2, C || L2), L2 being 8 zero bytes (the bit length of
    the absent encoding vector). The result is V || C || T.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if ephemeral is None:
        ephemeral = ec.generate_private_key(public.curve)
    elif ephemeral.curve.name != public.curve.name:
        raise ValueError("the ephemeral key is not on the recipient's curve")
    point = ephemeral.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    shared = ephemeral.exchange(ec.ECDH(), public)
    mac_key, stream = _ecies_keys(point, shared, len(message))
    sealed = bytes(m ^ k for m, k in zip(message, stream, strict=True))
    return point + sealed + _ecies_tag(mac_key, sealed)


def ecies_decrypt(private: EllipticCurvePrivateKey, data: bytes) -> bytes | None:
    """What :func:`ecies_encrypt` (or Bouncy Castle's ``ECIES`` cipher) sealed for
    ``private``'s public key, or None when ``data`` is not that (another key pair, a point not
    on the curve, a tag that does not match)."""
    from cryptography.hazmat.primitives import constant_time, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ours = private.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    # V as the Java client writes it: uncompressed (0x04, then both coordinates), as long as
    # our own public point
    point_size = len(ours)
    if data[:1] != b"\x04" or len(data) <= point_size + ECIES_TAG_SIZE:
        return None
    point, sealed, tag = (
        data[:point_size],
        data[point_size:-ECIES_TAG_SIZE],
        data[-ECIES_TAG_SIZE:],
    )
    try:
        peer = ec.EllipticCurvePublicKey.from_encoded_point(private.curve, point)
        shared = private.exchange(ec.ECDH(), peer)
    except ValueError:
        return None
    mac_key, stream = _ecies_keys(point, shared, len(sealed))
    if not constant_time.bytes_eq(_ecies_tag(mac_key, sealed), tag):
        return None
    return bytes(c ^ k for c, k in zip(sealed, stream, strict=True))


def _ecies_keys(point: bytes, shared: bytes, length: int) -> tuple[bytes, bytes]:
    """(K2, K1): the MAC key and the key stream of ``length`` bytes, from KDF2-SHA1(V || Z)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.x963kdf import X963KDF

    kdf = X963KDF(algorithm=hashes.SHA1(), length=ECIES_MAC_KEY_SIZE + length, sharedinfo=None)
    keys = kdf.derive(point + shared)
    return keys[:ECIES_MAC_KEY_SIZE], keys[ECIES_MAC_KEY_SIZE:]


def _ecies_tag(mac_key: bytes, sealed: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes, hmac

    mac = hmac.HMAC(mac_key, hashes.SHA1())
    mac.update(sealed)
    mac.update(_ECIES_LENGTH_TAG)
    return mac.finalize()


class Encryptor:
    """Encrypts payloads for a producer: one data key, wrapped once for each key name.

    ``public_keys`` maps each key name to its PEM; ``key_metadata`` optionally gives each
    name's metadata pairs, sent beside its wrapped key (the official key readers may use
    them to find the private key). ``random_bytes`` (the caller's ``os.urandom``) makes the
    data key and each payload's IV.
    """

    def __init__(
        self,
        public_keys: Mapping[str, bytes],
        key_metadata: Mapping[str, Mapping[str, str]] | None = None,
        *,
        random_bytes: RandomBytes,
        data_key: bytes | None = None,
    ) -> None:
        if not public_keys:
            raise ConfigurationError("encryption needs at least one key name")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._random_bytes = random_bytes
        key = data_key if data_key is not None else random_bytes(DATA_KEY_SIZE)
        if len(key) != DATA_KEY_SIZE:
            raise ValueError("a data key is 32 bytes")
        self._aead = AESGCM(key)
        metadata = key_metadata or {}
        self._keys = []
        for name in sorted(public_keys):
            wrapped = _wrap(load_public_key(name, public_keys[name]), key)
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
        iv = self._random_bytes(IV_SIZE)
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
    def _unwrap(private: PrivateKey, wrapped: bytes) -> Any:
        from cryptography.hazmat.primitives.asymmetric import ec

        if isinstance(private, ec.EllipticCurvePrivateKey):
            key = ecies_decrypt(private, wrapped)
        else:
            try:
                key = private.decrypt(wrapped, _oaep())
            except ValueError:
                return None
        if key is None or len(key) not in (16, 24, 32):
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
