"""Varints decoded many at a time: byte fixtures, each word the eight bytes a varint starts."""

from __future__ import annotations

import numpy as np
import pytest

from pulsar_spark.common.varints import (
    byte_words,
    decode_fixed,
    decode_long_words,
    decode_nine,
    decode_words,
    encode_varint,
)


def words(*chunks: bytes) -> np.ndarray:
    """One little-endian uint64 per chunk, padded with 0xFF (bytes past a varint are noise)."""
    return np.frombuffer(b"".join(c.ljust(8, b"\xff") for c in chunks), dtype="<u8")


def test_fixed_width_two() -> None:
    decoded = decode_fixed(words(b"\xac\x02", b"\x80\x01", b"\xff\x7f"), 2)
    assert decoded is not None
    assert decoded.tolist() == [300, 128, 16_383]


def test_fixed_width_one_and_eight() -> None:
    one = decode_fixed(words(b"\x00", b"\x7f"), 1)
    assert one is not None
    assert one.tolist() == [0, 127]
    eight = decode_fixed(words(b"\x81\x80\x80\x80\x80\x80\x80\x40", b"\xff" * 7 + b"\x7f"), 8)
    assert eight is not None
    assert eight.tolist() == [1 + (0x40 << 49), (1 << 56) - 1]


@pytest.mark.parametrize(
    ("varint", "width"),
    [
        (b"\x05", 2),  # one byte, not two
        (b"\xac\x82\x01", 2),  # three bytes, not two
        (b"\xac\x02", 3),  # two bytes, not three
    ],
)
def test_fixed_width_refuses_another_length(varint: bytes, width: int) -> None:
    fine = {1: b"\x01", 2: b"\x81\x01", 3: b"\x81\x81\x01"}[width]
    assert decode_fixed(words(fine, varint, fine), width) is None
    assert decode_fixed(words(fine, fine), width) is not None


def test_nine_bytes() -> None:
    value = (1 << 62) + 5
    encoded = bytes(((value >> (7 * i)) & 0x7F) | 0x80 for i in range(8)) + bytes([value >> 56])
    decoded = decode_nine(words(encoded[:8]), np.frombuffer(encoded[8:], dtype=np.uint8))
    assert decoded is not None
    assert decoded.tolist() == [value]


def test_nine_bytes_refuses_eight_and_ten() -> None:
    eight = b"\x81\x80\x80\x80\x80\x80\x80\x40"
    assert decode_nine(words(eight), np.array([0x01], dtype=np.uint8)) is None
    nine_going_on = b"\x80" * 8
    assert decode_nine(words(nine_going_on), np.array([0x81], dtype=np.uint8)) is None


def test_any_length_with_its_length() -> None:
    values, lengths = decode_words(words(b"\x05", b"\xac\x02", b"\x80" * 8))
    assert values[:2].tolist() == [5, 300]
    assert lengths.tolist() == [1, 2, 0]


def laid_end_to_end(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The varints of ``values`` end to end, padded with 0xFF: the word each one starts, and
    the byte eight bytes after its start."""
    encoded = [encode_varint(value) for value in values]
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    buffer = np.frombuffer(b"".join(encoded) + b"\xff" * 16, dtype=np.uint8)
    return byte_words(buffer)[starts], buffer[starts + 8]


def test_long_words_of_every_length_from_one_to_nine() -> None:
    values = [0, 127, 128, 16_383, 2**14, 2**21 + 5, 2**28, 2**35 - 1, 2**42, 2**49, 2**56 - 1]
    values += [2**56, 2**62 + 3, 2**63 - 1, 300, 3713573055667109888, 1]
    words_at, ninth = laid_end_to_end(values)
    decoded, lengths = decode_long_words(words_at, ninth)
    assert decoded.tolist() == values
    assert lengths.tolist() == [1, 1, 2, 2, 3, 4, 5, 5, 7, 8, 8, 9, 9, 9, 2, 9, 1]
    assert lengths.tolist() == [len(encode_varint(value)) for value in values]


def test_long_words_give_length_zero_for_ten_bytes() -> None:
    words_at, ninth = laid_end_to_end([5, -1, 2**63, -(2**40), 2**56])
    assert [len(encode_varint(v)) for v in (-1, 2**63, -(2**40))] == [10, 10, 10]
    decoded, lengths = decode_long_words(words_at, ninth)
    assert lengths.tolist() == [1, 0, 0, 0, 9]
    assert decoded[[0, 4]].tolist() == [5, 2**56]
