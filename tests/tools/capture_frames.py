"""Capture golden broker->client MESSAGE frames for the codec unit tests.

Run from the repository root (needs ``pulsar-lite`` and ``pulsar-client``)::

    python tests/tools/capture_frames.py            # rewrites tests/data/frames/

What it does:

1. starts a :class:`~pulsar_spark.local.LocalBroker` on a temporary directory;
2. puts a recording TCP proxy (loopback, one thread per direction) in front of it;
3. has the official Python client publish each case in :data:`CASES` to its own topic and
   read it back with a Reader from ``MessageId.earliest``, checking what it decodes;
4. saves, per case, the first MESSAGE frame (``BaseCommand.type == 9``) the broker sent to
   that Reader: the whole frame, starting with its 4-byte total-size prefix;
5. checks every saved frame (type, magic ``0x0e01``, CRC32C, batch layout) and writes
   ``README.md`` describing exactly what each file holds.

pulsar-lite answers Lookup with its own address, which would send the client around the
proxy; the proxy therefore rewrites that URL in LOOKUP_RESPONSE frames (same length, so no
size changes). MESSAGE frames are stored as the broker sent them.

Regenerating changes ``publish_time`` (and so the checksum) of every file; the README is
rewritten with the new values.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "data" / "frames"
RUN_LIMIT_SECONDS = 120.0
READ_TIMEOUT_MS = 10_000

MESSAGE = 9
SUBSCRIBE = 4
PRODUCER = 5
SEND = 6
LOOKUP_RESPONSE = 24
MAGIC_CRC32C = 0x0E01
COMPRESSION_NAMES = {0: "NONE", 1: "LZ4", 2: "ZLIB", 3: "ZSTD", 4: "SNAPPY"}


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Sent:
    """One message as handed to ``Producer.send``/``send_async``."""

    value: bytes | None
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_timestamp: int | None = None


@dataclass(frozen=True)
class Case:
    """One golden file: a topic, producer settings and the messages published to it."""

    file: str
    summary: str
    producer: dict[str, Any]
    messages: tuple[Sent, ...]
    partition: int | None = None  # publish to this partition of a seeded partitioned topic
    name: str = ""  # topic name after "frames-"; defaults to the file name

    @property
    def base_topic(self) -> str:
        return "frames-" + (self.name or self.file.removesuffix(".bin").replace("_", "-"))

    @property
    def topic(self) -> str:
        if self.partition is None:
            return self.base_topic
        return f"{self.base_topic}-partition-{self.partition}"

    @property
    def batched(self) -> bool:
        return bool(self.producer.get("batching_enabled"))


def _batch_case(file: str, compression: str) -> Case:
    messages = tuple(
        Sent(f"msg-{i}".encode(), f"key-{i}", {"i": str(i)}, 1_700_000_000_000 + i)
        for i in range(5)
    )
    return Case(
        file,
        f"batch of 5, compression {compression}",
        _batching(5, compression),
        messages,
    )


def _batching(size: int, compression: str) -> dict[str, Any]:
    return {
        "batching_enabled": True,
        "batching_max_messages": size,
        "batching_max_publish_delay_ms": 1000,
        "compression_type": compression,
    }


CASES: tuple[Case, ...] = (
    Case(
        "single_none.bin",
        "one non-batched message with key, properties and event time",
        {"batching_enabled": False, "compression_type": "NONE"},
        (Sent(b"hello", "k1", {"a": "1", "b": "2"}, 1_700_000_000_123),),
    ),
    _batch_case("batch_none.bin", "NONE"),
    _batch_case("batch_lz4.bin", "LZ4"),
    _batch_case("batch_zlib.bin", "ZLib"),
    _batch_case("batch_zstd.bin", "ZSTD"),
    _batch_case("batch_snappy.bin", "SNAPPY"),
    Case(
        "batch_unicode_key.bin",
        "batch of 3 with non-ASCII keys",
        _batching(3, "NONE"),
        (Sent(b"u0", "ключ"), Sent(b"u1", "鍵"), Sent(b"u2", "🔑")),
    ),
    Case(
        "partition_1.bin",
        "one non-batched message on partition 1 of a 2-partition topic",
        {"batching_enabled": False, "compression_type": "NONE"},
        (Sent(b"on-partition-1", "pk", {"p": "1"}, 1_700_000_000_456),),
        partition=1,
        name="partitioned",
    ),
    Case(
        "null_value.bin",
        "one non-batched message sent with value None",
        {"batching_enabled": False, "compression_type": "NONE"},
        (Sent(None, "nk"),),
    ),
    Case(
        "empty_value.bin",
        "one non-batched message sent with value b''",
        {"batching_enabled": False, "compression_type": "NONE"},
        (Sent(b"", "ek"),),
    ),
)


# ------------------------------------------------------------------ protobuf reading


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos``; return (value, next position)."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """Yield (field number, value) for every field of a protobuf message."""
    pos = 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
            yield number, value
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            yield number, buf[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield number, int.from_bytes(buf[pos : pos + width], "little")
            pos += width
        else:
            raise ValueError(f"unsupported wire type {wire}")


def as_dict(buf: bytes) -> dict[int, list[int | bytes]]:
    """Group a message's fields by number (repeated fields keep their order)."""
    grouped: dict[int, list[int | bytes]] = {}
    for number, value in fields(buf):
        grouped.setdefault(number, []).append(value)
    return grouped


