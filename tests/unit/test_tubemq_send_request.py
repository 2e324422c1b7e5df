"""SendMessage frames built many at a time are the frames the protobuf runtime makes."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pulsar_spark.errors import ConfigurationError
from pulsar_spark.tubemq.spark.writer import WINDOW, WINDOW_BYTES, _columns, windows
from pulsar_spark.tubemq.wire import auth, messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import FrameDecoder
from pulsar_spark.tubemq.wire.send_request import SendBatch, SendTemplate, send_columns

CLIENT = "10.1.2.3-4567-1732848000000-1-producer"
PARTITIONS = [("orders", 0), ("t", 10001), ("a_much_longer_topic_name", 2)]
SENT_ADDR = -1062731519  # 192.168.1.1 as TubeMQ's signed int
TEMPLATE = SendTemplate.of(CLIENT, PARTITIONS, SENT_ADDR)

Message = tuple[bytes, int, str | None, str | None]


def request(message: Message, slot: int) -> broker_pb.SendMessageRequestP2B:
    """The request the protobuf runtime serializes for ``message`` to partition ``slot``."""
    value, flag, msg_type, msg_time = message
    topic, partition_id = PARTITIONS[slot]
    return broker_pb.SendMessageRequestP2B(
        clientId=CLIENT,
        topicName=topic,
        partitionId=partition_id,
        data=value,
        flag=flag,
        checkSum=messages.checksum(value),
        sentAddr=SENT_ADDR,
        msgType=msg_type or None,
        msgTime=msg_time or None,
    )


def expected(message: Message, slot: int, serial_no: int, timeout_ms: int = 30_000) -> bytes:
    """The frame :func:`rpc.encode_request` makes of the same request."""
    return rpc.encode_request(serial_no, request(message, slot), timeout_ms=timeout_ms)


def varied(count: int, seed: int = 7) -> list[Message]:
    rng = random.Random(seed)
    sizes = [0, 1, 100, 127, 128, 16_383, 16_384, 9_000]
    return [
        (
            rng.randbytes(rng.choice(sizes)),
            rng.choice([0, 1, 127, 128, 300]),
            rng.choice([None, "", "type", "t" * 200]),
            rng.choice([None, "", "202611290400"]),
        )
        for _ in range(count)
    ]


def test_frames_match_the_runtime_for_varied_messages() -> None:
    """Sizes across varint and chunk boundaries (9,000 and 16,384 bytes take several chunks),
    flags of one and two bytes, with and without type and time, three partitions."""
    rows = varied(120)
    slots = np.array([i % 3 for i in range(len(rows))], dtype=np.int64)
    serials = [1, 2**31 - 1, *range(1_000, 1_118)]
    got = SendBatch(TEMPLATE, slots, send_columns(rows)).encode(serials, b"", 30_000)
    want = [expected(m, int(s), n) for m, s, n in zip(rows, slots, serials, strict=True)]
    assert got == b"".join(want)


def test_one_chunk_frames_match_and_decode() -> None:
    """Messages that fit one chunk take the fully vectorized framing; the frames decode to
    the requests."""
    rows = [(b"v%d" % i * (i % 50), i % 2, None, None) for i in range(300)]
    slots = np.array([(i * 7) % 3 for i in range(300)], dtype=np.int64)
    serials = list(range(5, 305))
    got = SendBatch(TEMPLATE, slots, send_columns(rows)).encode(serials, b"", 10_000)
    want = [expected(m, int(s), n, 10_000) for m, s, n in zip(rows, slots, serials, strict=True)]
    assert got == b"".join(want)
    requests = [rpc.decode_request(frame) for frame in FrameDecoder().feed(got)]
    assert [r.serial_no for r in requests] == serials
    assert [r.timeout_ms for r in requests] == [10_000] * 300
    assert [r.message.data for r in requests] == [m[0] for m in rows]
    assert [r.message.partitionId for r in requests] == [PARTITIONS[s][1] for s in slots]


def test_signature_appended_is_the_signed_request() -> None:
    """The signature field after the fields is the frame of the request signed with
    :func:`auth.sign` (authInfo is the last field)."""
    signed = auth.identity(auth.Credentials("alice", "secret"), 1_732_848_000_000, 42)
    signature = auth.signed_field(broker_pb.SendMessageRequestP2B, signed)
    rows = varied(20, seed=3)
    slots = np.zeros(20, dtype=np.int64)
    got = SendBatch(TEMPLATE, slots, send_columns(rows)).encode(list(range(20)), signature)
    want = []
    for serial_no, message in enumerate(rows):
        signed_request = request(message, 0)
        auth.sign(signed_request, signed)
        want.append(rpc.encode_request(serial_no, signed_request))
    assert got == b"".join(want)


def test_take_keeps_the_rows_asked_for() -> None:
    rows = varied(40, seed=11)
    columns = send_columns(rows)
    picked = np.array([39, 0, 17, 17, 5], dtype=np.int64)
    taken = columns.take(picked)
    slots = np.array([1, 2, 0, 0, 1], dtype=np.int64)
    got = SendBatch(TEMPLATE, slots, taken).encode([9, 8, 7, 6, 5], b"", 30_000)
    want = [
        expected(rows[int(i)], int(s), n)
        for i, s, n in zip(picked, slots, [9, 8, 7, 6, 5], strict=True)
    ]
    assert got == b"".join(want)


@pytest.mark.parametrize(
    "kind", [pa.binary(), pa.string(), pa.large_binary(), pa.large_string(), pa.binary_view()]
)
def test_value_columns_read_arrow_buffers_in_place(kind: pa.DataType) -> None:
    """A sliced batch of values (no attributes) gives the same frames as its values sent one
    by one, for binary and string columns, 32- and 64-bit offsets."""
    texts = [f"row-{i}-" + "x" * (i % 130) for i in range(200)]
    values = [t.encode() for t in texts]
    column = pa.array(
        texts if pa.types.is_string(kind) or pa.types.is_large_string(kind) else values, kind
    )
    batch = pa.record_batch([column], names=["value"]).slice(37, 120)
    slots = np.arange(120, dtype=np.int64) % 3
    got = SendBatch(TEMPLATE, slots, _columns(batch)).encode(list(range(120)), b"", 30_000)
    want = [expected((values[37 + i], 0, None, None), i % 3, i) for i in range(120)]
    assert got == b"".join(want)


def test_attributes_become_payload_type_and_time() -> None:
    values = pa.array([b"a", b"bb", b"ccc"])
    attributes = pa.array(
        [
            [("k", "v"), ("$msgType$", "order")],
            [],
            [("$msgTime$", "202611290400"), ("x", "1")],
        ],
        pa.map_(pa.string(), pa.string()),
    )
    batch = pa.record_batch([values, attributes], names=["value", "attributes"])
    slots = np.zeros(3, dtype=np.int64)
    got = SendBatch(TEMPLATE, slots, _columns(batch)).encode([1, 2, 3], b"", 30_000)
    first = messages.encode_payload(b"a", "$msgType$=order,k=v")
    third = messages.encode_payload(b"ccc", "$msgTime$=202611290400,x=1")
    want = [
        expected((*first, "order", None), 0, 1),
        expected((b"bb", 0, None, None), 0, 2),
        expected((*third, None, "202611290400"), 0, 3),
    ]
    assert got == b"".join(want)


def test_a_null_value_is_refused() -> None:
    batch = pa.record_batch([pa.array([b"a", None])], names=["value"])
    with pytest.raises(ConfigurationError, match="column 'value': a row has a null value"):
        _columns(batch)


def test_windows_are_cut_by_rows_and_by_bytes() -> None:
    """Windows of WINDOW rows; values past WINDOW_BYTES start a new window, and a value larger
    than that is a window of its own."""
    big = WINDOW_BYTES // 2 + 1
    sizes = [1] * (WINDOW + 10) + [big, big, WINDOW_BYTES * 2, 5, big, 7]
    batch = pa.record_batch([pa.array([b"x" * n for n in sizes])], names=["value"])
    cut = [(w.column("value").offset, w.num_rows) for w in windows(batch)]
    first = WINDOW + 10
    assert cut == [
        (0, WINDOW),
        (WINDOW, 11),  # the 10 small values and the first big one
        (first + 1, 1),  # two big ones exceed WINDOW_BYTES
        (first + 2, 1),  # larger than WINDOW_BYTES alone
        (first + 3, 3),  # 5 + big + 7 bytes fit
    ]
    assert sum(rows for _, rows in cut) == len(sizes)


def test_windows_of_strings_count_their_utf8_bytes() -> None:
    text = "é" * (WINDOW_BYTES // 4)  # two bytes each: half of WINDOW_BYTES
    batch = pa.record_batch([pa.array([text, text, text])], names=["value"])
    assert [w.num_rows for w in windows(batch)] == [2, 1]
