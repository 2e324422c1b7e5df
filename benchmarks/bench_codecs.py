"""Codec libraries compared: compress and decompress speed for each Pulsar codec, on one core.

Every library that can write and read a codec in the form Pulsar puts on the wire is timed on
the same payloads, called the way ``pulsar_spark/protocol/compression.py`` calls it:

- LZ4, a raw block: ``lz4.block`` and ``cramjam.lz4``;
- ZSTD, a zstd frame at level 3: ``zstandard`` and ``cramjam.zstd``;
- SNAPPY, a raw block: ``cramjam.snappy`` (the only one of the three that has it);
- ZLIB at level 6: Python's ``zlib`` and ``cramjam.zlib``. Only Python's ``zlib`` reads the
  unfinished streams Java producers write, so ``cramjam.zlib`` is timed for compression only.

Decompression gets the uncompressed size from the message metadata and must return exactly
that many bytes, or fail: cramjam's ``decompress(..., output_len=n)`` pads a short result with
zeros up to ``n``, so cramjam is timed with its ``decompress_into`` functions, which report
how many bytes they wrote, then a copy to ``bytes``.

Two payloads, both JSON text like the demo's:

- ``batch``: a batched entry as a producer lays it out, 1000 records of a SingleMessageMetadata
  (key, two properties, event time, sequence id) followed by a 100-byte JSON value;
- ``value``: one JSON value of about 10 KB, sent on its own.

Every compressed payload is checked to decompress with every library of its codec. Speeds are
in MB/s of uncompressed data, the best of ``--repeat`` rounds; a round times every library of
a codec once, each for at least ``--seconds``, so background load falls on all of them alike.
A library that is not installed is left out (``pip install lz4 zstandard`` to compare them).

glibc returns memory of 128 KB or more to the system when it is freed, and takes it back on the
next allocation, page by page; whether that happens for a 160 KB payload depends on what was
allocated before, and it can cost more than the decompression itself, in whichever library
comes first. On glibc the benchmark therefore raises the allocator's mmap and trim thresholds
before timing, so every library allocates from the same warm heap.

    python benchmarks/bench_codecs.py [--seconds 0.2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import random
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from common import report

from pulsar_spark.protocol import pb

Compress = Callable[[bytes], bytes]
Decompress = Callable[[bytes, int], bytes]

MESSAGES = 1000
VALUE_SIZE = 100
LARGE_VALUE_SIZE = 10 * 1024
PAGES = ("home", "search", "product", "cart", "checkout", "help", "blog", "account")
ACTIONS = ("view", "view", "view", "click", "click", "scroll", "purchase")


@dataclass(frozen=True)
class Candidate:
    codec: str
    library: str
    compress: Compress
    decompress: Decompress | None  # None: the library cannot read the codec as Pulsar writes it


# --------------------------------------------------------------------------- payloads


def click_value(rng: random.Random, event: int) -> bytes:
    """A 100-byte JSON click event; a random session id fills it up to the size."""
    fields = {
        "id": event,
        "user": f"user-{rng.randrange(5000)}",
        "page": rng.choice(PAGES),
        "action": rng.choice(ACTIONS),
        "ts": 1767225600000 + event * 10,
        "session": "",
    }
    text = json.dumps(fields, separators=(",", ":"))
    session = "".join(rng.choice("0123456789abcdef") for _ in range(VALUE_SIZE - len(text)))
    return text.replace('"session":""', f'"session":"{session}"').encode()


def batch_payload(seed: int = 1) -> bytes:
    """An uncompressed batched entry: 1000 (SingleMessageMetadata, value) records."""
    rng = random.Random(seed)
    records = []
    for i in range(MESSAGES):
        value = click_value(rng, i)
        single = pb.SingleMessageMetadata(
            payload_size=len(value),
            sequence_id=i,
            partition_key=f"user-{rng.randrange(5000)}",
            event_time=1767225600000 + i * 10,
        )
        single.properties.add(key="source", value="web")
        single.properties.add(key="schema", value="click/v1")
        body = single.SerializeToString()
        records.append(struct.pack(">I", len(body)) + body + value)
    return b"".join(records)


def large_value(seed: int = 2) -> bytes:
    """One JSON document of about 10 KB: an order with its line items."""
    rng = random.Random(seed)
    order: dict[str, Any] = {
        "order": f"ord-{rng.randrange(10**9):09d}",
        "customer": {"id": f"user-{rng.randrange(5000)}", "country": "DE", "tier": "gold"},
        "items": [],
    }
    while len(json.dumps(order)) < LARGE_VALUE_SIZE:
        order["items"].append(
            {
                "sku": f"SKU-{rng.randrange(100000):05d}",
                "name": f"{rng.choice(PAGES)} item {rng.randrange(1000)}",
                "quantity": rng.randint(1, 5),
                "price": round(rng.uniform(1, 500), 2),
                "warehouse": rng.choice(("FRA-1", "BER-2", "MUC-1")),
            }
        )
    return json.dumps(order).encode()


# --------------------------------------------------------------------------- libraries


def _exact(decompress_into: Callable[[bytes, bytearray], int]) -> Decompress:
    """Decompress into a buffer of the expected size; fail unless exactly that much came out."""

    def decompress(data: bytes, size: int) -> bytes:
        out = bytearray(size)
        written = decompress_into(data, out)
        if written != size:
            raise ValueError(f"decompressed to {written} bytes, expected {size}")
        return bytes(out)

    return decompress


def _zlib_stream(data: bytes, size: int) -> bytes:
    decompressor = zlib.decompressobj()
    out = decompressor.decompress(data, size + 1)
    return out if len(out) > size else out + decompressor.flush()


def candidates() -> tuple[list[Candidate], list[str]]:
    """Every (codec, library) pair that can be timed here, and the libraries not installed."""
    found: list[Candidate] = []
    missing: list[str] = []

    def load(name: str) -> Any:
        try:
            return importlib.import_module(name)
        except ImportError:
            missing.append(name.partition(".")[0])
            return None

    if lz4_block := load("lz4.block"):
        found.append(
            Candidate(
                "lz4",
                "lz4",
                lambda d: lz4_block.compress(d, store_size=False),
                lambda d, n: lz4_block.decompress(d, uncompressed_size=n),
            )
        )
    if zstandard := load("zstandard"):
        compressor = zstandard.ZstdCompressor(level=3)
        decompressor = zstandard.ZstdDecompressor()
        found.append(
            Candidate(
                "zstd",
                "zstandard",
                compressor.compress,
                lambda d, n: decompressor.decompress(d, max_output_size=n),
            )
        )
    if cramjam := load("cramjam"):
        found += [
            Candidate(
                "lz4",
                "cramjam",
                lambda d: bytes(cramjam.lz4.compress_block(d, store_size=False)),
                _exact(cramjam.lz4.decompress_block_into),
            ),
            Candidate(
                "zstd",
                "cramjam",
                lambda d: bytes(cramjam.zstd.compress(d, level=3)),
                _exact(cramjam.zstd.decompress_into),
            ),
            Candidate(
                "snappy",
                "cramjam",
                lambda d: bytes(cramjam.snappy.compress_raw(d)),
                lambda d, n: bytes(cramjam.snappy.decompress_raw(d)),
            ),
            Candidate("zlib", "cramjam", lambda d: bytes(cramjam.zlib.compress(d, level=6)), None),
        ]
    found.append(Candidate("zlib", "zlib (stdlib)", lambda d: zlib.compress(d, 6), _zlib_stream))
    return found, missing


# --------------------------------------------------------------------------- timing


def keep_heap_warm() -> bool:
    """On glibc, stop freed payload-sized blocks from going back to the system; see above."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(
        libc.mallopt(m_mmap_threshold, 64 << 20) and libc.mallopt(m_trim_threshold, 256 << 20)
    )