def signed(value: int) -> int:
    """Reinterpret a varint as a signed 64-bit integer (int32 -1 is sent as 10 bytes)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def key_values(entries: list[int | bytes]) -> dict[str, str]:
    pairs = (as_dict(bytes(entry)) for entry in entries)
    return {_text(pair[1][0]): _text(pair[2][0]) for pair in pairs}


def _text(value: int | bytes) -> str:
    assert isinstance(value, bytes)
    return value.decode("utf-8")


def _first(msg: dict[int, list[int | bytes]], number: int, default: Any = None) -> Any:
    return msg.get(number, [default])[0]


# ------------------------------------------------------------------------ crc32c


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ------------------------------------------------------------------- frame parsing


def split_frames(buffer: bytearray) -> list[bytes]:
    """Remove and return every complete frame at the front of ``buffer``."""
    frames = []
    while len(buffer) >= 4:
        total = int.from_bytes(buffer[:4], "big")
        if len(buffer) < 4 + total:
            break
        frames.append(bytes(buffer[: 4 + total]))
        del buffer[: 4 + total]
    return frames


def command_of(frame: bytes) -> tuple[int, dict[int, list[int | bytes]]]:
    """Return (BaseCommand.type, BaseCommand fields) of a whole frame."""
    cmd_size = int.from_bytes(frame[4:8], "big")
    command = as_dict(frame[8 : 8 + cmd_size])
    return int(_first(command, 1)), command


@dataclass
class PayloadFrame:
    """A SEND or MESSAGE frame split into its parts by :func:`parse_payload_frame`."""

    kind: int
    command: dict[int, list[int | bytes]]  # fields of CommandSend / CommandMessage
    checksum: int | None  # None when the frame carries no 0x0e01 magic and checksum
    body: bytes  # [u32 meta_size][MessageMetadata][payload], the part the checksum covers
    metadata: dict[int, list[int | bytes]]
    payload: bytes

    @property
    def compression(self) -> str:
        return COMPRESSION_NAMES[int(_first(self.metadata, 8, 0))]

    @property
    def message_id(self) -> dict[int, list[int | bytes]]:
        return as_dict(bytes(_first(self.command, 2)))


def parse_payload_frame(frame: bytes, kind: int) -> PayloadFrame:
    """Check a SEND/MESSAGE frame's sizes, type and checksum and split it into its parts.

    ``[total][cmd_size][BaseCommand]([0x0e01][crc32c])[meta_size][MessageMetadata][payload]``;
    the magic and checksum are optional in the protocol.
    """
    if int.from_bytes(frame[:4], "big") != len(frame) - 4:
        raise ValueError("total size does not match the frame length")
    found, base = command_of(frame)
    if found != kind:
        raise ValueError(f"BaseCommand.type is {found}, not {kind}")
    pos = 8 + int.from_bytes(frame[4:8], "big")
    checksum = None
    if int.from_bytes(frame[pos : pos + 2], "big") == MAGIC_CRC32C:
        checksum = int.from_bytes(frame[pos + 2 : pos + 6], "big")
        pos += 6
        if crc32c(frame[pos:]) != checksum:
            raise ValueError("CRC32C mismatch")
    meta_size = int.from_bytes(frame[pos : pos + 4], "big")
    return PayloadFrame(
        kind=kind,
        command=as_dict(bytes(_first(base, kind))),  # SEND is field 6, MESSAGE field 9
        checksum=checksum,
        body=frame[pos:],
        metadata=as_dict(frame[pos + 4 : pos + 4 + meta_size]),
        payload=frame[pos + 4 + meta_size :],
    )


def decompress(codec: str, data: bytes, size: int) -> bytes:
    """Undo a payload's compression (LZ4, ZSTD and SNAPPY use the project's codec deps)."""
    if codec == "NONE":
        return data
    if codec == "ZLIB":
        return zlib.decompress(data)
    if codec == "LZ4":
        import lz4.block

        return bytes(lz4.block.decompress(data, uncompressed_size=size))
    if codec == "ZSTD":
        import zstandard

        return bytes(zstandard.ZstdDecompressor().decompress(data, max_output_size=size))
    if codec == "SNAPPY":
        import cramjam

        return bytes(cramjam.snappy.decompress_raw(data))
    raise ValueError(codec)


def split_batch(payload: bytes, count: int) -> list[tuple[dict[int, list[int | bytes]], bytes]]:
    """Split an uncompressed batch into (SingleMessageMetadata fields, value) pairs."""
    entries, pos = [], 0
    for _ in range(count):
        size = int.from_bytes(payload[pos : pos + 4], "big")
        single = as_dict(payload[pos + 4 : pos + 4 + size])
        pos += 4 + size
        value_size = int(_first(single, 3))
        entries.append((single, payload[pos : pos + value_size]))
        pos += value_size
    if pos != len(payload):
        raise ValueError("batch payload has trailing bytes")
    return entries


# ------------------------------------------------------------------ recording proxy


class Recording:
    """Bytes seen on one proxied connection, in each direction."""

    def __init__(self) -> None:
        self.to_broker = bytearray()
        self.to_client: list[bytes] = []  # whole frames, as the broker sent them


class RecordingProxy:
    """A loopback TCP proxy that records traffic and fixes up Lookup answers."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.recordings: list[Recording] = []
        self._sockets: list[socket.socket] = [self._listener]
        broker_url = f"pulsar://127.0.0.1:{upstream_port}".encode()
        proxy_url = f"pulsar://127.0.0.1:{self.port}".encode()
        if len(broker_url) != len(proxy_url):
            raise RuntimeError("proxy and broker ports differ in length; run again")
        self._rewrite = (broker_url, proxy_url)

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream, timeout=10)
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            recording = Recording()
            self.recordings.append(recording)
            self._spawn(self._pump_to_broker, client, upstream, recording)
            self._spawn(self._pump_to_client, upstream, client, recording)

    @staticmethod
    def _spawn(target: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()

    @staticmethod
    def _pump_to_broker(src: socket.socket, dst: socket.socket, rec: Recording) -> None:
        for chunk in _chunks(src):
            rec.to_broker += chunk
            dst.sendall(chunk)
        _shutdown(dst)

    def _pump_to_client(self, src: socket.socket, dst: socket.socket, rec: Recording) -> None:
        pending = bytearray()
        for chunk in _chunks(src):
            pending += chunk
            for frame in split_frames(pending):
                rec.to_client.append(frame)
                is_lookup = command_of(frame)[0] == LOOKUP_RESPONSE
                dst.sendall(frame.replace(*self._rewrite) if is_lookup else frame)
        _shutdown(dst)


def _chunks(sock: socket.socket) -> Iterator[bytes]:
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            return
        if not chunk:
            return
        yield chunk


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)


