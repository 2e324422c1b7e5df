"""TubeMQ message payloads: what SendMessage carries and what GetMessage returns.

How this works
--------------
A TubeMQ message is a value plus an optional attribute string. The producer sends both as one
byte string, ``SendMessageRequestP2B.data``; the broker stores it unchanged and returns it as
``TransferedMessage.payLoadData``::

    flag bit 0 clear:  [value]
    flag bit 0 set:    [attribute length: int32 big-endian][attributes, UTF-8][value]

The flag travels beside the data (``SendMessageRequestP2B.flag``, ``TransferedMessage.flag``);
no other bit is used. The attribute string is ``k=v`` items joined by commas; the two system
items ``$msgType$=...`` and ``$msgTime$=yyyyMMddHHmm`` come first when set, and a producer
also sends them as the request's ``msgType``/``msgTime`` (the broker indexes the type for
filtered reads). Keys and values cannot contain ``,`` or ``=``.

``TransferedMessage.checkSum`` is CRC-32 (zlib's) of the whole payload with the top bit
cleared, computed by the broker when it stored the message. A producer may send the same
checksum, which the broker then verifies, or -1 (the Java client's choice) to skip it.

The Java client (2.4) neither compresses nor packs several values into one message, so a
payload is always one value. It drops a message whose checksum or attribute length is wrong
without a word; :func:`decode_messages` raises instead, so no value disappears silently.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.spans import IndexArray, Int64Array, Spans
from pulsar_spark.errors import ChecksumMismatchError, CorruptPayloadError, LocalProtocolError
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.reply_scan import ScannedMessages

FLAG_HAS_ATTRIBUTES = 0x1
MSG_TYPE_KEY = "$msgType$"
MSG_TIME_KEY = "$msgTime$"
# The checksum a producer sends to ask the broker not to verify the data.
NO_CHECKSUM = -1

_LENGTH = struct.Struct(">i")
_CHECKSUM_MASK = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class TubeMessage:
    """One message read from a partition.

    ``attributes`` is the attribute string as stored (None when the message has none);
    :func:`parse_attributes` turns it into a mapping.
    """

    message_id: int
    value: bytes
    attributes: str | None
    flag: int


def checksum(payload: bytes | memoryview) -> int:
    """TubeMQ's payload checksum: CRC-32 with the sign bit cleared, so it is never negative."""
    return zlib.crc32(payload) & _CHECKSUM_MASK


def checksums(data: bytes | memoryview, starts: Int64Array, ends: Int64Array) -> Int64Array:
    """:func:`checksum` of each payload ``data[starts[i]:ends[i]]``."""
    bounds = zip(starts.tolist(), ends.tolist(), strict=True)
    return np.array([zlib.crc32(data[a:b]) for a, b in bounds], dtype=np.int64) & _CHECKSUM_MASK


@dataclass(frozen=True, slots=True)
class TubeMessages:
    """The messages of one GetMessage reply as columns: message i is ``ids[i]``, the value
    ``values[i]`` (a slice of the bytes it was read from), the attribute string
    ``texts[codes[i]]`` and ``flags[i]``.

    Producers set the same few attribute strings again and again, so each distinct one is
    kept once: ``texts`` holds them in the order first seen, None (no attributes) first.
    """

    ids: list[int]
    values: Spans
    texts: list[str | None]
    codes: npt.NDArray[np.int32]
    flags: list[int]

    @classmethod
    def of(cls, messages: Sequence[TubeMessage]) -> TubeMessages:
        """The columns of ``messages``."""
        texts = list(dict.fromkeys([None, *(m.attributes for m in messages)]))
        code = {text: i for i, text in enumerate(texts)}
        return cls(
            [m.message_id for m in messages],
            Spans.of([m.value for m in messages]),
            texts,
            np.array([code[m.attributes] for m in messages], dtype=np.int32),
            [m.flag for m in messages],
        )

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def attributes(self) -> list[str | None]:
        """Each message's attribute string."""
        return [self.texts[code] for code in self.codes.tolist()]

    def take(self, rows: IndexArray) -> TubeMessages:
        """The messages at ``rows``, in that order."""
        indexes = rows.tolist()
        return TubeMessages(
            [self.ids[i] for i in indexes],
            self.values.take(rows),
            self.texts,
            self.codes[rows],
            [self.flags[i] for i in indexes],
        )

    def head(self, count: int) -> TubeMessages:
        """The first ``count`` messages."""
        return TubeMessages(
            self.ids[:count],
            self.values.slice(0, count),
            self.texts,
            self.codes[:count],
            self.flags[:count],
        )

    def rows(self) -> list[TubeMessage]:
        """One :class:`TubeMessage` per message."""
        values = self.values
        spans = zip(values.starts.tolist(), values.lengths.tolist(), strict=True)
        return [
            TubeMessage(message_id, values.buffer[start : start + size], attributes, flag)
            for message_id, (start, size), attributes, flag in zip(
                self.ids, spans, self.attributes, self.flags, strict=True
            )
        ]


