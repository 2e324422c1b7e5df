"""A message that travels alone, without I/O: one SEND, or chunks if it does not fit one entry.

How this works
--------------
A message sent unbatched (batching is off, or its value is too large to share a batch) gets
its own MessageMetadata, and its value is compressed with the producer's codec (an empty or
null value is sent uncompressed). If metadata and compressed payload fit one entry it goes as
one SEND. If not, :func:`~pulsar_spark.protocol.encode.chunks` cuts the compressed payload into
pieces that fit, each a SEND with ``is_chunk`` and the message's sequence id; only the last
chunk's receipt completes the message, so only its :class:`Sent` counts one message.

Entries are kept ``FRAME_PADDING`` (10 KiB) below the connection's ``max_message_size``
(:func:`entry_size_limit`): a broker that advertises no maximum (pulsar-lite) is assumed to
allow 5 MiB, but the C++ client, under the official Python one, then discards entries larger
than 5 MiB - 10 KiB as corrupt.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulsar_spark.client.send_window import Sent
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.crypto import Encryptor
from pulsar_spark.protocol.encode import OutgoingMessage, chunks, single_message_metadata
from pulsar_spark.protocol.framing import FRAME_PADDING
from pulsar_spark.protocol.payload import encode_payload_section


def entry_size_limit(max_message_size: int) -> int:
    """The largest entry (metadata and payload) to send where messages may be
    ``max_message_size`` bytes."""
    return max(max_message_size - FRAME_PADDING, 1)


def unbatched(
    message: OutgoingMessage,
    sequence_id: int,
    *,
    producer_name: str,
    publish_time: int,
    codec: int,
    max_entry_size: int,
    schema_version: bytes | None = None,
    encryptor: Encryptor | None = None,
) -> Iterator[Sent]:
    """The SENDs of ``message`` sent alone, in order: one, or its chunks.

    The chunks are made one at a time, as they are asked for. With ``encryptor`` the
    compressed payload is encrypted; a chunked one is cut first and each chunk encrypted on
    its own, as Java's producer does (a consumer decrypts each chunk, then joins them).
    """
    metadata = single_message_metadata(
        message,
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time,
        schema_version=schema_version,
    )
    value = message.value or b""
    used = codec if value else compression.NONE
    payload = compression.compress(used, value)
    metadata.compression = used  # type: ignore[assignment]
    metadata.uncompressed_size = len(value)
    overhead = 0 if encryptor is None else encryptor.overhead
    if metadata.ByteSize() + len(payload) + overhead <= max_entry_size:
        if encryptor is not None:
            payload = encryptor.encrypt(metadata, payload)
        yield Sent(sequence_id, sequence_id, 1, 1, False, encode_payload_section(metadata, payload))
        return
    yield from _chunked(
        metadata,
        value,
        payload,
        sequence_id,
        codec=codec,
        max_entry_size=max_entry_size - overhead,
        encryptor=encryptor,
    )


def _chunked(
    metadata: pb.MessageMetadata,
    value: bytes,
    compressed: bytes,
    sequence_id: int,
    *,
    codec: int,
    max_entry_size: int,
    encryptor: Encryptor | None = None,
) -> Iterator[Sent]:
    pieces = chunks(
        metadata, value, codec=codec, max_message_size=max_entry_size, compressed=compressed
    )
    for part, piece in pieces:
        sent = piece if encryptor is None else encryptor.encrypt(part, piece)
        last = part.chunk_id == part.num_chunks_from_msg - 1
        section = encode_payload_section(part, sent)
        yield Sent(sequence_id, sequence_id, 1 if last else 0, 1, True, section)