# ------------------------------------------------------------------ publish & read


def publish(client: pulsar.Client, case: Case) -> None:
    settings = dict(case.producer)
    settings["compression_type"] = getattr(pulsar.CompressionType, settings["compression_type"])
    producer = client.create_producer(
        case.topic, producer_name=f"producer-{case.topic}", send_timeout_millis=10_000, **settings
    )
    if not case.batched:
        for sent in case.messages:
            producer.send(sent.value, **_send_options(sent))
    else:
        _send_batch(producer, case.messages)
    producer.close()


def _send_batch(producer: Any, messages: tuple[Sent, ...]) -> None:
    done = threading.Semaphore(0)
    results: list[Any] = []

    def callback(result: Any, _message_id: Any) -> None:
        results.append(result)
        done.release()

    for sent in messages:
        producer.send_async(sent.value, callback, **_send_options(sent))
    producer.flush()
    for _ in messages:
        if not done.acquire(timeout=10):
            raise RuntimeError("send_async callbacks did not arrive")
    if any(result != pulsar.Result.Ok for result in results):
        raise RuntimeError(f"send_async failed: {results}")


def _send_options(sent: Sent) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if sent.key is not None:
        options["partition_key"] = sent.key
    if sent.properties:
        options["properties"] = dict(sent.properties)
    if sent.event_timestamp is not None:
        options["event_timestamp"] = sent.event_timestamp
    return options


