"""Message columns to Arrow record batches, bounded in rows and bytes.

A :class:`RecordBatchBuilder` collects the :class:`MessageColumns` of consecutive entries of one
partition and turns them into one ``pa.RecordBatch`` of :data:`ARROW_SCHEMA` whenever the rows
or value bytes reach their limit, so memory stays flat however large the topic is. Columns are
assembled from whole arrays (numpy concatenation, repeated constants), with no work per row in
Python.

Values, keys and property strings arrive as :class:`Spans` into the entries' payloads, and each
string column is laid out in one of three ways (:class:`_StringColumns`):

- where every entry's strings in the column lie end to end in its buffer (a run of one-message
  entries) or are of one length (same-size values, a key or a property a whole batch shares),
  numpy copies just the strings straight from each entry's own buffer into the column's data:
  one copy per entry, or per run of neighbouring entries decoded together into one buffer, of
  the bytes as they lie, strided where the strings are at one distance from each other, else a
  gather of fixed-size items (:func:`_copies`, :func:`_merged`);
- any other column is taken by Arrow (:func:`binary_array`): where entries read together share a
  buffer, in runs of at least :data:`COPY_MIN_ROWS` strings, one call per run from that buffer
  as it lies, the runs' arrays then concatenated (:func:`_shared_runs`); else in one call from
  the buffers the column points into joined end to end (:class:`_Payloads`). Only the buffers
  of columns taken that way are joined, and none when no column is: a join copies every byte
  of the entries, a concatenation only the strings.

Entries too small to pay for a copy each (fewer than :data:`COPY_MIN_ROWS` rows on average)
are taken by Arrow. Strings that are not UTF-8 where Arrow needs text (property names and
values) are read as Java reads them: undecodable bytes become U+FFFD.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.arrow.schema import ARROW_SCHEMA, ENCRYPTED_FIELD, MESSAGE_ID_TYPE
from pulsar_spark.common.arrow_types import PROPERTIES_TYPE, TIMESTAMP_TYPE
from pulsar_spark.common.binary_arrays import binary_array, validity_bitmap
from pulsar_spark.common.spans import Spans
from pulsar_spark.protocol.messages import MessageColumns, PropertyColumns, Text

if TYPE_CHECKING:
    from pulsar_spark.arrow.key_values import RowDecoder

DEFAULT_MAX_ROWS = 65_536
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


class RecordBatchBuilder:
    """Accumulates entries of one partition; see the module docstring."""

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        values: RowDecoder | None = None,
        encrypted_column: bool = False,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.values = values
        self.encrypted_column = encrypted_column
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._pending: list[MessageColumns] = []
        self._rows = 0
        self._bytes = 0

    def add(self, columns: MessageColumns) -> pa.RecordBatch | None:
        """Add decoded messages (one entry's, or a run's or group's); return a batch when the
        limits are reached."""
        self._pending.append(columns)
        self._rows += columns.count
        self._bytes += columns.values.total
        if self._rows >= self.max_rows or self._bytes >= self.max_bytes:
            return self.flush()
        return None

    def flush(self) -> pa.RecordBatch | None:
        """The batch of everything added since the last one, or None if nothing was."""
        if not self._pending:
            return None
        batch = to_record_batch(
            self._pending, self.topic, self.partition, self.values, self.encrypted_column
        )
        self._pending, self._rows, self._bytes = [], 0, 0
        return batch


def record_batches(
    entries: Iterable[MessageColumns],
    topic: str,
    partition: int,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    values: RowDecoder | None = None,
    encrypted_column: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Group a stream of entries into bounded record batches (``value`` typed by ``values``;
    with ``encrypted_column``, the ``encrypted`` column last)."""
    builder = RecordBatchBuilder(
        topic,
        partition,
        max_rows=max_rows,
        max_bytes=max_bytes,
        values=values,
        encrypted_column=encrypted_column,
    )
    for columns in entries:
        batch = builder.add(columns)
        if batch is not None:
            yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch


def to_record_batch(
    parts: Sequence[MessageColumns],
    topic: str,
    partition: int,
    values: RowDecoder | None = None,
    encrypted_column: bool = False,
) -> pa.RecordBatch:
    """One record batch of :data:`ARROW_SCHEMA` from the entries in ``parts``; with ``values``,
    of its schema with ``value`` (and for a KeyValue topic ``key``) decoded to its types; with
    ``encrypted_column``, with the ``encrypted`` column last."""
    counts = np.fromiter((p.count for p in parts), dtype=np.int64, count=len(parts))
    rows = int(counts.sum())
    strings = _StringColumns(parts)
    value = strings.binary(strings.values)
    key = pa.nulls(rows, pa.binary()) if strings.keys is None else strings.binary(strings.keys)
    schema = ARROW_SCHEMA
    if values is not None:
        versions = [v for p in parts for v in p.schema_versions()]
        key, value = values.decode_columns(key, value, versions)
        schema = values.arrow_schema
    arrays = [
        key,
        value,
        _constant_string(topic, rows),
        pa.array(np.full(rows, partition, dtype=np.int32)),
        _message_ids(parts, counts),
        _timestamps(_entry_column(parts, counts, "publish_time"), null_zero=False),
        _timestamps(np.concatenate([p.event_time for p in parts]), null_zero=True),
        _properties(strings, rows),
        _entry_texts(parts, counts, "producer_name"),
        pa.array(np.concatenate([p.sequence_id for p in parts])),
        _entry_texts(parts, counts, "replicated_from"),
    ]
    if encrypted_column:
        arrays.append(_encrypted(parts, rows))
        schema = schema.append(ENCRYPTED_FIELD)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _encrypted(parts: Sequence[MessageColumns], rows: int) -> pa.Array:
    """The ``encrypted`` flags of every row (false where a part has none)."""
    if all(p.encrypted is None for p in parts):
        return pa.array(np.zeros(rows, dtype=np.bool_))
    return pa.array(
        np.concatenate(
            [
                np.zeros(p.count, dtype=np.bool_) if p.encrypted is None else p.encrypted
                for p in parts
            ]
        )
    )


# Below this many rows per entry, on average, a column is not copied entry by entry: the
# Python cost of one copy per entry (about 1 us) would exceed what it saves over the joined
# buffers (measured on 100-byte values: 64 rows an entry 20% slower, 128 rows 5% faster).
COPY_MIN_ROWS = 128


class _Column:
    """The spans of one string column over every entry of a record batch, end to end."""

    def __init__(self, spans: Sequence[Spans]) -> None:
        self.spans = spans
        count = len(spans)
        self.counts = np.fromiter(map(len, spans), np.int64, count)
        self.starts = np.concatenate([s.starts for s in spans])
        self.lengths = np.concatenate([s.lengths for s in spans])
        self.valid = None
        if any(s.valid is not None for s in spans):
            self.valid = np.concatenate([_valid(s) for s in spans])
        self.copies = _copies(self.starts, self.lengths, self.counts, spans)
        self.runs = None if self.copies is not None else _shared_runs(spans, self.counts)

    def __len__(self) -> int:
        return len(self.starts)

    def taken(self) -> pa.Array:
        """The strings of a column :func:`_shared_runs` cuts into runs: the strings of each run
        taken by Arrow from the buffer the run shares, the runs' arrays then concatenated."""
        assert self.runs is not None
        firsts = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=firsts[1:])
        arrays = []
        for first, stop in self.runs:
            rows = slice(int(firsts[first]), int(firsts[stop]))
            valid = None if self.valid is None else self.valid[rows]
            buffer = self.spans[first].buffer
            arrays.append(binary_array(Spans(buffer, self.starts[rows], self.lengths[rows], valid)))
        return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)

    def copied(self) -> pa.Array:
        """The strings of a column :func:`_copies` lays out: one numpy copy per run of entries
        out of one buffer (see :func:`_merged`) of just their strings, into one buffer."""
        assert self.copies is not None
        rows = len(self)
        offsets = np.zeros(rows + 1, dtype=np.int32)
        np.cumsum(self.lengths, out=offsets[1:])
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        at = 0
        for copy in self.copies:
            buffer = self.spans[copy.entry].buffer
            if not copy.width:  # the strings lie end to end
                data[at : at + copy.size] = np.frombuffer(buffer, np.uint8, copy.size, copy.start)
            else:
                kind = f"V{copy.width}"
                if copy.stride is None:  # any starts: a gather of fixed-size items
                    every = np.ndarray((len(buffer) - copy.width + 1,), kind, buffer, 0, (1,))
                    strings = every[self.starts[copy.row : copy.row + copy.strings]]
                else:
                    strings = np.ndarray((copy.strings,), kind, buffer, copy.start, (copy.stride,))
                data[at : at + copy.size].view(kind)[:] = strings
            at += copy.size
        buffers = [validity_bitmap(self.valid), pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(pa.binary(), rows, buffers)


class _Copy(NamedTuple):
    """One copy of a column's strings: ``strings`` of them from the buffer of entry ``entry``
    (its first string the column's row ``row``), all ``width`` bytes long (0: they lie end to
    end), the first at ``start``, each ``stride`` bytes after the one before (None: anywhere,
    a gather); ``size`` bytes in all."""

    entry: int
    strings: int
    width: int
    start: int
    stride: int | None
    size: int
    row: int


def _copies(
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    spans: Sequence[Spans],
) -> list[_Copy] | None:
    """The copies that lay out a column whose every entry's strings lie end to end in its
    buffer (a run of one-message entries) or are of one length (same-size values, a key or a
    property a whole batch shares): a copy of the bytes, a strided copy where the strings are
    each the same distance (0 or more) after the one before, else a gather. None for any other
    column, and where entries are too small for a copy each. Whole-array numpy, no loop; then
    the copies of neighbouring entries out of one buffer are merged (:func:`_merged`)."""
    rows = len(starts)
    used = np.flatnonzero(counts)  # entries with no strings (no properties) need no copy
    if not rows or rows < COPY_MIN_ROWS * len(used):
        return None
    sizes = counts[used]
    first = int(sizes[0])  # the first entry: a cheap early no
    if (
        not (lengths[:first] == lengths[0]).all()
        and not (starts[1:first] == starts[: first - 1] + lengths[: first - 1]).all()
    ):
        return None
    ends = starts + lengths
    firsts = np.cumsum(sizes) - sizes
    follows = np.empty(rows, dtype=np.bool_)  # each string begins where the one before ends
    np.equal(starts[1:], ends[:-1], out=follows[1:])
    follows[firsts] = True
    end_to_end = np.logical_and.reduceat(follows, firsts)
    widths = lengths[firsts]
    fixed = np.logical_and.reduceat(lengths == np.repeat(widths, sizes), firsts)
    if not (end_to_end | fixed).all():
        return None
    second = np.minimum(firsts + 1, rows - 1)
    steps = np.where(sizes > 1, starts[second] - starts[firsts], 0)
    index = np.arange(rows, dtype=np.int64) - np.repeat(firsts, sizes)
    expected = np.repeat(starts[firsts], sizes) + index * np.repeat(steps, sizes)
    strided = np.logical_and.reduceat(starts == expected, firsts) & (steps >= 0)
    totals = np.add.reduceat(lengths, firsts)
    copies = np.flatnonzero(totals)
    each = zip(
        used[copies].tolist(),
        sizes[copies].tolist(),
        np.where(end_to_end, 0, widths)[copies].tolist(),
        starts[firsts[copies]].tolist(),
        steps[copies].tolist(),
        strided[copies].tolist(),
        totals[copies].tolist(),
        firsts[copies].tolist(),
        strict=True,
    )
    return _merged(
        [
            _Copy(entry, count, width, start, step if ok else None, size, row)
            for entry, count, width, start, step, ok, size, row in each
        ],
        spans,
    )


def _shared_runs(
    spans: Sequence[Spans], counts: npt.NDArray[np.int64]
) -> list[tuple[int, int]] | None:
    """Entries ``first`` to ``stop`` (exclusive) that share one buffer (read together), run by
    run, when every run holds :data:`COPY_MIN_ROWS` strings or more: worth an Arrow call each,
    taken from their buffer as it lies. None when some run is smaller."""
    if not spans:
        return None
    bounds = [0, *(i for i in range(1, len(spans)) if spans[i].buffer is not spans[i - 1].buffer)]
    if (np.add.reduceat(counts, bounds) < COPY_MIN_ROWS).any():
        return None
    return list(itertools.pairwise([*bounds, len(spans)]))


def _merged(copies: list[_Copy], spans: Sequence[Spans]) -> list[_Copy]:
    """``copies`` with each run out of one buffer made one copy: strings end to end that go on
    where the copy before stopped, strings of one length a stride apart that do, else strings
    of one length gathered (entries decoded together share their buffer)."""
    merged: list[_Copy] = []
    for copy in copies:
        last = merged[-1] if merged else None
        if (
            last is None
            or spans[copy.entry].buffer is not spans[last.entry].buffer
            or copy.row != last.row + last.strings
            or copy.width != last.width
            or (not copy.width and copy.start != last.start + last.size)
        ):
            merged.append(copy)
            continue
        stride = last.stride
        goes_on = stride is not None and copy.start == last.start + last.strings * stride
        if not goes_on or copy.stride != stride:
            stride = None  # a gather of both
        merged[-1] = last._replace(
            strings=last.strings + copy.strings, stride=stride, size=last.size + copy.size
        )
    return merged


class _StringColumns:
    """The string columns of a record batch (values, keys, property names and values), each
    laid out once (see the module docstring): entry by entry where :func:`_copies` lays it out,
    run by run where :func:`_shared_runs` cuts it, else from :class:`_Payloads`."""

    def __init__(self, parts: Sequence[MessageColumns]) -> None:
        self.values = _Column([p.values for p in parts])
        self.keys = None
        if any(p.key is not None for p in parts):
            self.keys = _Column([_absent(p) if p.key is None else p.key for p in parts])
        self.properties = None
        self.names = self.items = None
        if any(p.properties is not None for p in parts):
            self.properties = [p.properties or _no_properties(p) for p in parts]
            self.names = _Column([c.names for c in self.properties])
            self.items = _Column([c.values for c in self.properties])
        columns = (self.values, self.keys, self.names, self.items)
        self._payloads = _Payloads(
            [c for c in columns if c is not None and c.copies is None and c.runs is None]
        )

    def binary(self, column: _Column) -> pa.Array:
        """The column as a binary array (null where not valid)."""
        if column.copies is not None:
            return column.copied()
        if column.runs is not None:
            return column.taken()
        return self._payloads.array(column)

    def text(self, column: _Column) -> pa.Array:
        """The column as a string array; bytes that are not UTF-8 read as Java reads them."""
        return java_text(self.binary(column))


class _Payloads:
    """Every buffer the given columns point into, end to end: one copy, after which each of
    those columns is one Arrow array made in one call, however many entries."""

    def __init__(self, columns: Sequence[_Column]) -> None:
        self._base: dict[int, int] = {}
        buffers: list[bytes] = []
        size = 0
        for column in columns:
            for spans in column.spans:
                if id(spans.buffer) not in self._base:
                    self._base[id(spans.buffer)] = size
                    buffers.append(spans.buffer)
                    size += len(spans.buffer)
        self._buffer = b"".join(buffers)

    def array(self, column: _Column) -> pa.Array:
        """The column's strings as a binary array, from the joined buffer."""
        spans = column.spans
        base = np.fromiter((self._base[id(s.buffer)] for s in spans), np.int64, len(spans))
        starts = column.starts + np.repeat(base, column.counts)
        return binary_array(Spans(self._buffer, starts, column.lengths, column.valid))


def _absent(part: MessageColumns) -> Spans:
    """Null keys for every message of ``part``: empty spans at the start of the part's own
    payload, so that spans stay in order through the joined buffer."""
    count = part.count
    zeros = np.zeros(count, np.int64)
    return Spans(part.values.buffer, zeros, zeros, np.zeros(count, bool))


def _valid(spans: Spans) -> npt.NDArray[np.bool_]:
    return spans.valid if spans.valid is not None else np.ones(len(spans), dtype=np.bool_)


def java_text(array: pa.Array) -> pa.Array:
    """A binary array as a string array; bytes that are not UTF-8 read as Java reads them
    (undecodable bytes become U+FFFD)."""
    text = array.view(pa.string())
    if array.offset == 0 and _ascii(array):
        return text
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: read as Java reads it
        return pa.array([_text(raw) for raw in array.to_pylist()], pa.string())
    return text


def _ascii(array: pa.Array) -> bool:
    """Whether every byte of a binary array (as built here: data from offset 0) is ASCII, and
    so valid UTF-8: a check several times cheaper than Arrow's full validation."""
    _, offsets, data = array.buffers()
    if data is None or not len(array):
        return True
    used = int(np.frombuffer(offsets, dtype=np.int32)[len(array)])
    return not used or int(np.frombuffer(data, dtype=np.uint8, count=used).max()) < 0x80


def _utf8(text: Text | None) -> bytes:
    """UTF-8 of ``text``: of bytes that are not valid UTF-8, as Java reads them (b"" for None)."""
    if text is None:
        return b""
    return text.encode() if isinstance(text, str) else text.decode("utf-8", "replace").encode()


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def _constant_string(text: str, rows: int) -> pa.Array:
    return _repeated_strings([text], np.array([rows], dtype=np.int64))


def _repeated_strings(texts: Sequence[Text | None], counts: npt.NDArray[np.int64]) -> pa.Array:
    """A string array where ``texts[i]`` (None: null) repeats ``counts[i]`` times. Neighbours
    that are equal are taken as one (entries of one producer): a column of one text, or of
    nulls only, is made without a length per row. Bytes (text that was not valid UTF-8) are
    read as Java reads them."""
    texts, counts = _runs(texts, counts)
    rows = int(counts.sum())
    if all(t is None for t in texts):
        return pa.nulls(rows, pa.string())
    encoded = [_utf8(t) for t in texts]
    offsets = np.zeros(rows + 1, dtype=np.int32)
    if len(encoded) == 1:
        offsets[1:] = np.arange(1, rows + 1, dtype=np.int32) * len(encoded[0])
    else:
        lengths = np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded))
        np.cumsum(np.repeat(lengths, counts), out=offsets[1:])
    data = b"".join(e * int(c) for e, c in zip(encoded, counts, strict=True))
    validity = None
    if any(t is None for t in texts):
        validity = validity_bitmap(np.repeat(np.array([t is not None for t in texts]), counts))
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data), validity)


