"""Encryption options of writes and reads, checked when the DataFrame is defined.

A write names its keys in ``pulsar.producer.encryptionKeys`` (comma-separated, the Java
producer's option) and gives each one's public key file in ``pulsar.producer.publicKeyFiles``;
a read gives the private key file of each key name it can decrypt in
``pulsar.reader.privateKeyFiles`` and what to do with a message it cannot decrypt in
``pulsar.reader.cryptoFailureAction`` (the Java consumer's option and values). Both file
options take ``name=path`` pairs separated by commas.

The files are read here, on the driver, and their PEM travels with each task, so executors
need no copy of them. Every error names the option and, where it helps, the key name, never a
file's content; the settings' reprs show key names only.
"""

from __future__ import annotations

from collections.abc import Callable

from pulsar_spark.client.settings import ProducerEncryption
from pulsar_spark.common.option_values import OptionValues
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.crypto import CryptoFailureAction, load_private_key, load_public_key

ENCRYPTION_KEYS = "pulsar.producer.encryptionKeys"
PUBLIC_KEY_FILES = "pulsar.producer.publicKeyFiles"
PRIVATE_KEY_FILES = "pulsar.reader.privateKeyFiles"
CRYPTO_FAILURE_ACTION = "pulsar.reader.cryptoFailureAction"

# The largest PEM file read: a 16384-bit RSA key or a certificate chain is far smaller.
_MAX_PEM_BYTES = 1024 * 1024


def producer_encryption(opts: OptionValues) -> ProducerEncryption | None:
    """The write's keys, or None when it does not encrypt."""
    names_text = opts.get(ENCRYPTION_KEYS)
    files_text = opts.get(PUBLIC_KEY_FILES)
    if names_text is None or not names_text.strip():
        if files_text is not None:
            raise ConfigurationError(
                f"option {PUBLIC_KEY_FILES!r} is given without {ENCRYPTION_KEYS!r}: name the "
                "keys to encrypt for there"
            )
        if names_text is not None:
            raise ConfigurationError(f"option {ENCRYPTION_KEYS!r} names no key")
        return None
    names = [name.strip() for name in names_text.split(",")]
    if any(not name for name in names):
        raise ConfigurationError(
            f"option {ENCRYPTION_KEYS!r} must be key names separated by commas, got an empty name"
        )
    files = {} if files_text is None else _key_files(opts, PUBLIC_KEY_FILES)
    missing = [name for name in names if name not in files]
    if missing:
        raise ConfigurationError(
            f"option {PUBLIC_KEY_FILES!r} gives no public key file for key(s) "
            f"{', '.join(repr(n) for n in missing)} named in {ENCRYPTION_KEYS!r}"
        )
    unused = [name for name in files if name not in names]
    if unused:
        raise ConfigurationError(
            f"option {PUBLIC_KEY_FILES!r} gives a file for key(s) "
            f"{', '.join(repr(n) for n in unused)}, which {ENCRYPTION_KEYS!r} does not name"
        )
    return ProducerEncryption(_read_keys(PUBLIC_KEY_FILES, files, load_public_key))


def private_keys(opts: OptionValues) -> tuple[tuple[str, bytes], ...]:
    """The read's private keys by name, in name order (none when not given)."""
    if opts.get(PRIVATE_KEY_FILES) is None:
        return ()
    return _read_keys(PRIVATE_KEY_FILES, _key_files(opts, PRIVATE_KEY_FILES), load_private_key)


def failure_action(opts: OptionValues) -> CryptoFailureAction:
    text = opts.get(CRYPTO_FAILURE_ACTION)
    if text is None:
        return CryptoFailureAction.FAIL
    try:
        return CryptoFailureAction[text.strip().upper()]
    except KeyError:
        raise ConfigurationError(
            f"option {CRYPTO_FAILURE_ACTION!r} must be one of "
            f"{', '.join(a.name for a in CryptoFailureAction)}, got {text.strip()!r}"
        ) from None


def _key_files(opts: OptionValues, option: str) -> dict[str, str]:
    text = opts.get(option) or ""
    files: dict[str, str] = {}
    for pair in text.split(","):
        name, sep, path = pair.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ConfigurationError(
                f"option {option!r} must be key name=file path pairs separated by commas "
                "(e.g. 'app=/keys/app.pem,ops=/keys/ops.pem')"
            )
        if name in files:
            raise ConfigurationError(f"option {option!r} gives key {name!r} twice")
        files[name] = path
    return files


def _read_keys(
    option: str, files: dict[str, str], load: Callable[[str, bytes], object]
) -> tuple[tuple[str, bytes], ...]:
    """Each key's PEM, read from its file and checked by ``load``, in name order."""
    keys = []
    for name in sorted(files):
        pem = _read_pem(option, name, files[name])
        try:
            load(name, pem)
        except ConfigurationError as exc:
            raise ConfigurationError(f"option {option!r}: {exc}") from None
        keys.append((name, pem))
    return tuple(keys)


def _read_pem(option: str, name: str, path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            pem = file.read(_MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(
            f"option {option!r}: cannot read the file of key {name!r} ({path}): {exc.strerror}"
        ) from None
    if len(pem) > _MAX_PEM_BYTES:
        raise ConfigurationError(
            f"option {option!r}: the file of key {name!r} ({path}) is larger than a PEM key"
        )
    return pem
