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

import numpy as np

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


@dataclass(frozen=True, slots=True)
class TubeMessages:
    """The messages of one GetMessage reply as columns: message i is ``ids[i]``,
    ``values[i]``, ``attributes[i]`` and ``flags[i]``."""

    ids: list[int]
    values: list[bytes]
    attributes: list[str | None]
    flags: list[int]

    @classmethod
    def of(cls, messages: Sequence[TubeMessage]) -> TubeMessages:
        """The columns of ``messages``."""
        return cls(
            [m.message_id for m in messages],
            [m.value for m in messages],
            [m.attributes for m in messages],
            [m.flag for m in messages],
        )

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, indexes: Sequence[int]) -> TubeMessages:
        """The messages at ``indexes``, in that order."""
        return TubeMessages(
            [self.ids[i] for i in indexes],
            [self.values[i] for i in indexes],
            [self.attributes[i] for i in indexes],
            [self.flags[i] for i in indexes],
        )

    def head(self, count: int) -> TubeMessages:
        """The first ``count`` messages."""
        return TubeMessages(
            self.ids[:count], self.values[:count], self.attributes[:count], self.flags[:count]
        )

    def rows(self) -> list[TubeMessage]:
        """One :class:`TubeMessage` per message."""
        return [
            TubeMessage(*fields)
            for fields in zip(self.ids, self.values, self.attributes, self.flags, strict=True)
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

    A field at a time: the checksums of the whole reply are compared as one list, and only
    messages flagged with attributes are split. Reads take the faster way in
    :func:`decode_scanned` wherever the reply allows it.
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
    if verify and [zlib.crc32(p) & _CHECKSUM_MASK for p in payloads] != sums:
        for args in zip(ids, payloads, sums, strict=True):
            _verify(*args)
    flagged = [i for i, flag in enumerate(flags) if flag & FLAG_HAS_ATTRIBUTES]
    return _split_all(ids, payloads, flags, flagged)


def decode_scanned(data: bytes, scanned: ScannedMessages) -> TubeMessages | None:
    """:func:`decode_messages` for the messages :func:`~.reply_scan.scan_messages` found in
    the serialized reply ``data``, without a Python object per message until the values
    themselves; None when a checksum does not match (:func:`decode_messages` then says
    which)."""
    values = [data[a:b] for a, b in zip(scanned.starts, scanned.ends, strict=True)]
    sums = np.fromiter(map(zlib.crc32, values), np.uint64, len(values))
    if not np.array_equal(sums & _CHECKSUM_MASK, scanned.checksums):
        return None
    flagged = np.flatnonzero(scanned.flags & FLAG_HAS_ATTRIBUTES).tolist()
    return _split_all(scanned.ids, values, scanned.flags.tolist(), flagged)


def _split_all(
    ids: list[int], payloads: list[bytes], flags: list[int], flagged: list[int]
) -> TubeMessages:
    """The messages of ``payloads``, those at the indexes ``flagged`` (the ones flagged with
    attributes) split."""
    attributes: list[str | None] = [None] * len(ids)
    values = list(payloads) if flagged else payloads
    for i in flagged:
        values[i], attributes[i] = _split(ids[i], payloads[i])
    return TubeMessages(ids, values, attributes, flags)


def _verify(message_id: int, payload: bytes, stored: int) -> None:
    if checksum(payload) != stored:
        raise ChecksumMismatchError(
            f"message {message_id}: checksum {stored} does not match the "
            f"payload's {checksum(payload)}"
        )


def _split(message_id: int, payload: bytes) -> tuple[bytes, str | None]:
    """The value and attribute string of a payload flagged with attributes."""
    if len(payload) < _LENGTH.size:
        raise CorruptPayloadError(
            f"message {message_id}: {len(payload)} bytes cannot hold an attribute length"
        )
    (size,) = _LENGTH.unpack_from(payload)
    end = _LENGTH.size + size
    if size < 0 or end > len(payload):
        raise CorruptPayloadError(
            f"message {message_id}: attribute length {size} does not fit in the "
            f"{len(payload) - _LENGTH.size} bytes after it"
        )
    try:
        attributes = payload[_LENGTH.size : end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptPayloadError(f"message {message_id}: attributes are not UTF-8") from exc
    # The Java reader leaves the attributes unset (null) when their length is 0.
    return payload[end:], attributes or None


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


def of_types(messages: TubeMessages, types: tuple[str, ...]) -> list[int]:
    """The indexes of the messages whose ``$msgType$`` is one of ``types``; each distinct
    attribute string is parsed once."""
    wanted = {
        text: parse_attributes(text).get(MSG_TYPE_KEY) in types
        for text in dict.fromkeys(messages.attributes)
    }
    return [i for i, text in enumerate(messages.attributes) if wanted[text]]


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