def _runs(
    texts: Sequence[Text | None], counts: npt.NDArray[np.int64]
) -> tuple[list[Text | None], npt.NDArray[np.int64]]:
    """``texts`` with equal neighbours merged, and the rows each run covers."""
    if len(texts) < 2:
        return list(texts), counts
    starts = [0] + [i for i in range(1, len(texts)) if texts[i] != texts[i - 1]]
    return [texts[i] for i in starts], np.add.reduceat(counts, starts)


def _entry_column(
    parts: Sequence[MessageColumns], counts: npt.NDArray[np.int64], name: str
) -> npt.NDArray[np.int64]:
    """An entry field (``ledger_id``, ``entry_id``, ``publish_time``) for every row."""
    if all(p.rows is None for p in parts):
        return np.repeat([getattr(p.entry, name) for p in parts], counts).astype(np.int64)
    return np.concatenate([p.entry_column(name) for p in parts])


def _entry_texts(
    parts: Sequence[MessageColumns], counts: npt.NDArray[np.int64], name: str
) -> pa.Array:
    """An entry's text (``producer_name``, ``replicated_from``) for every row."""
    if all(p.rows is None for p in parts):
        return _repeated_strings([getattr(p.entry, name) for p in parts], counts)
    texts: list[Text | None] = []
    repeats = []
    for part in parts:
        part_texts, part_repeats = part.entry_texts(name)
        texts += part_texts
        repeats.append(part_repeats)
    return _repeated_strings(texts, np.concatenate(repeats))


