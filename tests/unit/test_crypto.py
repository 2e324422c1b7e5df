"""Message encryption without a broker: the wire format the official clients use (fixtures made
by other implementations), round trips through batches and chunks, errors that name key names
and never key material, and the options that carry the keys."""

from __future__ import annotations

import dataclasses
import json
import os
import random
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from support.crypto_keys import CURVES, ec_key_pair, rsa_key_pair

from pulsar_spark.client.batching import BatchLimits, OpenBatch
from pulsar_spark.client.chunking import unbatched
from pulsar_spark.client.settings import ProducerSettings, ReaderDecryption
from pulsar_spark.errors import ConfigurationError, CryptoError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.chunks import ChunkAssembler
from pulsar_spark.protocol.crypto import (
    DATA_KEY_SIZE,
    IV_SIZE,
    CryptoFailureAction,
    Decryptor,
    Encryptor,
    ecies_decrypt,
    ecies_encrypt,
    is_encrypted,
    key_names,
)
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.protocol.payload import parse_payload_section
from pulsar_spark.source.read_options import ReadMode, ReadOptions
from pulsar_spark.source.write_options import WriteOptions

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "crypto"
# A 2048-bit key pair made with `openssl genpkey`, and a data key of 32 zero bytes wrapped for
# its public key by `openssl pkeyutl -encrypt -pkeyopt rsa_padding_mode:oaep` (OAEP, SHA-1,
# MGF1 with SHA-1: OpenSSL's RSA_PKCS1_OAEP_PADDING, what the C++ client calls).
FIXTURE_PRIVATE = (FIXTURES / "fixture_private.pem").read_bytes()
FIXTURE_PUBLIC = (FIXTURES / "fixture_public.pem").read_bytes()
WRAPPED_ZERO_KEY = (FIXTURES / "wrapped_zero_key.bin").read_bytes()
# Per curve: a recipient's private key, and a 32-byte message Bouncy Castle 1.81.1 encrypted for
# it with ECIES, once with a fixed ephemeral key ("engine") and once with the JCE cipher the Java
# client uses ("jce"); made by EciesVector.java in the same folder.
ECIES_VECTORS = json.loads((FIXTURES / "ecies_vectors.json").read_text())
# The GCM specification's test case 14: AES-256, zero key and IV, 16 zero bytes of plain text;
# the ciphertext followed by its 16-byte tag.
GCM_CASE_14 = bytes.fromhex("cea7403d4d606b6e074ec5d3baf39d18" + "d0d1c8a799996bf0265b98b5d48ab919")


@pytest.fixture(scope="module")
def pair() -> tuple[bytes, bytes]:
    return rsa_key_pair()


@pytest.fixture(scope="module")
def other_pair() -> tuple[bytes, bytes]:
    return rsa_key_pair()


def entry_metadata() -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1000)


def test_a_message_wrapped_by_openssl_decrypts_to_the_gcm_test_vector() -> None:
    metadata = entry_metadata()
    metadata.encryption_keys.add(key="app", value=WRAPPED_ZERO_KEY)
    metadata.encryption_param = bytes(IV_SIZE)
    assert Decryptor({"app": FIXTURE_PRIVATE}).decrypt(metadata, GCM_CASE_14) == bytes(16)