def read_back(client: pulsar.Client, case: Case) -> list[str]:
    """Read the case back with a Reader and check what the official client decodes."""
    reader = client.create_reader(case.topic, pulsar.MessageId.earliest)
    ids = []
    for sent in case.messages:
        message = reader.read_next(READ_TIMEOUT_MS)
        got = (
            message.data(),
            message.partition_key() or None,
            message.properties(),
            message.event_timestamp() or None,
        )
        want = (sent.value or b"", sent.key, sent.properties, sent.event_timestamp)
        if got != want:
            raise RuntimeError(f"{case.file}: client decoded {got}, expected {want}")
        ids.append(str(message.message_id()))
    reader.close()
    return ids


# ------------------------------------------------------------------------ capture


def client_handles(recordings: list[Recording]) -> dict[tuple[int, int, int], str]:
    """Map (connection, SEND or MESSAGE, producer or consumer id) to its topic."""
    handles = {}
    for index, recording in enumerate(recordings):
        for frame in split_frames(bytearray(recording.to_broker)):
            kind, base = command_of(frame)
            if kind == SUBSCRIBE:  # CommandSubscribe: topic = 1, consumer_id = 4
                subscribe = as_dict(bytes(_first(base, SUBSCRIBE)))
                handles[index, MESSAGE, int(_first(subscribe, 4))] = _text(_first(subscribe, 1))
            elif kind == PRODUCER:  # CommandProducer: topic = 1, producer_id = 2
                producer = as_dict(bytes(_first(base, PRODUCER)))
                handles[index, SEND, int(_first(producer, 2))] = _text(_first(producer, 1))
    return handles