def _message_ids(parts: Sequence[MessageColumns], counts: npt.NDArray[np.int64]) -> pa.Array:
    ledgers = _entry_column(parts, counts, "ledger_id")
    entries = _entry_column(parts, counts, "entry_id")
    batch = np.concatenate([p.batch_index for p in parts]).astype(np.int32, copy=False)
    return pa.StructArray.from_arrays(
        [pa.array(ledgers), pa.array(entries), pa.array(batch)],
        fields=list(MESSAGE_ID_TYPE),
    )


def _timestamps(millis: npt.NDArray[np.int64], *, null_zero: bool) -> pa.Array:
    mask = (millis == 0) if null_zero else None
    if mask is not None and mask.all():  # no producer set an event time
        return pa.nulls(len(millis), TIMESTAMP_TYPE)
    return pa.array(millis.astype(np.int64) * 1000, type=TIMESTAMP_TYPE, mask=mask)


def _properties(strings: _StringColumns, rows: int) -> pa.Array:
    columns, names, items = strings.properties, strings.names, strings.items
    if columns is None or names is None or items is None:
        offsets = np.zeros(rows + 1, dtype=np.int32)
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), empty, empty, type=PROPERTIES_TYPE)
    pairs = np.fromiter((c.offsets[-1] for c in columns), np.int64, len(columns))
    rows_each = np.fromiter((len(c.offsets) - 1 for c in columns), np.int64, len(columns))
    ends = np.concatenate([c.offsets[1:] for c in columns])
    offsets = np.zeros(rows + 1, dtype=np.int32)
    offsets[1:] = ends + np.repeat(np.cumsum(pairs) - pairs, rows_each)
    return pa.MapArray.from_arrays(
        pa.array(offsets),
        strings.text(names),
        strings.text(items),
        type=PROPERTIES_TYPE,
    )


def _no_properties(part: MessageColumns) -> PropertyColumns:
    """No pairs for any message of ``part``, pointing into the part's own payload."""
    nothing = Spans(part.values.buffer, np.zeros(0, np.int64), np.zeros(0, np.int64))
    return PropertyColumns(np.zeros(part.count + 1, dtype=np.int64), nothing, nothing)
