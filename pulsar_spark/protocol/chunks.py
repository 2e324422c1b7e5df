"""Reassembling chunked messages on the consumer side.

A producer sends a message larger than the broker's maximum as ``num_chunks_from_msg``
consecutive-id entries sharing a ``uuid``; ``chunk_id`` runs from 0. Chunks of different
messages may interleave. The assembler buffers each uuid's pieces in order and returns the
whole (still compressed) payload when the last one arrives. A chunk that does not continue its
message (missing start, gap, or mismatch) discards that message's partial data, as the official
clients do; the caller decides whether that is data loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_spark.protocol import pb


def is_chunk(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("uuid") and metadata.num_chunks_from_msg > 1


@dataclass(slots=True)
class _Partial:
    parts: list[bytes] = field(default_factory=list)
    size: int = 0


@dataclass(frozen=True, slots=True)
class Assembled:
    """A complete chunked message: its last chunk's metadata and the joined payload."""

    metadata: pb.MessageMetadata
    payload: bytes


class ChunkAssembler:
    """Collects chunks per uuid; ``add`` returns the message when its last chunk arrives."""

    def __init__(self, max_pending_bytes: int = 512 * 1024 * 1024) -> None:
        self._pending: dict[str, _Partial] = {}
        self._max_pending_bytes = max_pending_bytes
        self.discarded = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, metadata: pb.MessageMetadata, payload: bytes) -> Assembled | None:
        uuid, chunk_id = metadata.uuid, metadata.chunk_id
        partial = self._pending.get(uuid)
        if partial is None:
            if chunk_id != 0:
                self.discarded += 1
                return None
            partial = self._pending[uuid] = _Partial()
        elif chunk_id != len(partial.parts):
            del self._pending[uuid]
            self.discarded += 1
            return self.add(metadata, payload) if chunk_id == 0 else None
        partial.parts.append(payload)
        partial.size += len(payload)
        if self._total_pending() > self._max_pending_bytes:
            del self._pending[uuid]
            self.discarded += 1
            return None
        if len(partial.parts) < metadata.num_chunks_from_msg:
            return None
        del self._pending[uuid]
        return Assembled(metadata, b"".join(partial.parts))

    def _total_pending(self) -> int:
        return sum(p.size for p in self._pending.values())