def payload_frames(recordings: list[Recording]) -> dict[tuple[int, str], list[bytes]]:
    """SEND frames (client->broker) and MESSAGE frames (broker->client) by (kind, topic)."""
    handles = client_handles(recordings)
    found: dict[tuple[int, str], list[bytes]] = {}
    for index, recording in enumerate(recordings):
        streams = (
            (SEND, split_frames(bytearray(recording.to_broker))),
            (MESSAGE, list(recording.to_client)),
        )
        for kind, frames in streams:
            for frame in frames:
                if command_of(frame)[0] != kind:
                    continue
                owner = int(_first(parse_payload_frame(frame, kind).command, 1))
                found.setdefault((kind, handles[index, kind, owner]), []).append(frame)
    return found


def capture(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from pulsar_spark.local import LocalBroker

    seeds = {c.base_topic: c.partition + 1 for c in CASES if c.partition is not None}
    with LocalBroker.start(partitioned_topics=seeds) as broker:
        watchdog = threading.Timer(RUN_LIMIT_SECONDS, _give_up, args=(broker,))
        watchdog.daemon = True
        watchdog.start()
        proxy = RecordingProxy(broker.port)
        proxy.start()
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        client = pulsar.Client(
            f"pulsar://127.0.0.1:{proxy.port}", operation_timeout_seconds=10, logger=logger
        )
        client_ids = {}
        for case in CASES:
            publish(client, case)
            client_ids[case.file] = read_back(client, case)
        client.close()
        proxy.close()
        watchdog.cancel()
        frames = payload_frames(proxy.recordings)
    write_outputs(out, frames, client_ids)


def _give_up(broker: Any) -> None:
    print(f"capture did not finish within {RUN_LIMIT_SECONDS:g} s", file=sys.stderr)
    broker.stop()
    os._exit(2)


@dataclass
class Captured:
    """The frames kept for one case."""

    case: Case
    message: bytes  # first MESSAGE frame the broker sent to the Reader
    send: bytes  # the SEND frame the official producer wrote
    message_frames_seen: int
    client_ids: list[str]


def write_outputs(
    out: Path, frames: dict[tuple[int, str], list[bytes]], ids: dict[str, list[str]]
) -> None:
    (out / "send").mkdir(parents=True, exist_ok=True)
    captured = [collect(case, frames, ids[case.file]) for case in CASES]
    for item in captured:
        (out / item.case.file).write_bytes(item.message)
        (out / "send" / item.case.file).write_bytes(item.send)
        message_id = parse_payload_frame(item.message, MESSAGE).message_id
        entry = f"{_first(message_id, 1)}:{_first(message_id, 2)}"
        print(f"{item.case.file}: {len(item.message)} bytes, entry {entry}")
    (out / "README.md").write_text(render_readme(captured), encoding="utf-8")


def collect(case: Case, frames: dict[tuple[int, str], list[bytes]], ids: list[str]) -> Captured:
    """Pick and check the frames of one case."""
    topic = "persistent://public/default/" + case.topic
    messages, sends = frames.get((MESSAGE, topic), []), frames.get((SEND, topic), [])
    if not messages or len(sends) != 1:
        raise RuntimeError(f"{case.file}: {len(messages)} MESSAGE and {len(sends)} SEND frames")
    message = parse_payload_frame(messages[0], MESSAGE)
    check_content(case, message)
    if any(parse_payload_frame(other, MESSAGE).body != message.body for other in messages):
        raise RuntimeError(f"{case.file}: the broker re-sent a different entry body")
    if parse_payload_frame(sends[0], SEND).body != message.body:
        raise RuntimeError(f"{case.file}: stored entry differs from what the producer sent")
    return Captured(case, messages[0], sends[0], len(messages), ids)


def check_content(case: Case, frame: PayloadFrame) -> None:
    """Decode the frame's payload and compare it with what was published."""
    if not case.batched:
        if single_payload(frame) != (case.messages[0].value or b""):
            raise RuntimeError(f"{case.file}: unexpected non-batched payload")
        return
    values = [value for _, value in batch_entries(frame)]
    if values != [sent.value for sent in case.messages]:
        raise RuntimeError(f"{case.file}: batch holds {values}")


def single_payload(frame: PayloadFrame) -> bytes:
    return decompress(frame.compression, frame.payload, int(_first(frame.metadata, 9, 0)))


def batch_entries(frame: PayloadFrame) -> list[tuple[dict[int, list[int | bytes]], bytes]]:
    return split_batch(single_payload(frame), int(_first(frame.metadata, 11)))


# ------------------------------------------------------------------------- README

# Field numbers -> names, for the fields the README lists.
METADATA_FIELDS = {
    1: "producer_name",
    2: "sequence_id",
    3: "publish_time",
    4: "properties",
    6: "partition_key",
    8: "compression",
    9: "uncompressed_size",
    11: "num_messages_in_batch",
    12: "event_time",
    24: "highest_sequence_id",
    25: "null_value",
    26: "uuid",
}
SINGLE_FIELDS = {
    1: "properties",
    2: "partition_key",
    3: "payload_size",
    5: "event_time",
    6: "partition_key_b64_encoded",
    8: "sequence_id",
    9: "null_value",
}
MESSAGE_ID_FIELDS = {1: "ledgerId", 2: "entryId", 3: "partition", 4: "batch_index"}
MESSAGE_FIELDS = {1: "consumer_id", 3: "redelivery_count", 5: "consumer_epoch"}
SEND_FIELDS = {1: "producer_id", 2: "sequence_id", 3: "num_messages", 5: "highest_sequence_id"}
TEXT_FIELDS = {"producer_name", "partition_key", "uuid"}
SIGNED_FIELDS = {"partition", "batch_index"}


def present_fields(message: dict[int, list[int | bytes]], names: dict[int, str]) -> str:
    """Every field present in ``message``, named where known, in field-number order."""
    shown = []
    for number in sorted(message):
        name = names.get(number, f"field_{number}")
        values = message[number]
        if name == "properties":
            text = repr(key_values(values))
        elif name in TEXT_FIELDS:
            text = repr(_text(values[0]))
        elif name == "compression":
            text = COMPRESSION_NAMES[int(values[0])]
        elif name in SIGNED_FIELDS:
            text = str(signed(int(values[0])))
        else:
            text = ", ".join(repr(value) for value in values)
        shown.append(f"{name}=`{text}`")
    return ", ".join(shown)


def render_readme(captured: list[Captured]) -> str:
    import pulsar_lite

    versions = f"pulsar-lite {pulsar_lite.__version__}, pulsar-client {pulsar.__version__}"
    lines = README_HEAD.format(versions=versions).splitlines()
    lines += [
        "",
        "| File | Topic | What was published | Producer settings | ledgerId:entryId | Bytes |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_summary_row(item) for item in captured]
    for item in captured:
        lines += _detail(item)
    return "\n".join(lines) + "\n"


README_HEAD = """\
# Golden frames

Raw frames captured by `tests/tools/capture_frames.py` from pulsar-lite and the official
Python client (`pulsar-client`, C++ core).
This capture used {versions}.
Every `.bin` file is **one whole frame**, starting with its 4-byte total-size prefix:

```
[u32 total_size][u32 cmd_size][BaseCommand]
    ([u16 magic 0x0e01][u32 crc32c])[u32 meta_size][MessageMetadata][payload]
```

`total_size` excludes its own 4 bytes; the magic and checksum are optional in the protocol.

- `*.bin` here: the first **MESSAGE** frame (`BaseCommand.type == 9`) the broker sent to a
  Reader (`client.create_reader(topic, MessageId.earliest)`). pulsar-lite sends MESSAGE
  frames **without** the `0x0e01` magic and checksum: `meta_size` follows the command.
- `send/*.bin`: the **SEND** frame (`type == 6`) the official producer wrote for the same
  case. These carry the magic and a CRC32C (over everything after the checksum). Their
  `[meta_size][MessageMetadata][payload]` bytes are identical to the MESSAGE frame's.

Regenerate everything (frames and this README) from the repository root with
`python tests/tools/capture_frames.py` (needs `pulsar-lite` and `pulsar-client`). The script
checks each frame (type, sizes, CRC32C where present, batch layout, values) and that the
official client decodes exactly what was sent. A regenerated frame gets a new
`publish_time` (and checksum); the other values below stay the same.

Every case used its own topic `persistent://public/default/<topic>` and its own producer,
`producer_name = "producer-<topic>"`, default initial sequence id, `send_timeout_millis=10000`.
Non-batched cases used `Producer.send`; batched ones `send_async` for every message, then
`flush`. Ledger ids are assigned per topic in creation order (the first topic gets 0);
entry ids count from 0. The field lists below name every field present on the wire.

What the official client wrote (see the per-file details):

- Batches: the outer MessageMetadata has `num_messages_in_batch`, the `partition_key` of the
  first message, no properties and no event time; each SingleMessageMetadata has its own
  `properties`, `partition_key`, `payload_size`, `event_time` and a `sequence_id` per message.
- Keys are raw UTF-8 strings (`partition_key_b64_encoded` never set); no `ordering_key`.
- `uncompressed_size` is only set when a codec is used. Non-batched messages have no
  `num_messages_in_batch`, and their SEND has no `num_messages`.
- `Producer.send(None)` sets `null_value = true` with an empty payload; `send(b"")` does not.
- pulsar-lite's MESSAGE always writes `partition` (`-1` off partitioned topics) and
  `redelivery_count = 0` explicitly.
"""


def _summary_row(item: Captured) -> str:
    case = item.case
    message_id = parse_payload_frame(item.message, MESSAGE).message_id
    settings = ", ".join(f"{key}={value}" for key, value in case.producer.items())
    return (
        f"| `{case.file}` | `{case.topic}` | {case.summary} | {settings} "
        f"| {_first(message_id, 1)}:{_first(message_id, 2)} | {len(item.message)} |"
    )


def _detail(item: Captured) -> list[str]:
    case = item.case
    message = parse_payload_frame(item.message, MESSAGE)
    send = parse_payload_frame(item.send, SEND)
    lines = ["", f"## `{case.file}`", "", f"{case.summary[0].upper()}{case.summary[1:]}.", ""]
    lines += ["| # | value | partition_key | properties | event_timestamp |"]
    lines += ["|---|---|---|---|---|"]
    lines += [
        f"| {i} | `{sent.value!r}` | {_code(sent.key)} | `{sent.properties}` "
        f"| {_code(sent.event_timestamp)} |"
        for i, sent in enumerate(case.messages)
    ]
    command = {k: v for k, v in message.command.items() if k != 2}
    lines += [
        "",
        f"- MESSAGE: {present_fields(command, MESSAGE_FIELDS)}; message_id "
        f"{present_fields(message.message_id, MESSAGE_ID_FIELDS)}; no checksum; "
        f"{len(item.message)} bytes. The broker sent {item.message_frames_seen} MESSAGE "
        "frame(s) for this topic (any extra ones are re-sends of the same entry).",
        f"- `send/{case.file}`: {present_fields(send.command, SEND_FIELDS)}; "
        f"crc32c `{send.checksum:#010x}`; {len(item.send)} bytes.",
        f"- MessageMetadata: {present_fields(message.metadata, METADATA_FIELDS)}.",
        f"- Message ids seen by the official client: {', '.join(item.client_ids)}.",
    ]
    if case.batched:
        lines += ["", "SingleMessageMetadata of each batch entry (after decompression):", ""]
        lines += [
            f"{i}. {present_fields(single, SINGLE_FIELDS)}; value `{value!r}`"
            for i, (single, value) in enumerate(batch_entries(message))
        ]
    return lines


def _code(value: object) -> str:
    return "`None`" if value is None else f"`{value!r}`"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    capture(parser.parse_args().out)


if __name__ == "__main__":
    main()