@dataclass(frozen=True, slots=True)
class GetMessageReply:
    """A GetMessage reply: its fields but the messages (``response``), and its messages."""

    response: broker_pb.GetMessageResponseB2C
    messages: TubeMessages

    @property
    def errCode(self) -> int:  # noqa: N802 (the wire's name, as every reply has it)
        return self.response.errCode

    @property
    def errMsg(self) -> str:  # noqa: N802
        return self.response.errMsg

    @property
    def currOffset(self) -> int:  # noqa: N802
        return self.response.currOffset


def decode_messages(
    response: broker_pb.GetMessageResponseB2C, *, verify: bool = True
) -> TubeMessages:
    """Every message of a parsed GetMessage reply, in order, as columns, each checked against
    its checksum (unless not ``verify``) and split into value and attributes.

    Reads take the faster way in :func:`decode_scanned` wherever the reply allows it.
    """
    ids: list[int] = []
    payloads: list[bytes] = []
    flags: list[int] = []
    sums: list[int] = []
    # one pass: reaching a stored message costs more than reading its fields
    for stored in response.messages:
        ids.append(stored.messageId)
        payloads.append(stored.payLoadData)
        flags.append(stored.flag)
        sums.append(stored.checkSum)
    laid = Spans.of(payloads)
    ends = laid.starts + laid.lengths
    if verify and checksums(laid.buffer, laid.starts, ends).tolist() != sums:
        for args in zip(ids, payloads, sums, strict=True):
            _verify(*args)
    return _columns(laid.buffer, ids, laid.starts, ends, np.array(flags, dtype=np.int64))


def decode_scanned(data: bytes, scanned: ScannedMessages) -> TubeMessages | None:
    """:func:`decode_messages` for the messages :func:`~.reply_scan.scan_messages` found in
    the serialized reply ``data``, without a Python object per message but each payload for
    its checksum; None when a checksum does not match (:func:`decode_messages` then says
    which)."""
    starts, ends = scanned.starts, scanned.ends
    if not np.array_equal(checksums(data, starts, ends), scanned.checksums):
        return None
    return _columns(data, scanned.ids, starts, ends, scanned.flags)


def _columns(
    data: bytes, ids: list[int], starts: Int64Array, ends: Int64Array, flags: npt.NDArray[Any]
) -> TubeMessages:
    """The messages whose payloads are ``data[starts[i]:ends[i]]``, those flagged with
    attributes split into attribute string and value, all at once.

    Raises CorruptPayloadError for the first flagged payload that cannot hold its attribute
    length or attributes, or, when all can, for the first whose attributes are not UTF-8.
    """
    flagged = np.flatnonzero(flags & FLAG_HAS_ATTRIBUTES)
    codes = np.zeros(len(ids), dtype=np.int32)
    texts: list[str | None] = [None]
    value_starts = starts
    if flagged.size:
        first = starts[flagged] + _LENGTH.size
        sizes = _attribute_lengths(data, ids, flagged, first, ends[flagged])
        raw = list(map(data.__getitem__, map(slice, first.tolist(), (first + sizes).tolist())))
        texts, code = _texts(raw, ids, flagged)
        codes[flagged] = np.fromiter(map(code.__getitem__, raw), np.int32, len(raw))
        value_starts = starts.copy()
        value_starts[flagged] = first + sizes
    return TubeMessages(
        ids, Spans(data, value_starts, ends - value_starts), texts, codes, flags.tolist()
    )


