"""Payload codecs: NONE, LZ4, ZLIB, ZSTD and SNAPPY, as Pulsar clients write them.

- LZ4 is a raw block (no frame header, no size prefix); the decoder needs the uncompressed size.
- ZLIB is a zlib-wrapped deflate stream. Java producers flush without finishing the stream, so
  there is no final block and no Adler-32 trailer: a streaming decompressor reads it, where a
  one-shot ``zlib.decompress`` would fail.
- ZSTD is a standard zstd frame.
- SNAPPY is a raw snappy block, not the framing format.

``uncompressed_size`` from the message metadata is checked against what the codec produced, so a
corrupt or truncated payload is an error rather than silently wrong data.

Each codec uses the fastest library that writes and reads it in Pulsar's form, as measured by
``benchmarks/bench_codecs.py`` (numbers in ``benchmarks/README.md``):

- LZ4: ``lz4.block``. cramjam has LZ4 blocks too, but was slower in 14 of 16 measurements
  (compressing and decompressing a 1000-message batch and a 10 KB value, four runs), by up to
  15%, and compresses the 10 KB value 5% less. Its ``decompress_block(output_len=n)`` also pads
  a short result with zeros up to ``n``, which would hide a wrong ``uncompressed_size``.
- ZSTD: ``zstandard``: it decompressed 20-50% faster than cramjam's zstd in every run, and
  compressed faster in 7 of 8 measurements.
- SNAPPY: ``cramjam``, the only one of the three with raw snappy blocks.
- ZLIB: Python's ``zlib``: it compresses 1.4-1.9 times faster than cramjam's, and cramjam
  cannot read the unfinished streams Java producers write.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import cramjam
import lz4.block
import zstandard

from pulsar_spark.errors import ConfigurationError, CorruptPayloadError, UnsupportedCompressionError
from pulsar_spark.protocol import pb

NONE = pb.NONE
LZ4 = pb.LZ4
ZLIB = pb.ZLIB
ZSTD = pb.ZSTD
SNAPPY = pb.SNAPPY

CODEC_NAMES: dict[str, int] = {
    "none": NONE,
    "lz4": LZ4,
    "zlib": ZLIB,
    "zstd": ZSTD,
    "snappy": SNAPPY,
}

_ZSTD_LEVEL = 3
_zstd_compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def _decompress_zlib(data: bytes, size: int) -> bytes:
    # Bounded to one byte past the expected size: enough to detect a wrong size, never a bomb.
    decompressor = zlib.decompressobj()
    out = decompressor.decompress(data, size + 1)
    return out if len(out) > size else out + decompressor.flush()


_DECOMPRESSORS: dict[int, Callable[[bytes, int], bytes]] = {
    LZ4: lambda data, size: lz4.block.decompress(data, uncompressed_size=size),
    ZLIB: _decompress_zlib,
    ZSTD: lambda data, size: _zstd_decompressor.decompress(data, max_output_size=size),
    SNAPPY: lambda data, size: bytes(cramjam.snappy.decompress_raw(data)),
}

_COMPRESSORS: dict[int, Callable[[bytes], bytes]] = {
    NONE: bytes,
    LZ4: lambda data: lz4.block.compress(data, store_size=False),
    ZLIB: zlib.compress,
    ZSTD: _zstd_compressor.compress,
    SNAPPY: lambda data: bytes(cramjam.snappy.compress_raw(data)),
}


def _codec_name(codec: int) -> str:
    return {code: name.upper() for name, code in CODEC_NAMES.items()}.get(codec, str(codec))


def decompress(codec: int, data: bytes, uncompressed_size: int) -> bytes:
    """Decompress a payload; raise if the codec is unknown or the result has the wrong size."""
    if codec == NONE:
        return data
    decoder = _DECOMPRESSORS.get(codec)
    if decoder is None:
        raise UnsupportedCompressionError(
            f"unknown compression code {codec}: this client reads "
            "NONE(0), LZ4(1), ZLIB(2), ZSTD(3) and SNAPPY(4)"
        )
    try:
        out = decoder(data, uncompressed_size)
    except Exception as exc:  # each codec library raises its own error types
        raise CorruptPayloadError(
            f"{_codec_name(codec)} payload of {len(data)} bytes does not decompress: {exc}"
        ) from exc
    if len(out) != uncompressed_size:
        raise CorruptPayloadError(
            f"{_codec_name(codec)} payload decompressed to {len(out)} bytes, "
            f"metadata says {uncompressed_size}"
        )
    return out


def compress(codec: int, data: bytes) -> bytes:
    """Compress a payload with one of the five codecs."""
    encoder = _COMPRESSORS.get(codec)
    if encoder is None:
        raise UnsupportedCompressionError(f"unknown compression code {codec}")
    return encoder(data)


def codec_from_name(name: str) -> int:
    """Map an option value (none/lz4/zlib/zstd/snappy, any case) to its wire code."""
    try:
        return CODEC_NAMES[name.strip().lower()]
    except KeyError as exc:
        raise ConfigurationError(
            f"unknown compression {name!r}: use one of {', '.join(CODEC_NAMES)}"
        ) from exc