def test_the_producer_writes_the_fields_and_formats_the_official_clients_read() -> None:
    """One EncryptionKeys per name, a 12-byte IV in encryption_param, no encryption_algo; the
    wrapped key is RSA-OAEP with SHA-1 (not SHA-256); the payload AES-256-GCM, tag last."""
    encryptor = Encryptor({"app": FIXTURE_PUBLIC}, data_key=bytes(32), random_bytes=os.urandom)
    metadata = entry_metadata()
    sealed = encryptor.encrypt(metadata, bytes(16))
    assert [k.key for k in metadata.encryption_keys] == ["app"]
    assert not metadata.encryption_keys[0].metadata
    assert len(metadata.encryption_param) == IV_SIZE
    assert not metadata.HasField("encryption_algo")
    private = serialization.load_pem_private_key(FIXTURE_PRIVATE, password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    wrapped = metadata.encryption_keys[0].value
    sha1 = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    assert private.decrypt(wrapped, sha1) == bytes(32)
    sha256 = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
    with pytest.raises(ValueError):
        private.decrypt(wrapped, sha256)
    if metadata.encryption_param == bytes(IV_SIZE):  # one chance in 2**96
        assert sealed == GCM_CASE_14
    assert len(sealed) == 16 + 16


def test_every_payload_gets_a_fresh_iv_under_one_data_key(pair: tuple[bytes, bytes]) -> None:
    encryptor = Encryptor({"app": pair[0]}, random_bytes=os.urandom)
    first, second = entry_metadata(), entry_metadata()
    one, two = encryptor.encrypt(first, b"same"), encryptor.encrypt(second, b"same")
    assert first.encryption_param != second.encryption_param
    assert one != two
    assert first.encryption_keys[0].value == second.encryption_keys[0].value
    decryptor = Decryptor({"app": pair[1]})
    assert decryptor.decrypt(first, one) == decryptor.decrypt(second, two) == b"same"


def test_a_consumer_with_any_one_of_the_keys_decrypts(
    pair: tuple[bytes, bytes], other_pair: tuple[bytes, bytes]
) -> None:
    metadata = entry_metadata()
    sealed = Encryptor({"app": pair[0], "ops": other_pair[0]}, random_bytes=os.urandom).encrypt(
        metadata, b"v"
    )
    assert key_names(metadata) == ["app", "ops"]
    assert is_encrypted(metadata)
    assert Decryptor({"ops": other_pair[1]}).decrypt(metadata, sealed) == b"v"
    assert Decryptor({"app": pair[1], "x": other_pair[1]}).decrypt(metadata, sealed) == b"v"


def test_key_metadata_travels_beside_the_wrapped_key(pair: tuple[bytes, bytes]) -> None:
    metadata = entry_metadata()
    Encryptor({"app": pair[0]}, {"app": {"version": "3"}}, random_bytes=os.urandom).encrypt(
        metadata, b"v"
    )
    (entry,) = metadata.encryption_keys
    assert [(kv.key, kv.value) for kv in entry.metadata] == [("version", "3")]


def test_no_key_for_any_name_fails_naming_the_names_needed(
    pair: tuple[bytes, bytes], other_pair: tuple[bytes, bytes]
) -> None:
    metadata = entry_metadata()
    sealed = Encryptor({"app": pair[0], "ops": pair[0]}, random_bytes=os.urandom).encrypt(
        metadata, b"v"
    )
    with pytest.raises(CryptoError) as caught:
        Decryptor({"billing": other_pair[1]}).decrypt(metadata, sealed)
    message = str(caught.value)
    assert "'app', 'ops'" in message and "'billing'" in message
    with pytest.raises(CryptoError, match="private keys given: none"):
        Decryptor({}).decrypt(metadata, sealed)


def test_another_key_pair_under_the_name_fails_clearly(
    pair: tuple[bytes, bytes], other_pair: tuple[bytes, bytes]
) -> None:
    metadata = entry_metadata()
    sealed = Encryptor({"app": pair[0]}, random_bytes=os.urandom).encrypt(metadata, b"v")
    with pytest.raises(CryptoError, match="the private key given for 'app' does not open it"):
        Decryptor({"app": other_pair[1]}).decrypt(metadata, sealed)


def test_rsa_is_paid_once_per_data_key(
    pair: tuple[bytes, bytes], other_pair: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unwrapped data key is kept for the producer's next messages, and so is one that
    does not unwrap (a reader discarding them does not pay RSA for each)."""
    unwraps = []
    unwrap = Decryptor._unwrap

    def counted(private: rsa.RSAPrivateKey, wrapped: bytes) -> object:
        unwraps.append(wrapped)
        return unwrap(private, wrapped)

    monkeypatch.setattr(Decryptor, "_unwrap", staticmethod(counted))
    encryptor = Encryptor({"app": pair[0]}, random_bytes=os.urandom)
    sealed = []
    for value in (b"one", b"two", b"three"):
        metadata = entry_metadata()
        sealed.append((metadata, encryptor.encrypt(metadata, value)))
    right, wrong = Decryptor({"app": pair[1]}), Decryptor({"app": other_pair[1]})
    assert [right.decrypt(m, p) for m, p in sealed] == [b"one", b"two", b"three"]
    assert len(unwraps) == 1
    for metadata, payload in sealed:
        with pytest.raises(CryptoError):
            wrong.decrypt(metadata, payload)
    assert len(unwraps) == 2


def test_a_tampered_payload_does_not_authenticate(pair: tuple[bytes, bytes]) -> None:
    metadata = entry_metadata()
    sealed = bytearray(
        Encryptor({"app": pair[0]}, random_bytes=os.urandom).encrypt(metadata, b"value")
    )
    sealed[0] ^= 1
    decryptor = Decryptor({"app": pair[1]})
    with pytest.raises(CryptoError):
        decryptor.decrypt(metadata, bytes(sealed))


def test_errors_and_reprs_never_show_key_material(
    pair: tuple[bytes, bytes], other_pair: tuple[bytes, bytes]
) -> None:
    metadata = entry_metadata()
    encryptor = Encryptor({"app": pair[0]}, random_bytes=os.urandom)
    sealed = encryptor.encrypt(metadata, b"v")
    decryptor = Decryptor({"app": other_pair[1]})
    with pytest.raises(CryptoError) as caught:
        decryptor.decrypt(metadata, sealed)
    decryption = ReaderDecryption((("app", other_pair[1]),), CryptoFailureAction.DISCARD)
    shown = [str(caught.value), repr(encryptor), repr(decryptor), repr(decryption)]
    for text in shown:
        assert "BEGIN" not in text and "app" in text
        assert metadata.encryption_keys[0].value.hex()[:16] not in text


@pytest.mark.parametrize("curve", sorted(ECIES_VECTORS))
def test_ecies_is_bouncy_castles_byte_for_byte(curve: str) -> None:
    """With the ephemeral key fixed, the wrapping is the bytes Bouncy Castle's IESEngine makes
    set up as its JCE cipher ECIES is (V || C || T, K2 before K1, the 8-byte length tag)."""
    vector = ECIES_VECTORS[curve]
    private = serialization.load_pem_private_key(vector["private"].encode(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    ephemeral = ec.derive_private_key(int(vector["ephemeral"], 16), private.curve)
    message = bytes.fromhex(vector["message"])
    sealed = ecies_encrypt(private.public_key(), message, ephemeral=ephemeral)
    assert sealed.hex() == vector["engine"]
    assert ecies_decrypt(private, sealed) == message


@pytest.mark.parametrize("curve", sorted(ECIES_VECTORS))
def test_ecies_opens_what_bouncy_castles_jce_cipher_sealed(curve: str) -> None:
    """Cipher.getInstance("ECIES", "BC") under IESParameterSpec(null, null, 128), as the Java
    client wraps a data key; a changed byte anywhere, or another key pair, opens nothing."""
    vector = ECIES_VECTORS[curve]
    private = serialization.load_pem_private_key(vector["private"].encode(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    sealed = bytes.fromhex(vector["jce"])
    assert ecies_decrypt(private, sealed) == bytes.fromhex(vector["message"])
    for index in (1, len(sealed) // 2, len(sealed) - 1):
        changed = bytearray(sealed)
        changed[index] ^= 1
        assert ecies_decrypt(private, bytes(changed)) is None
    assert ecies_decrypt(private, sealed[:-1]) is None
    assert ecies_decrypt(ec.generate_private_key(private.curve), sealed) is None


@pytest.mark.parametrize("curve", sorted(CURVES))
def test_ec_keys_round_trip_beside_rsa_keys(curve: str, pair: tuple[bytes, bytes]) -> None:
    """A producer with an EC key name and an RSA one: either private key opens the message,
    and the EC key name's wrapped key is ECIES (point, 32 bytes, 20-byte tag)."""
    ec_public, ec_private = ec_key_pair(curve)
    metadata = entry_metadata()
    sealed = Encryptor({"ec": ec_public, "rsa": pair[0]}, random_bytes=os.urandom).encrypt(
        metadata, b"value"
    )
    wrapped = {k.key: k.value for k in metadata.encryption_keys}
    size = (CURVES[curve].key_size + 7) // 8
    assert len(wrapped["ec"]) == 1 + 2 * size + DATA_KEY_SIZE + 20
    assert wrapped["ec"][0] == 4
    assert Decryptor({"ec": ec_private}).decrypt(metadata, sealed) == b"value"
    assert Decryptor({"rsa": pair[1]}).decrypt(metadata, sealed) == b"value"
    with pytest.raises(CryptoError, match="does not open it"):
        Decryptor({"ec": ec_key_pair(curve)[1]}).decrypt(metadata, sealed)


def test_ec_keys_with_explicit_curve_parameters_load() -> None:
    """Keys made as Pulsar's documentation once said (`openssl ecparam -name secp521r1 -genkey
    -param_enc explicit`, the private key after an EC PARAMETERS block) work too."""
    private = (FIXTURES / "ec_explicit_private.pem").read_bytes()
    public = (FIXTURES / "ec_explicit_public.pem").read_bytes()
    metadata = entry_metadata()
    sealed = Encryptor({"app": public}, random_bytes=os.urandom).encrypt(metadata, b"value")
    assert Decryptor({"app": private}).decrypt(metadata, sealed) == b"value"


def test_a_key_neither_rsa_nor_ec_is_refused_saying_why() -> None:
    public_pem = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ConfigurationError, match=r"'app' is a \w+: only RSA and EC keys"):
        Encryptor({"app": public_pem}, random_bytes=os.urandom)


def test_a_batch_is_compressed_then_encrypted_whole(pair: tuple[bytes, bytes]) -> None:
    settings = ProducerSettings(codec=compression.LZ4)
    batch = OpenBatch(
        BatchLimits.of(settings, 5 << 20),
        topic="t",
        producer_name="p",
        codec=compression.LZ4,
        encryptor=Encryptor({"app": pair[0]}, random_bytes=os.urandom),
    )
    values = [b"value-%03d" % i * 8 for i in range(20)]
    for index, value in enumerate(values):
        batch.add(OutgoingMessage(value), index)
    section = parse_payload_section(batch.take(1000).section)
    metadata = section.metadata
    assert metadata.num_messages_in_batch == 20 and is_encrypted(metadata)
    opened = Decryptor({"app": pair[1]}).decrypt(metadata, bytes(section.payload))
    plain = compression.decompress(metadata.compression, opened, metadata.uncompressed_size)
    fields = walk_batch(plain, 20, metadata.sequence_id)
    starts, lengths = fields.value_start, fields.value_length
    assert [plain[s : s + n] for s, n in zip(starts, lengths, strict=True)] == values


def test_each_chunk_is_encrypted_on_its_own_and_joins_after(pair: tuple[bytes, bytes]) -> None:
    """As Java's producer does: cut the compressed payload, encrypt each piece (each chunk
    carries the keys and its own IV); the consumer decrypts each, then joins them."""
    value = random.Random(5).randbytes(20_000)
    sends = list(
        unbatched(
            OutgoingMessage(value),
            3,
            producer_name="p",
            publish_time=1000,
            codec=compression.ZSTD,
            max_entry_size=6000,
            encryptor=Encryptor({"app": pair[0]}, random_bytes=os.urandom),
        )
    )
    assert len(sends) > 3
    decryptor = Decryptor({"app": pair[1]})
    assembler = ChunkAssembler()
    ivs = set()
    whole = None
    for sent in sends:
        assert len(sent.section) <= 6000 + 64
        section = parse_payload_section(sent.section)
        ivs.add(section.metadata.encryption_param)
        whole = assembler.add(
            section.metadata, decryptor.decrypt(section.metadata, bytes(section.payload))
        )
    assert whole is not None and len(ivs) == len(sends)
    metadata = whole.metadata
    assert compression.decompress(metadata.compression, whole.payload, len(value)) == value


# --- options ---------------------------------------------------------------------------------


def write_keys(tmp_path: Path, pair: tuple[bytes, bytes]) -> tuple[Path, Path]:
    public, private = tmp_path / "public.pem", tmp_path / "private.pem"
    public.write_bytes(pair[0])
    private.write_bytes(pair[1])
    return public, private


BASE = {"service.url": "pulsar://broker.example:6650", "topic": "t"}


def test_write_options_carry_the_public_keys(tmp_path: Path, pair: tuple[bytes, bytes]) -> None:
    public, _ = write_keys(tmp_path, pair)
    options = WriteOptions.parse(
        {
            **BASE,
            "pulsar.producer.encryptionKeys": "app, ops",
            "pulsar.producer.publicKeyFiles": f"app={public},ops={public}",
        }
    )
    encryption = options.producer.encryption
    assert encryption is not None
    assert encryption.public_keys == (("app", pair[0]), ("ops", pair[0]))
    assert "BEGIN" not in repr(options) and "'app', 'ops'" in repr(options)


def test_read_options_carry_the_private_keys_and_the_action(
    tmp_path: Path, pair: tuple[bytes, bytes]
) -> None:
    _, private = write_keys(tmp_path, pair)
    options = ReadOptions.parse(
        {
            **BASE,
            "pulsar.reader.privateKeyFiles": f"app={private}",
            "pulsar.reader.cryptoFailureAction": "discard",
        },
        mode=ReadMode.BATCH,
    )
    assert options.decryption.private_keys == (("app", pair[1]),)
    assert options.decryption.action is CryptoFailureAction.DISCARD
    assert "PRIVATE" not in repr(options) and "BEGIN" not in repr(options)
    default = ReadOptions.parse(BASE, mode=ReadMode.BATCH).decryption
    assert default == ReaderDecryption((), CryptoFailureAction.FAIL)


def refused(options: dict[str, str], *, read: bool = False) -> str:
    with pytest.raises(ConfigurationError) as caught:
        if read:
            ReadOptions.parse({**BASE, **options}, mode=ReadMode.STREAM)
        else:
            WriteOptions.parse({**BASE, **options})
    return str(caught.value)


def test_bad_key_options_are_refused_naming_the_option(
    tmp_path: Path, pair: tuple[bytes, bytes]
) -> None:
    public, private = write_keys(tmp_path, pair)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN PUBLIC KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n")
    names = "pulsar.producer.encryptionKeys"
    files = "pulsar.producer.publicKeyFiles"
    cases = [
        ({names: "app"}, f"option {files!r} gives no public key file for key(s) 'app'"),
        ({files: f"app={public}"}, f"option {files!r} is given without {names!r}"),
        ({names: "app", files: f"app={tmp_path / 'nope.pem'}"}, f"option {files!r}: cannot read"),
        ({names: "app", files: f"app={garbage}"}, f"option {files!r}: the public key of"),
        ({names: "app", files: f"app={private}"}, f"option {files!r}: the public key of"),
        ({names: "app", files: str(public)}, f"option {files!r} must be key name=file path"),
        ({names: "app,", files: f"app={public}"}, f"option {names!r} must be key names"),
        ({names: "app", files: f"app={public},ops={public}"}, "'ops', which"),
    ]
    for options, expected in cases:
        message = refused(options)
        assert expected in message, message
        assert "c2VjcmV0" not in message and "BEGIN" not in message
    private_files = "pulsar.reader.privateKeyFiles"
    action = "pulsar.reader.cryptoFailureAction"
    read_cases = [
        ({private_files: f"app={public}"}, f"option {private_files!r}: the private key of"),
        ({private_files: f"app={garbage}"}, f"option {private_files!r}: the private key of"),
        ({private_files: f"app={tmp_path}"}, f"option {private_files!r}: cannot read"),
        ({action: "SEND"}, f"option {action!r} must be one of FAIL, DISCARD, CONSUME"),
    ]
    for options, expected in read_cases:
        message = refused(options, read=True)
        assert expected in message, message
        assert "c2VjcmV0" not in message and "BEGIN" not in message


def test_a_password_protected_private_key_is_refused(tmp_path: Path) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path / "locked.pem"
    path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    message = refused({"pulsar.reader.privateKeyFiles": f"app={path}"}, read=True)
    assert "protected by a password" in message


def test_encryption_settings_survive_pickling(tmp_path: Path, pair: tuple[bytes, bytes]) -> None:
    """Tasks carry them to executors, which need no copy of the files."""
    import pickle

    public, _ = write_keys(tmp_path, pair)
    options = WriteOptions.parse(
        {
            **BASE,
            "pulsar.producer.encryptionKeys": "app",
            "pulsar.producer.publicKeyFiles": f"app={public}",
        }
    )
    public.unlink()
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options
    assert dataclasses.replace(copy.producer).encryption == options.producer.encryption