def _attribute_lengths(
    data: bytes, ids: list[int], flagged: IndexArray, first: Int64Array, ends: Int64Array
) -> Int64Array:
    """The attribute lengths (int32, big-endian) that end at ``first``, the messages at
    ``flagged``; raises CorruptPayloadError for the first payload that cannot hold its
    length or its attributes."""
    room = ends - first
    at = np.minimum(first[:, None] + np.arange(-_LENGTH.size, 0), len(data) - 1)
    raw = np.frombuffer(data, dtype=np.uint8)[at]
    sizes = np.ascontiguousarray(raw).view(">i4")[:, 0].astype(np.int64)
    wrong = np.flatnonzero((room < 0) | (sizes < 0) | (sizes > room))
    if not wrong.size:
        return sizes
    i = int(wrong[0])
    if room[i] < 0:
        problem = f"{int(room[i]) + _LENGTH.size} bytes cannot hold an attribute length"
    else:
        problem = (
            f"attribute length {int(sizes[i])} does not fit in the {int(room[i])} bytes after it"
        )
    raise CorruptPayloadError(f"message {ids[flagged[i]]}: {problem}")


def _texts(
    raw: list[bytes], ids: list[int], flagged: IndexArray
) -> tuple[list[str | None], dict[bytes, int]]:
    """The distinct attribute strings of ``raw`` (the attributes of the messages at
    ``flagged``), None first, and the index of each raw one among them. An empty one is None
    (no attributes), as the Java reader has it."""
    texts: list[str | None] = [None]
    code: dict[bytes, int] = {}
    for text in dict.fromkeys(raw):
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            message_id = ids[flagged[raw.index(text)]]
            raise CorruptPayloadError(f"message {message_id}: attributes are not UTF-8") from exc
        code[text] = len(texts) if decoded else 0
        if decoded:
            texts.append(decoded)
    return texts, code


def _verify(message_id: int, payload: bytes, stored: int) -> None:
    if checksum(payload) != stored:
        raise ChecksumMismatchError(
            f"message {message_id}: checksum {stored} does not match the "
            f"payload's {checksum(payload)}"
        )


def parse_attributes(attributes: str | None) -> dict[str, str]:
    """The ``k=v`` items of an attribute string, the way the Java client reads them.

    Items without ``=`` or with a blank key are skipped; the first item with a key wins.
    """
    pairs: dict[str, str] = {}
    for item in (attributes or "").split(","):
        parts = item.split("=")
        while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) > 1 and parts[0].strip():
            pairs.setdefault(parts[0], parts[1])
    return pairs


def of_types(messages: TubeMessages, types: tuple[str, ...]) -> IndexArray:
    """The indexes of the messages whose ``$msgType$`` is one of ``types``; each distinct
    attribute string is parsed once."""
    wanted = [parse_attributes(text).get(MSG_TYPE_KEY) in types for text in messages.texts]
    return np.flatnonzero(np.array(wanted, dtype=np.bool_)[messages.codes])


def format_attributes(
    properties: Mapping[str, str],
    *,
    msg_type: str | None = None,
    msg_time: str | None = None,
) -> str:
    """The attribute string for a message: system items first, then ``properties`` in order.

    ``msg_time`` is minute precision, ``yyyyMMddHHmm``. Raises LocalProtocolError for a key or
    value the format cannot carry.
    """
    items = []
    if msg_type:
        items.append(f"{MSG_TYPE_KEY}={_checked('msgType', msg_type.strip())}")
    if msg_time:
        if len(msg_time) != 12 or not msg_time.isdigit():
            raise LocalProtocolError(f"msgTime {msg_time!r} is not yyyyMMddHHmm")
        items.append(f"{MSG_TIME_KEY}={msg_time}")
    for key, value in properties.items():
        if MSG_TYPE_KEY in key + value or MSG_TIME_KEY in key + value:
            raise LocalProtocolError(f"attribute {key!r} uses a reserved system key")
        items.append(f"{_checked('key', key)}={_checked('value', value)}")
    return ",".join(items)


def encode_payload(value: bytes, attributes: str | None) -> tuple[bytes, int]:
    """The ``data`` and ``flag`` of a SendMessage for ``value`` with ``attributes``.

    Blank attributes are left out and the flag stays 0. (The Java client sets the flag for
    any non-null attribute string but writes the attributes only when they are not blank,
    which its own reader then misreads; this encoder keeps the two in step.)
    """
    if not attributes or not attributes.strip():
        return value, 0
    encoded = attributes.encode("utf-8")
    return _LENGTH.pack(len(encoded)) + encoded + value, FLAG_HAS_ATTRIBUTES


def _checked(what: str, text: str) -> str:
    if not text.strip():
        raise LocalProtocolError(f"attribute {what} is blank")
    if "," in text or "=" in text:
        raise LocalProtocolError(f"attribute {what} {text!r} contains ',' or '='")
    return text
