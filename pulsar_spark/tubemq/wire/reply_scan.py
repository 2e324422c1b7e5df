"""Finding every message of a GetMessage reply at once, with numpy.

How this works
--------------
A GetMessage reply (``GetMessageResponseB2C``) holds its messages as field 4, one
length-delimited ``TransferedMessage`` each, written back to back between the fields before
(1-3) and after (5-10) them. Reading the messages one at a time through the protobuf runtime
costs a Python object per message; this scan finds where each one's fields lie instead:

1. *Candidates.* Every byte ``0x22`` (field 4, length-delimited) after the leading fields,
   followed by a length and ``0x08`` (``messageId``, the first field), may start a message:
   all of them do, and perhaps a few places inside values.
2. *The chain.* Each candidate names the next message: its start, its tag and length bytes,
   and its length. The messages are the candidates from the first one on as long as each names
   the next; the last names where the fields after the messages begin, and no other candidate
   may lie before that point (one that does sits inside a value, and the scan declines).
3. *The fields.* In every message at once: ``messageId``, ``checkSum``, ``payLoadData`` and
   ``flag``, each tag in number order as protobuf writers put them, the numbers decoded with
   :mod:`~pulsar_spark.common.varints` (a broker's ids take nine bytes), the last field ending
   exactly where the message does.

The scan declines (:func:`scan_messages` returns None) for anything else: fields in another
order, ids of nine bytes and of fewer in one reply, a negative checksum, a message or value
of 16 KiB or more (its length takes three bytes; such replies hold few messages), a flag over
127, a value that looks like a message at the wrong place. The caller then reads the reply
through the protobuf runtime, with the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.varints import byte_words, decode_nine, decode_words, read_varint

_MESSAGE = 0x22  # field 4 of GetMessageResponseB2C, length-delimited
# The tags of TransferedMessage's fields, in number order.
_ID, _CHECKSUM, _PAYLOAD, _FLAG = 0x08, 0x10, 0x1A, 0x20
# The tags of the fields before the messages: success and errCode (varints), errMsg (bytes).
_LEADING_NUMBERS, _LEADING_TEXT = (0x08, 0x10), 0x1A
# Zero bytes after the reply, so that an eight-byte word can be read at any of its positions.
_PADDING = bytes(16)
_MORE = 0x80  # a varint byte with this bit set is followed by another

_I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True, slots=True)
class ScannedMessages:
    """The messages of a reply: they lie in ``data[first:after]``; message i's value is
    ``data[starts[i]:ends[i]]``."""

    first: int
    after: int
    ids: list[int]
    checksums: npt.NDArray[np.uint64]
    flags: _U8
    starts: _I64
    ends: _I64


def scan_messages(data: bytes) -> ScannedMessages | None:
    """The messages of the serialized GetMessage reply ``data``; None when the reply holds
    none or the scan declines (see the module docstring)."""
    first = _first_message(data)
    if first is None:
        return None
    buf = np.frombuffer(data + _PADDING, dtype=np.uint8)
    starts = first + np.flatnonzero(buf[first : len(data)] == _MESSAGE)
    sizes, size_bytes = _short_varints(buf, starts + 1)
    body = starts + 1 + size_bytes
    looks = (size_bytes > 0) & (buf[body] == _ID)
    starts, body = starts[looks], body[looks]
    ends = body + sizes[looks]
    if len(starts) == 0 or starts[0] != first:
        return None
    linked = ends[:-1] == starts[1:]
    count = len(starts) if linked.all() else int(np.argmin(linked)) + 1
    after = int(ends[count - 1])
    if after > len(data) or (count < len(starts) and starts[count] < after):
        return None  # the last message runs past the reply, or a candidate lies inside one
    return _fields(buf, byte_words(buf), body[:count], ends[:count], first=first, after=after)


def _first_message(data: bytes) -> int | None:
    """Where the first message begins, after the leading fields; None when the reply holds
    none or is laid out otherwise."""
    pos = 0
    while pos < len(data):
        tag = data[pos]
        if tag == _MESSAGE:
            return pos
        if tag in _LEADING_NUMBERS:
            _, pos = read_varint(data, pos + 1)
        elif tag == _LEADING_TEXT:
            length, pos = read_varint(data, pos + 1)
            pos += length
        else:
            return None
    return None


def _short_varints(buf: _U8, at: _I64) -> tuple[_I64, _I64]:
    """The varints of one or two bytes at ``at``, and their sizes (0 for a longer one)."""
    low = buf[at].astype(np.int64)
    high = buf[at + 1].astype(np.int64)
    one = low < _MORE
    values = np.where(one, low, (low & (_MORE - 1)) | (high << 7))
    sizes = np.where(one, 1, np.where(high < _MORE, 2, 0))
    return values, sizes


def _ids(
    buf: _U8, words: npt.NDArray[np.uint64], at: _I64
) -> tuple[npt.NDArray[np.uint64], _I64] | None:
    """The message ids at ``at`` and their sizes: all of at most eight bytes, or all of nine
    (ids from 2**56 on, as brokers make them); None otherwise."""
    ids, sizes = decode_words(words[at])
    if sizes.all():
        return ids, sizes
    if sizes.any():
        return None
    nine = decode_nine(words[at], buf[at + 8])
    return None if nine is None else (nine, np.full(len(at), 9, dtype=np.int64))


def _fields(
    buf: _U8, words: npt.NDArray[np.uint64], body: _I64, ends: _I64, *, first: int, after: int
) -> ScannedMessages | None:
    """The four fields of the messages whose bytes run from ``body`` to ``ends``."""
    found = _ids(buf, words, body + 1)
    if found is None:
        return None
    ids, id_bytes = found
    at = body + 1 + id_bytes
    if not (at < ends).all() or not (buf[at] == _CHECKSUM).all():
        return None
    checksums, checksum_bytes = decode_words(words[at + 1])
    at = at + 1 + checksum_bytes
    if not checksum_bytes.all() or not (at < ends).all() or not (buf[at] == _PAYLOAD).all():
        return None
    lengths, length_bytes = _short_varints(buf, at + 1)
    starts = at + 1 + length_bytes
    value_ends = starts + lengths
    if not length_bytes.all() or not (value_ends + 2 == ends).all():
        return None  # the flag's tag and its one byte end each message
    flags = buf[value_ends + 1]
    if not (buf[value_ends] == _FLAG).all() or not (flags < _MORE).all():
        return None
    return ScannedMessages(first, after, ids.tolist(), checksums, flags, starts, value_ends)