def timed(run: Callable[[], object], loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        run()
    return time.perf_counter() - start


def best_rates(
    runs: list[Callable[[], object]], size: int, seconds: float, repeat: int
) -> list[float]:
    """MB/s of ``size`` uncompressed bytes per call of each run, the best of ``repeat`` rounds."""
    loops = []
    for run in runs:  # a loop count that takes at least ``seconds``
        count = 1
        while timed(run, count) < seconds:
            count *= 2
        loops.append(count)
    best = [float("inf")] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            best[i] = min(best[i], timed(run, loops[i]))
    return [size * count / elapsed / 1e6 for count, elapsed in zip(loops, best, strict=True)]


def check_interop(raw: bytes, same_codec: list[Candidate]) -> None:
    """What each library compresses, every library of the codec decompresses to ``raw``."""
    for writer in same_codec:
        packed = writer.compress(raw)
        for reader in same_codec:
            if reader.decompress is not None:
                assert reader.decompress(packed, len(raw)) == raw, (writer, reader)


def fastest(rows: list[list[Any]], column: int) -> dict[str, dict[str, str]]:
    """Payload -> codec -> library with the highest value in ``column``."""
    best: dict[str, dict[str, tuple[float, str]]] = {}
    for row in rows:
        payload, codec, library, rate = row[0], row[1], row[2], row[column]
        if rate is None:
            continue
        current = best.setdefault(payload, {}).get(codec)
        if current is None or rate > current[0]:
            best[payload][codec] = (rate, library)
    return {p: {c: lib for c, (_, lib) in codecs.items()} for p, codecs in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.2, help="minimum time of one run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement")
    args = parser.parse_args()

    found, missing = candidates()
    if missing:
        print(f"not installed, left out: {', '.join(sorted(set(missing)))}")
    warm_heap = keep_heap_warm()
    payloads = {"batch": batch_payload(), "value": large_value()}
    rows: list[list[Any]] = []
    for label, raw in payloads.items():
        print(f"{label}: {len(raw):,} bytes", flush=True)
        for codec in ("lz4", "zstd", "snappy", "zlib"):
            same_codec = [c for c in found if c.codec == codec]
            check_interop(raw, same_codec)
            packed = [c.compress(raw) for c in same_codec]
            timing = (len(raw), args.seconds, args.repeat)
            compress = best_rates([partial(c.compress, raw) for c in same_codec], *timing)
            readers = [
                (i, partial(c.decompress, packed[i], len(raw)))
                for i, c in enumerate(same_codec)
                if c.decompress is not None
            ]
            decompress = dict(
                zip(
                    [i for i, _ in readers],
                    best_rates([run for _, run in readers], *timing),
                    strict=True,
                )
            )
            for i, candidate in enumerate(same_codec):
                rows.append(
                    [
                        label,
                        codec,
                        candidate.library,
                        len(packed[i]),
                        round(100 * len(packed[i]) / len(raw), 1),
                        round(compress[i]),
                        round(decompress[i]) if i in decompress else None,
                    ]
                )
    report(
        "bench_codecs",
        ["payload", "codec", "library", "compressed B", "% of raw", "compress MB/s", "decomp MB/s"],
        rows,
        {
            "payload_bytes": {label: len(raw) for label, raw in payloads.items()},
            "fastest_compress": fastest(rows, 5),
            "fastest_decompress": fastest(rows, 6),
            "not_installed": sorted(set(missing)),
            "heap_kept_warm": warm_heap,
            "seconds_per_run": args.seconds,
            "repeat": args.repeat,
        },
    )


if __name__ == "__main__":
    main()
