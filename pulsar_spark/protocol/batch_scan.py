"""Reading every record of a batch at once, with numpy.

How this works
--------------
Where record i+1 begins is known only once record i's SingleMessageMetadata (SMM) has been
read: the record is ``[u32 size][SMM][payload]`` and the payload's size is inside the SMM. So a
plain decoder loops over the messages in Python (:mod:`batch_walk`). This one does not:

1. *Candidates.* A record begins with its SMM's size as a big-endian u32; SMMs are smaller than
   64 KiB, so the u32 begins with two zero bytes, and the SMM's first byte is the tag of field
   1, 2 or 3 (protobuf writers put fields in number order, and payload_size, field 3, is
   required). numpy finds every offset that looks like that: all the records, and perhaps a
   few places inside payloads.
2. *Lockstep.* All candidates are read at once, one field per round: the tag, then a varint
   (a number, or a string's length). A candidate drops out when its bytes are not an SMM whose
   fields come in increasing number order (field 1, the properties, may repeat) and end
   exactly at its size (nor does one holding a SingleMessageMetadata field sent with another
   wire type, which protobuf and the walk skip); a false candidate drops out within a round or
   two. When every SMM read the same field in every round (one producer writes its records
   alike), each round's numbers and string starts are that field's column as they are;
   otherwise every field read goes to its cell of a per-candidate table.
3. *The chain.* Each remaining candidate names the next record: its start + 4 + SMM size +
   payload_size. If exactly ``count`` remain, the first at 0, each naming the next and the last
   the end of the batch, they are the batch. Otherwise the scan declines (returns None) and the
   walk decodes the batch, with the same result: SMMs written out of order or over 64 KiB,
   numbers over 2**56, or payloads that themselves look like a chain of records.
4. *Properties.* Each KeyValue is a name (field 1) and a value (field 2), read the same way for
   all properties at once; any other layout is also left to the walk.

Only field positions and numbers come out (:class:`BatchFields`); nothing is copied.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.varints import byte_words, decode_words
from pulsar_spark.protocol.batch_fields import BatchFields

_U64 = npt.NDArray[np.uint64]
_I64 = npt.NDArray[np.int64]
_Index = npt.NDArray[np.intp]
_Fields = tuple[_Index, npt.NDArray[np.uint8], _U64, _I64]  # candidate, tag, number, string start

_PROPERTY = 0x0A  # field 1, a KeyValue; the one repeated field
_KEY, _PAYLOAD_SIZE, _COMPACTED_OUT, _EVENT_TIME = 2, 3, 4, 5  # field numbers from here on
_KEY_B64, _SEQUENCE_ID, _NULL_VALUE, _NULL_KEY = 6, 8, 9, 10
_PAIR_NAME, _PAIR_VALUE = 0x0A, 0x12  # the tags of KeyValue.key and KeyValue.value
_FIELDS = 16  # one-byte tags hold fields 1 to 15
# The wire type of each SingleMessageMetadata field (-1: not one of its fields): 2 for the
# properties, key and ordering key, 0 for the numbers and flags.
_WIRE_TYPES = np.array([-1, 2, 2, 0, 0, 0, 0, 2, 0, 0, 0, -1, -1, -1, -1, -1])


def _tag_tables() -> tuple[npt.NDArray[np.bool_], _I64, _I64, npt.NDArray[np.bool_]]:
    """Lookup tables indexed by tag byte (``state * 256 + tag`` for the first).

    - may the tag come next: a one-byte tag, varint or length-delimited (of the wire type its
      field has, when it is one of SingleMessageMetadata's), whose field number exceeds the
      state (the last field number read; properties may repeat);
    - the state after it, times 256;
    - 1 for a length-delimited field, else 0;
    - may an SMM begin with it: fields 1, 2 or 3 in field order.
    """
    tags = np.arange(256)
    field, wire_type = tags >> 3, tags & 7
    known = _WIRE_TYPES[np.minimum(field, _FIELDS - 1)]
    readable = (tags < 0x80) & (field > 0) & ((wire_type == 0) | (wire_type == 2))
    readable &= (known < 0) | (known == wire_type)  # protobuf skips a known one sent otherwise
    state = np.arange(_FIELDS)[:, None]
    may_follow = (readable & (field > state)).ravel()
    after = np.where(readable, field - (field == 1), 0) * 256
    opening = np.isin(tags, (0x0A, 0x12, 0x18))
    return may_follow, after.astype(np.intp), (wire_type == 2).astype(np.int64), opening


_MAY_FOLLOW, _STATE_AFTER, _LENGTH_DELIMITED, _OPENING = _tag_tables()


class _Bytes:
    """The payload as bytes, and as the little-endian uint64 word at every offset up to the
    last eight bytes (strided views, no copy)."""

    def __init__(self, data: bytes) -> None:
        self.size = len(data)
        self.u8 = np.frombuffer(data, dtype=np.uint8)
        self.u64 = byte_words(data)

    def varints(self, at: _I64) -> tuple[_U64, _I64 | int]:
        """The varints that begin at offsets ``at``, and their lengths (0: longer than eight
        bytes, which no field read here needs). Offsets past the end (where only a malformed
        SMM reads) read the last byte."""
        first = np.take(self.u8, at, mode="clip")
        if (first < 0x80).all():
            return first.astype(np.uint64), 1
        last = self.size - 8
        if at.max() <= last:
            return decode_words(self.u64[at])
        # Some begin within the last eight bytes: shift the last word into place for them.
        word_at = np.minimum(at, last)
        past = np.minimum(at, self.size) - word_at
        return decode_words(self.u64[word_at] >> (past * 8).astype(np.uint64))


def scan_batch(data: bytes, count: int, base_sequence: int) -> BatchFields | None:
    """The fields of the ``count`` records in ``data``, or None to leave them to the walk."""
    return scan_batches(data, [len(data)], [count], [base_sequence])


def scan_batches(
    data: bytes, sizes: Sequence[int], counts: Sequence[int], base_sequences: Sequence[int]
) -> BatchFields | None:
    """The fields of every record of several batches laid end to end in ``data`` (batch k:
    ``sizes[k]`` bytes, ``counts[k]`` records, the batch's sequence id ``base_sequences[k]``),
    in one scan whose fixed cost is paid once; positions are into ``data``, and
    :meth:`BatchFields.split` cuts them per batch. None when any of them is left to the walk
    (then each can be scanned alone)."""
    total = sum(counts)
    if len(data) < 8:
        return None
    raw = _Bytes(data)
    starts, smm_end = _candidates(raw)
    if len(starts) < total:
        return None
    table = _read_smms(raw, starts + 4, smm_end)
    if table is None:
        return None
    if table.rows is not None:
        starts, smm_end = starts[table.rows], smm_end[table.rows]
    payload_size = table.number(_PAYLOAD_SIZE)
    chain = _chain(starts, smm_end + payload_size, table.has(_PAYLOAD_SIZE), raw.size, total)
    if chain is None:
        return None
    firsts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=firsts[1:])
    pick = _picker(chain, len(starts))
    if len(counts) > 1:
        # The chain crossed every boundary between batches: at the record each batch counts?
        boundaries = np.cumsum(np.array(sizes[:-1], dtype=np.int64))
        if not np.array_equal(pick(starts)[firsts[1:]], boundaries):
            return None
    pairs = _pairs(raw, *table.property_bounds(chain))
    if pairs is None:
        return None
    offsets, name_start, name_length, item_start, item_length = pairs
    # Where a record has no sequence id of its own: its batch's, plus its index in the batch.
    default = np.arange(total, dtype=np.uint64) + np.repeat(
        np.array(base_sequences, dtype=np.uint64) - firsts.astype(np.uint64),
        np.array(counts, dtype=np.int64),
    )
    return BatchFields(
        value_start=pick(smm_end),
        value_length=pick(payload_size),
        null_value=pick(table.flag(_NULL_VALUE)),
        key_start=pick(table.start(_KEY)),
        key_length=pick(table.number(_KEY)),
        has_key=pick(table.has(_KEY)),
        key_b64=pick(table.flag(_KEY_B64)),
        null_key=pick(table.flag(_NULL_KEY)),
        event_time=pick(table.number(_EVENT_TIME)),
        sequence_id=np.where(
            pick(table.has(_SEQUENCE_ID)),
            pick(table.number(_SEQUENCE_ID)),
            default.view(np.int64),
        ),
        compacted_out=pick(table.flag(_COMPACTED_OUT)),
        property_offsets=offsets,
        name_start=name_start,
        name_length=name_length,
        item_start=item_start,
        item_length=item_length,
    )


KEPT_MASK_BYTES = 16 * 1024 * 1024
"""The largest mask room kept for reuse; larger scans get a new array each time."""

_ROOMS: list[npt.NDArray[np.bool_]] = []
"""Mask rooms not in use. New arrays the size of the batches each time cost more in fresh pages
from the allocator than the scan's work on them, so each scan takes a room here and puts it
back. ``list.pop`` and ``list.append`` are atomic, so scans on several threads at once each get
a room of their own."""


def _take_room(size: int) -> npt.NDArray[np.bool_]:
    try:
        room = _ROOMS.pop()
    except IndexError:
        room = np.zeros(0, dtype=np.bool_)
    return room if len(room) >= size else np.empty(size, dtype=np.bool_)


def _give_back(room: npt.NDArray[np.bool_]) -> None:
    if len(room) <= KEPT_MASK_BYTES:
        _ROOMS.append(room)


def _candidates(raw: _Bytes) -> tuple[_I64, _I64]:
    """Offsets that may begin a record: two zero bytes, two more (the SMM's size, not 0 and
    within the batch), then the tag an SMM can begin with; and where each one's SMM would end."""
    end = raw.size - 4
    if end <= 0:
        nothing = np.zeros(0, dtype=np.int64)
        return nothing, nothing
    room = _take_room(2 * end + 1)
    try:
        masks = room[: 2 * end + 1]
        zero = np.equal(raw.u8[: end + 1], 0, out=masks[: end + 1])
        # Pairs of zero bytes, found before the positions are listed: listing costs about 10 ns
        # a position found, and there are half as many pairs as zero bytes.
        at = np.flatnonzero(np.logical_and(zero[:-1], zero[1:], out=masks[end + 1 :]))
    finally:
        _give_back(room)
    smm_end = at + 4 + ((raw.u8[at + 2].astype(np.int64) << 8) | raw.u8[at + 3])
    plausible = (smm_end > at + 4) & (smm_end <= raw.size) & _OPENING[raw.u8[at + 4]]
    return at[plausible].astype(np.int64), smm_end[plausible]


_State = _Index | np.intp  # per candidate, or one for all: 256 x the last field number read


def _read_smms(raw: _Bytes, begin: _I64, end: _I64) -> _FieldTable | None:
    """Read all SMMs in lockstep, one field per round (see the module docstring). Returns the
    fields of the candidates whose bytes are an SMM; None when none are."""
    rounds: list[_Fields] = []
    failed: list[_Index] = []
    who = np.arange(len(begin), dtype=np.intp)
    pos, stop = begin, end
    state: _State = np.intp(0)
    while len(who):
        tag = raw.u8[pos]
        after_tag = pos + 1
        value, length = raw.varints(after_tag)
        start = after_tag + length
        following, allowed, state = _step(tag, value, start, state)
        rounds.append((who, tag, value, start))
        going = following < stop
        if isinstance(length, int) and going.all() and allowed.all():
            pos = following  # the usual round: a field every candidate may read, none the last
            continue
        ok = allowed & (following <= stop)
        if not isinstance(length, int):
            ok &= length > 0
        if not ok.all():
            failed.append(who[~ok])
        going &= ok
        if going.all():
            pos = following
            continue
        kept = np.flatnonzero(going)
        who, pos, stop = who[kept], following[kept], stop[kept]
        if not isinstance(state, np.intp):
            state = state[kept]
    good = None
    if failed:
        good = np.ones(len(begin), dtype=np.bool_)
        good[np.concatenate(failed)] = False
        if not good.any():
            return None
    alike = _alike(rounds, good, len(begin))
    if alike is not None:
        return alike
    who, tag, value, start = (np.concatenate(column) for column in zip(*rounds, strict=True))
    if good is not None:
        keep = np.flatnonzero(good[who])
        who, tag, value, start = who[keep], tag[keep], value[keep], start[keep]
    return _Scattered((who, tag, value, start), len(begin))


def _alike(
    rounds: list[_Fields], good: npt.NDArray[np.bool_] | None, candidates: int
) -> _Uniform | None:
    """The SMMs' fields as a :class:`_Uniform` table when every round read the same field of
    every SMM (candidates that turned out not to be SMMs left aside); else None."""
    if good is None:
        if all(len(who) == candidates and _same(tag) for who, tag, _, _ in rounds):
            return _Uniform(rounds, None)
        return None
    smms = np.flatnonzero(good)
    theirs = []
    for who, tag, value, start in rounds:
        mine = np.flatnonzero(good[who])
        if not len(mine):
            continue  # a round only candidates that are not SMMs went on to
        if len(mine) != len(smms) or not _same(tag[mine]):
            return None
        theirs.append((who[mine], tag[mine], value[mine], start[mine]))
    return _Uniform(theirs, smms)


def _same(tag: npt.NDArray[np.uint8]) -> bool:
    return bool((tag == tag[0]).all())


def _step(
    tag: npt.NDArray[np.uint8], value: _U64, start: _I64, state: _State
) -> tuple[_I64, npt.NDArray[np.bool_] | np.bool_, _State]:
    """Where each field read this round ends, whether it may follow the last one, and the
    state after it. Most rounds read the same field in every SMM: then with scalars."""
    first = tag[0]
    if (tag == first).all():
        following = start + value.view(np.int64) if _LENGTH_DELIMITED[first] else start
        return following, _MAY_FOLLOW[state + first], _STATE_AFTER[first]
    following = start + value.view(np.int64) * _LENGTH_DELIMITED[tag]
    return following, _MAY_FOLLOW[state + tag], _STATE_AFTER[tag]


_Bounds = tuple[_I64, _I64, _I64]  # per-message offsets into the pairs; each pair's start, end


class _FieldTable(ABC):
    """The last number and string start of every field 2 to 15 of every candidate, and where
    the properties (field 1, which repeats) lie. Its rows are the candidates, or those that
    ``rows`` names."""

    rows: _Index | None

    @abstractmethod
    def number(self, field: int) -> _I64: ...

    @abstractmethod
    def start(self, field: int) -> _I64: ...

    @abstractmethod
    def has(self, field: int) -> npt.NDArray[np.bool_]: ...

    def flag(self, field: int) -> npt.NDArray[np.bool_]:
        set_: npt.NDArray[np.bool_] = self.number(field) != 0
        return set_

    @abstractmethod
    def property_bounds(self, chain: _Index) -> _Bounds:
        """For the records ``chain`` names: offsets of each one's KeyValues, grouped by record
        in their order, and where each KeyValue begins and ends."""


class _Uniform(_FieldTable):
    """Every SMM has the same fields in the same order (the usual case: one producer writes
    every record alike): round r read the same field of all of them, so each round's arrays
    are that field's column as they are. Its rows are the SMMs: candidates that turned out
    not to be one are left out (``rows`` names the others)."""

    def __init__(self, rounds: list[_Fields], rows: _Index | None) -> None:
        self.rows = rows
        self._candidates = len(rounds[0][0])
        self._columns = {int(tag[0]) >> 3: (value, start) for _, tag, value, start in rounds}
        self._properties = [r for r in rounds if r[1][0] == _PROPERTY]

    def number(self, field: int) -> _I64:
        column = self._columns.get(field)
        return np.zeros(self._candidates, np.int64) if column is None else column[0].view(np.int64)

    def start(self, field: int) -> _I64:
        column = self._columns.get(field)
        return np.zeros(self._candidates, np.int64) if column is None else column[1]

    def has(self, field: int) -> npt.NDArray[np.bool_]:
        return np.full(self._candidates, field in self._columns)

    def property_bounds(self, chain: _Index) -> _Bounds:
        per_message = len(self._properties)
        if not per_message:
            nothing = np.zeros(0, dtype=np.int64)
            return np.zeros(len(chain) + 1, dtype=np.int64), nothing, nothing
        offsets = np.arange(0, (len(chain) + 1) * per_message, per_message)
        pick = _picker(chain, self._candidates)
        begin = np.column_stack([pick(r[3]) for r in self._properties])
        size = np.column_stack([pick(r[2]) for r in self._properties])
        return offsets, begin.ravel(), begin.ravel() + size.view(np.int64).ravel()


class _Scattered(_FieldTable):
    """Candidates whose fields differ: every field read goes to its cell of a table."""

    def __init__(self, fields: _Fields, candidates: int) -> None:
        who, tag, value, start = fields
        self.rows = None
        self._fields = fields
        self._candidates = candidates
        cell = who * _FIELDS + (tag >> 3)
        size = candidates * _FIELDS
        self._number = np.zeros(size, dtype=np.int64)
        self._number[cell] = value.view(np.int64)
        self._start = np.zeros(size, dtype=np.int64)
        self._start[cell] = start
        self._has = np.zeros(size, dtype=np.bool_)
        self._has[cell] = True

    def number(self, field: int) -> _I64:
        return self._number[field::_FIELDS]

    def start(self, field: int) -> _I64:
        return self._start[field::_FIELDS]

    def has(self, field: int) -> npt.NDArray[np.bool_]:
        return self._has[field::_FIELDS]

    def property_bounds(self, chain: _Index) -> _Bounds:
        who, tag, value, start = self._fields
        count = len(chain)
        found = np.flatnonzero(tag == _PROPERTY)
        offsets = np.zeros(count + 1, dtype=np.int64)
        if not len(found):
            nothing = np.zeros(0, dtype=np.int64)
            return offsets, nothing, nothing
        if self._candidates == count:  # every candidate is a record: candidate i is message i
            owner = who[found]
        else:
            row_of = np.full(self._candidates, -1, dtype=np.intp)
            row_of[chain] = np.arange(count)
            owner = row_of[who[found]]
            found, owner = found[owner >= 0], owner[owner >= 0]
        per_message = np.bincount(owner, minlength=count)
        np.cumsum(per_message, out=offsets[1:])
        found = found[_by_message(owner, per_message)]
        begin = start[found]
        return offsets, begin, begin + value[found].view(np.int64)


def _picker(chain: _Index, candidates: int) -> Callable[[npt.NDArray[Any]], npt.NDArray[Any]]:
    """Selects the records' rows of a per-candidate column: all of it when every candidate is a
    record (no false ones), in order."""
    if len(chain) == candidates:
        return lambda column: column
    return lambda column: column[chain]


def _chain(
    starts: _I64, following: _I64, sized: npt.NDArray[np.bool_], end: int, count: int
) -> _Index | None:
    """The candidates that form the batch: read as SMMs with a payload size, ``count`` of
    them, the first at 0, each one's ``following`` the next one's start, the last's the end."""
    chain = np.flatnonzero(sized)
    if len(chain) != count:
        return None
    begin, after = starts[chain], following[chain]
    if begin[0] != 0 or after[-1] != end or not (after[:-1] == begin[1:]).all():
        return None
    return chain


def _pairs(
    raw: _Bytes, offsets: _I64, begin: _I64, end: _I64
) -> tuple[_I64, _I64, _I64, _I64, _I64] | None:
    """Per-message offsets into the properties, then where each name and value lies; None when
    a KeyValue is not exactly a name then a value."""
    if not len(begin):
        return offsets, begin, begin, begin, begin
    name = _string(raw, begin, end, _PAIR_NAME)
    if name is None:
        return None
    item = _string(raw, name[0] + name[1], end, _PAIR_VALUE)
    if item is None or not (item[0] + item[1] == end).all():
        return None
    return offsets, name[0], name[1], item[0], item[1]


def _by_message(owner: _Index, per_message: _I64) -> _Index:
    """The order that groups properties by message, keeping each message's in order. They were
    read round by round: when every message has the same number, that is a transposition."""
    same = per_message[0]
    if len(owner) == same * len(per_message) and (per_message == same).all():
        grouped: _Index = np.arange(len(owner)).reshape(same, len(per_message)).T.ravel()
        return grouped
    return np.argsort(owner, kind="stable")


def _string(raw: _Bytes, at: _I64, end: _I64, tag: int) -> tuple[_I64, _I64] | None:
    """Start and length of the string field with ``tag`` at each ``at``; None when one is
    another field or runs past its ``end``."""
    length, size = raw.varints(at + 1)
    start = at + 1 + size
    lengths = length.view(np.int64)
    ok = (at < end) & (raw.u8[np.minimum(at, raw.size - 1)] == tag) & (start + lengths <= end)
    if not isinstance(size, int):
        ok &= size > 0
    return (start, lengths) if ok.all() else None
