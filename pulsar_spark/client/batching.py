"""The producer's open batch, without I/O: what it holds, when it is full, the SEND it becomes.

How this works
--------------
Messages join the open batch until it holds ``max_messages`` messages or ``max_bytes`` bytes
(the message that crosses the byte limit joins too), or until a message is added to a batch
that has been open for ``max_delay`` seconds or more. The delay starts with the batch's first
message: the clock (injected, :func:`time.monotonic` unless told otherwise) is read before each
addition, and the batch is full when that reading is at or past its deadline. Nothing watches
the clock in between; whoever holds the batch sends it when an addition reports it full, and
may send it at any other time (on flush, before a message that travels alone).

:meth:`BatchLimits.of` keeps ``max_bytes`` below half of what one entry may hold, less room for
the metadata: a message larger than that travels alone, so a batch (under ``max_bytes`` before
its last message, which is itself under ``max_bytes``) stays below the maximum entry size
unless keys or properties are very large. :meth:`OpenBatch.take` refuses such a batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pulsar_spark.client.send_window import Sent
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.errors import LocalProtocolError
from pulsar_spark.protocol.crypto import Encryptor
from pulsar_spark.protocol.encode import BatchBuilder, OutgoingMessage, Records
from pulsar_spark.protocol.payload import encode_payload_section

# Room kept for the metadata, keys and properties beside the payload when deciding what fits.
METADATA_ROOM = 64 * 1024


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """When an open batch is full, and how large an entry may be."""

    max_messages: int
    max_bytes: int  # also the payload size above which a message travels alone
    max_delay: float  # seconds
    max_entry_size: int  # metadata and payload of one SEND

    @classmethod
    def of(cls, settings: ProducerSettings, max_entry_size: int) -> BatchLimits:
        """The producer's settings, with the byte limit lowered to what entries allow."""
        room = max((max_entry_size - METADATA_ROOM) // 2, 1)
        return cls(
            settings.batch_max_messages,
            min(settings.batch_max_bytes, room),
            settings.batch_max_delay_ms / 1000.0,
            max_entry_size,
        )


class OpenBatch:
    """Messages waiting to go out together in one SEND; see the module docstring."""

    def __init__(
        self,
        limits: BatchLimits,
        *,
        topic: str,
        producer_name: str,
        codec: int,
        schema_version: bytes | None = None,
        clock: Callable[[], float] = time.monotonic,
        encryptor: Encryptor | None = None,
    ) -> None:
        self.limits = limits
        self._encryptor = encryptor  # encrypts each batch's compressed payload
        self._schema_version = schema_version  # stamped on every batch
        self._topic = topic  # for errors
        self._producer_name = producer_name
        self._codec = codec
        self._clock = clock
        self._builder = BatchBuilder()
        self._deadline = 0.0

    def __len__(self) -> int:
        return self._builder.count

    def add(self, message: OutgoingMessage, sequence_id: int) -> bool:
        """Add one message; whether the batch is then full."""
        now = self._start_clock()
        self._builder.add(message, sequence_id)
        return self._full(now)

    def add_records(self, records: Records, start: int) -> tuple[int, bool]:
        """Add records from ``start`` on, as many as the batch has room for and one at least;
        how many were added, and whether the batch is then full."""
        now = self._start_clock()
        limits = self.limits
        added = self._builder.add_records(records, start, limits.max_messages, limits.max_bytes)
        return added, self._full(now)

    def take(self, publish_time: int) -> Sent:
        """The batch as one SEND, published at ``publish_time`` (ms); the batch is then empty.

        Raises :class:`LocalProtocolError` if the batch is empty or too large for one entry.
        """
        builder = self._builder
        count, first = builder.count, builder.first_sequence_id
        metadata, payload = builder.build(
            producer_name=self._producer_name,
            publish_time=publish_time,
            codec=self._codec,
            schema_version=self._schema_version,
        )
        if self._encryptor is not None:
            payload = self._encryptor.encrypt(metadata, payload)
        size = metadata.ByteSize() + len(payload)
        if size > self.limits.max_entry_size:
            raise LocalProtocolError(
                f"batch of {count} messages for {self._topic} is {size} bytes, over the maximum "
                f"entry size of {self.limits.max_entry_size} bytes (keys or properties too large?)"
            )
        section = encode_payload_section(metadata, payload)
        return Sent(first, first + count - 1, count, count, False, section)

    def _start_clock(self) -> float:
        """The time now, which starts the batch's delay if the batch is empty."""
        now = self._clock()
        if not self._builder.count:
            self._deadline = now + self.limits.max_delay
        return now

    def _full(self, now: float) -> bool:
        builder, limits = self._builder, self.limits
        return (
            builder.count >= limits.max_messages
            or builder.size >= limits.max_bytes
            or now >= self._deadline
        )
