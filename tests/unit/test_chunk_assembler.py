"""ChunkAssembler: putting chunked messages back together, and what it discards."""

from __future__ import annotations

from support.decoding import outer

from pulsar_spark.protocol import pb
from pulsar_spark.protocol.chunks import Assembled, ChunkAssembler, is_chunk


def chunk(uuid: str, chunk_id: int, total: int, seq: int = 0) -> pb.MessageMetadata:
    return outer(
        sequence_id=seq,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=total,
        total_chunk_msg_size=300,
    )


def test_is_chunk() -> None:
    assert is_chunk(chunk("u", 0, 3))
    assert not is_chunk(outer(uuid="u", chunk_id=0, num_chunks_from_msg=1))
    assert not is_chunk(outer(num_chunks_from_msg=3, chunk_id=1))
    assert not is_chunk(outer())


def test_chunks_in_order() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 3), b"a" * 100) is None
    assert assembler.pending == 1
    assert assembler.add(chunk("u1", 1, 3), b"b" * 100) is None
    last = chunk("u1", 2, 3)
    done = assembler.add(last, b"c" * 100)
    assert done == Assembled(last, b"a" * 100 + b"b" * 100 + b"c" * 100)
    assert done is not None and done.metadata is last
    assert assembler.pending == 0
    assert assembler.discarded == 0


def test_interleaved_uuids() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 3), b"1a") is None
    assert assembler.add(chunk("u2", 0, 2), b"2a") is None
    assert assembler.add(chunk("u1", 1, 3), b"1b") is None
    assert assembler.pending == 2
    done2 = assembler.add(chunk("u2", 1, 2, seq=2), b"2b")
    assert done2 is not None
    assert done2.payload == b"2a2b"
    assert done2.metadata.uuid == "u2" and done2.metadata.sequence_id == 2
    assert assembler.pending == 1
    done1 = assembler.add(chunk("u1", 2, 3, seq=1), b"1c")
    assert done1 is not None
    assert done1.payload == b"1a1b1c"
    assert done1.metadata.uuid == "u1" and done1.metadata.sequence_id == 1
    assert assembler.pending == 0
    assert assembler.discarded == 0


def test_missing_first_chunk_is_discarded() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 1, 3), b"b") is None
    assert assembler.add(chunk("u1", 2, 3), b"c") is None
    assert assembler.pending == 0
    assert assembler.discarded == 2
    # a later complete message is unaffected
    assert assembler.add(chunk("u2", 0, 2), b"x") is None
    done = assembler.add(chunk("u2", 1, 2), b"y")
    assert done is not None and done.payload == b"xy"
    assert assembler.discarded == 2


def test_gap_discards_the_partial_message() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 4), b"a") is None
    assert assembler.add(chunk("u1", 2, 4), b"c") is None  # chunk 1 is missing
    assert assembler.pending == 0
    assert assembler.discarded == 1
    assert assembler.add(chunk("u1", 3, 4), b"d") is None  # the rest has no start
    assert assembler.pending == 0
    assert assembler.discarded == 2


def test_restart_from_chunk_zero_replaces_the_partial_message() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 2), b"old") is None
    assert assembler.add(chunk("u1", 0, 2), b"new") is None
    assert assembler.pending == 1
    assert assembler.discarded == 1
    done = assembler.add(chunk("u1", 1, 2), b"-end")
    assert done is not None and done.payload == b"new-end"
    assert assembler.pending == 0


def test_pending_bytes_limit_discards() -> None:
    assembler = ChunkAssembler(max_pending_bytes=10)
    assert assembler.add(chunk("u1", 0, 3), b"12345") is None
    assert assembler.add(chunk("u2", 0, 3), b"123") is None
    assert assembler.pending == 2
    assert assembler.add(chunk("u1", 1, 3), b"678") is None  # 11 bytes pending
    assert assembler.pending == 1
    assert assembler.discarded == 1
    assert assembler.add(chunk("u2", 1, 2), b"45") is not None
