"""SendMessage frames for many messages at once, with numpy.

How this works
--------------
The frame of one SendMessage (see :mod:`.framing` and :mod:`.rpc`) is, when it fits one
chunk::

    [token][serial][1][chunk length]                  frame header
    RpcConnHeader RequestHeader [body size]           the envelope (rpc.envelope)
    RequestBody up to its request, [request size]
    SendMessageRequestP2B:
      clientId topicName partitionId                  the partition's (SendTemplate.heads)
      22 [data size] data                             the message
      28 flag  30 checkSum                            the message's
      sentAddr                                        the producer's
      msgType msgTime                                 the message's, when it has them
      authInfo                                        the connection's signature, if any

The fields go in number order, as protobuf writes them, so the frame is byte for byte the
one :func:`.rpc.encode_request` makes of the same request (a test holds the two together).
:meth:`SendBatch.encode` builds every message's sizes, header and short fields as the rows of
byte matrices and interleaves them with the data (:mod:`pulsar_spark.common.byte_rows`);
only the checksums are computed one message at a time. A message too large for one chunk is
framed by :func:`.framing.encode_frame` instead, from the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pulsar_spark.common.byte_rows import (
    Bytes,
    Ints,
    Piece,
    Short,
    constant,
    interleave,
    pack,
    ranges,
    varints,
)
from pulsar_spark.common.varints import encode_varint
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import CHUNK_SIZE, FRAME_TOKEN, encode_frame
from pulsar_spark.tubemq.wire.messages import checksums

SEND = rpc.CALLS[rpc.Method.SEND_MESSAGE]
# Tags (field number << 3 | wire type) of the fields written here.
_DATA, _FLAG, _CHECKSUM = 0x22, 0x28, 0x30  # 4 length-delimited; 5 and 6 varints
_MSG_TYPE, _MSG_TIME = b"\x42", b"\x4a"  # 8 and 9, length-delimited


@dataclass(frozen=True, slots=True)
class SendColumns:
    """Messages to send, column by column: message i's ``data`` (the value, after its
    attributes when it has some) is ``data[offsets[i]:offsets[i + 1]]`` and its flag
    ``flags[i]``; ``tails`` holds its msgType and msgTime fields serialized (None when no
    message has either)."""

    data: Bytes
    offsets: Ints
    flags: Ints
    tails: Piece | None = None

    def __len__(self) -> int:
        return len(self.flags)

    def take(self, rows: Ints) -> SendColumns:
        """Messages ``rows``, in that order."""
        index, offsets = ranges(self.offsets[rows], self.offsets[rows + 1])
        tails = None
        if self.tails is not None:
            data, lengths = self.tails
            ends = np.concatenate(([0], np.cumsum(lengths)))
            tails = (data[ranges(ends[rows], ends[rows + 1])[0]], lengths[rows])
        return SendColumns(self.data[index], offsets, self.flags[rows], tails)


def send_columns(
    messages: Sequence[tuple[bytes, int, str | None, str | None]],
) -> SendColumns:
    """The columns of ``(data, flag, msg_type, msg_time)`` messages (a type or time that is
    None or empty is left out)."""
    data = [message[0] for message in messages]
    sizes = np.array([len(item) for item in data], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    flags = np.array([message[1] for message in messages], dtype=np.int64)
    tails = [_text(_MSG_TYPE, kind) + _text(_MSG_TIME, time) for _, _, kind, time in messages]
    tail_piece = None
    if any(tails):
        tail_sizes = np.array([len(tail) for tail in tails], dtype=np.int64)
        tail_piece = (np.frombuffer(b"".join(tails), dtype=np.uint8), tail_sizes)
    return SendColumns(np.frombuffer(b"".join(data), dtype=np.uint8), offsets, flags, tail_piece)


@dataclass(frozen=True, slots=True)
class SendTemplate:
    """What a producer's SendMessage requests share: per partition (its slot), the fields
    numbered below ``data``; and ``sentAddr``, numbered between ``checkSum`` and
    ``msgType``."""

    heads: tuple[bytes, ...]
    sent_addr: bytes

    @classmethod
    def of(
        cls, client_id: str, partitions: Sequence[tuple[str, int]], sent_addr: int
    ) -> SendTemplate:
        """The template for ``partitions``, each a (topic, partition id)."""
        heads = tuple(
            broker_pb.SendMessageRequestP2B(
                clientId=client_id, topicName=topic, partitionId=partition_id
            ).SerializePartialToString()
            for topic, partition_id in partitions
        )
        sent = broker_pb.SendMessageRequestP2B(sentAddr=sent_addr).SerializePartialToString()
        return cls(heads, sent)


@dataclass(frozen=True, slots=True)
class SendBatch:
    """Messages for one connection: message i of ``columns`` to partition ``slots[i]`` of
    ``template``."""

    template: SendTemplate
    slots: Ints
    columns: SendColumns

    def encode(
        self,
        serials: Sequence[int],
        signature: bytes = b"",
        timeout_ms: int = rpc.DEFAULT_TIMEOUT_MS,
    ) -> bytes:
        """The messages' frames under ``serials``, one after another; ``signature`` is the
        ``authInfo`` field serialized (see :func:`.auth.signed_field`)."""
        return _encode(self.template, self.slots, self.columns, serials, signature, timeout_ms)


def _encode(  # noqa: PLR0917 (SendBatch.encode's parts)
    template: SendTemplate,
    slots: Ints,
    columns: SendColumns,
    serials: Sequence[int],
    signature: bytes,
    timeout_ms: int,
) -> bytes:
    count = len(columns)
    start, end = int(columns.offsets[0]), int(columns.offsets[-1])
    sizes = np.diff(columns.offsets)
    head = _heads(template.heads, slots)
    data_size = varints(sizes, _DATA)
    flag = varints(columns.flags, _FLAG)
    offsets = columns.offsets
    crc = varints(checksums(columns.data.data, offsets[:-1], offsets[1:]), _CHECKSUM)
    tail_sizes = columns.tails[1] if columns.tails is not None else 0
    request_sizes = (
        head.lengths + data_size.lengths + sizes + flag.lengths + crc.lengths + tail_sizes
    ) + (len(template.sent_addr) + len(signature))
    headers, body_start = rpc.envelope(SEND, timeout_ms)
    request_size = varints(request_sizes)
    body_sizes = len(body_start) + request_size.lengths + request_sizes
    body_size = varints(body_sizes)
    chunk_sizes = len(headers) + body_size.lengths + body_sizes
    whole = bool((chunk_sizes <= CHUNK_SIZE).all())
    leading = [constant(headers, count), body_size, constant(body_start, count), request_size]
    if whole:
        leading.insert(0, _frame_headers(serials, chunk_sizes))
    pieces = [
        pack([*leading, head, data_size]),
        (columns.data[start:end], sizes),
        pack([flag, crc, constant(template.sent_addr, count)]),
    ]
    if columns.tails is not None:
        pieces.append(columns.tails)
    if signature:
        pieces.append(pack([constant(signature, count)]))
    out, ends = interleave(pieces, count)
    if whole:
        return bytes(out)
    bounds = [0, *ends.tolist()]
    return b"".join(
        encode_frame(serial_no, bytes(out[bounds[i] : bounds[i + 1]]))
        for i, serial_no in enumerate(serials)
    )


def _heads(heads: tuple[bytes, ...], slots: Ints) -> Short:
    """Each message's partition fields."""
    lengths = np.array([len(head) for head in heads], dtype=np.int64)
    matrix = np.zeros((len(heads), int(lengths.max())), dtype=np.uint8)
    for row, head in enumerate(heads):
        matrix[row, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    return Short(matrix[slots], lengths[slots])


def _frame_headers(serials: Sequence[int], chunk_sizes: Ints) -> Short:
    """Each frame's token, serial number, chunk count (1) and chunk length."""
    fields = np.empty((len(serials), 4), dtype=">i4")
    fields[:, 0] = np.int32(np.uint32(FRAME_TOKEN).view(np.int32))
    fields[:, 1] = serials
    fields[:, 2] = 1
    fields[:, 3] = chunk_sizes
    matrix = fields.view(np.uint8).reshape(len(serials), 16)
    return Short(matrix, np.full(len(serials), 16, dtype=np.int64))


def _text(tag: bytes, text: str | None) -> bytes:
    if not text:
        return b""
    encoded = text.encode("utf-8")
    return tag + encode_varint(len(encoded)) + encoded
