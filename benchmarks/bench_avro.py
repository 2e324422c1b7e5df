"""Avro values to Arrow on one core: the ``value`` column of a topic with an Avro schema.

Times ``ValueDecoder.decode`` on record batches of 20,000 values, as a read types them, with
the columnar decoder and with fastavro one value at a time (what the columnar decoder falls
back to). Records:

- reading: READING, the 8-field record of the read benchmark's avro case (string, long, double,
  boolean, nullable string, timestamp-millis, array of strings, nested record), small numbers;
- reading, full-range longs: the same with a Snowflake id in ``count`` (a 41-bit millisecond
  time, then 22 bits of worker and sequence: 10-byte varints) and a time in nanoseconds in
  ``place.zip`` (9 bytes);
- id + name: ``{id: long, name: string}`` with Snowflake ids;
- reading, one odd value: the full-range records with one value the columnar decoder
  declines and fastavro reads: a trailing byte (that value alone goes one by one), or a
  boolean byte of 2 (the values near it go one by one; see ``decode_avro_parts``).

    python benchmarks/bench_avro.py [--values 20000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from common import reading, reading_schema
from support.schemas import READING, avro_bytes

from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo

ID_NAME = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
EPOCH_MS = 1_764_000_000_000
EPOCH_NS = EPOCH_MS * 1_000_000


def snowflake(n: int) -> int:
    """A Snowflake id: milliseconds since the epoch, then 10 bits of worker, 12 of sequence."""
    return ((EPOCH_MS + n // 7) << 22) | ((n % 1024) << 12) | (n % 4096)


def full_range(n: int) -> dict[str, Any]:
    record = reading(n)
    record["count"] = snowflake(n)
    record["place"]["zip"] = EPOCH_NS + n * 1_000_003
    return record


def id_name(n: int) -> dict[str, Any]:
    return {"id": snowflake(n), "name": f"user-{n % 10_000}"}


def decoder(schema: dict[str, Any]) -> ValueDecoder:
    if schema is READING:
        value_schema = reading_schema()
    else:
        avro = pb.Schema.Type.Value("Avro")
        info = SchemaInfo(avro, json.dumps(schema).encode(), "", (), None)
        value_schema = ValueSchema.of("bench", info)
    return ValueDecoder(value_schema, lambda version: None)


def rate(decode: Callable[[], pa.Array], values: int, runs: int) -> float:
    """Values per second, best of ``runs``."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        decode()
        best = min(best, time.perf_counter() - start)
    return values / best


def trailing_byte(n: int) -> bytes:
    return avro_bytes(full_range(n), READING) + b"\x00"


def flag_of_two(n: int) -> bytes:
    """Record ``n`` with its boolean written as the byte 2 (fastavro reads it as true)."""
    record = full_range(n)
    true = avro_bytes({**record, "ok": True}, READING)
    false = avro_bytes({**record, "ok": False}, READING)
    at = next(i for i, (t, f) in enumerate(zip(true, false, strict=True)) if t != f)
    return true[:at] + b"\x02" + true[at + 1 :]


def case(
    schema: dict[str, Any],
    make: Callable[[int], dict[str, Any]],
    count: int,
    odd: Callable[[int], bytes] | None,
) -> tuple[float, float]:
    """Values per second, columnar (as a read decodes) and one by one, on ``count`` values
    (value ``count // 3`` made by ``odd`` when given)."""
    payloads = [avro_bytes(make(n), schema) for n in range(count)]
    if odd is not None:
        payloads[count // 3] = odd(count // 3)
    values = pa.array(payloads, pa.binary())
    versions = [None] * count
    reader = decoder(schema)
    columnar = reader.decode(values, versions)
    slow = reader._one_by_one(values)
    assert columnar.equals(slow), "the columnar decoder and fastavro disagree"
    one_by_one = values.slice(0, count // 10)  # fastavro is slow: a tenth of the values
    return (
        rate(lambda: reader.decode(values, versions), count, 5),
        rate(lambda: reader._one_by_one(one_by_one), len(one_by_one), 3),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=20_000)
    args = parser.parse_args()
    print(f"{args.values:,} values a record batch; values/s on one core (best of 5, 3)")
    for label, schema, make, odd in (
        ("reading", READING, reading, None),
        ("reading, full-range longs", READING, full_range, None),
        ("id + name, Snowflake ids", ID_NAME, id_name, None),
        ("reading, full-range, one trailing byte", READING, full_range, trailing_byte),
        ("reading, full-range, one boolean of 2", READING, full_range, flag_of_two),
    ):
        columnar, one_by_one = case(schema, make, args.values, odd)
        print(f"  {label:42s} columnar {columnar:>12,.0f}   one by one {one_by_one:>10,.0f}")


if __name__ == "__main__":
    main()
