"""The durable subscription's commands: SUBSCRIBE (durable, Failover, earliest) and the
cumulative ACK with a receipt, through a batch index as ``ack_set``, checked on the bytes."""

from __future__ import annotations

import pytest

from pulsar_spark.client.durable import cumulative_acks
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import FrameDecoder

Type = pb.BaseCommand.Type


def decode_one(frame: bytes) -> pb.BaseCommand:
    decoder = FrameDecoder()
    frames = decoder.feed(frame)
    assert len(frames) == 1
    assert decoder.buffered == 0
    return frames[0].command


def test_subscribe_durable() -> None:
    cmd = decode_one(
        commands.subscribe_durable(
            topic="persistent://public/default/x-partition-1",
            subscription="orders-etl",
            consumer_id=3,
            request_id=4,
            consumer_name="orders-etl-driver",
        )
    )
    sub = cmd.subscribe
    assert cmd.type == Type.SUBSCRIBE
    assert sub.topic == "persistent://public/default/x-partition-1"
    assert sub.subscription == "orders-etl"
    assert sub.consumer_name == "orders-etl-driver"
    assert sub.subType == pb.CommandSubscribe.Failover
    assert (sub.consumer_id, sub.request_id) == (3, 4)
    assert sub.HasField("durable") and sub.durable is True
    assert sub.HasField("initialPosition")
    assert sub.initialPosition == pb.CommandSubscribe.Earliest
    assert sub.HasField("force_topic_creation") and sub.force_topic_creation is False
    assert not sub.HasField("start_message_id")
    assert not sub.HasField("replicate_subscription_state")


def test_subscribe_durable_replicated() -> None:
    """``replicated`` asks for a replicated subscription (field 14 of CommandSubscribe)."""
    frame = commands.subscribe_durable(
        topic="t", subscription="s", consumer_id=1, request_id=2, consumer_name="c", replicated=True
    )
    sub = decode_one(frame).subscribe
    assert sub.HasField("replicate_subscription_state") and sub.replicate_subscription_state
    # as in test_subscribe_durable_exact_bytes, with replicate_subscription_state 1 (0x70 01)
    # between initialPosition and force_topic_creation: two bytes more at each level
    assert frame.hex() == ("0000001f0000001b080422170a01741201731802200128023201634001680170017800")


def test_subscribe_durable_exact_bytes() -> None:
    frame = commands.subscribe_durable(
        topic="t", subscription="s", consumer_id=1, request_id=2, consumer_name="c"
    )
    # size 29, command size 25, BaseCommand{type: 4, subscribe (field 4, 21 bytes):
    # topic "t", subscription "s", subType 2, consumer_id 1, request_id 2, consumer_name "c",
    # durable 1, initialPosition 1, force_topic_creation 0}
    assert frame.hex() == ("0000001d00000019080422150a0174120173180220012802320163400168017800")


def test_ack_whole_entry_has_no_ack_set() -> None:
    cmd = decode_one(
        commands.ack_cumulative_through(
            consumer_id=5, message_id=MessageId(9, 99, partition=2), request_id=11
        )
    )
    assert cmd.type == Type.ACK
    assert cmd.ack.consumer_id == 5
    assert cmd.ack.ack_type == pb.CommandAck.Cumulative
    assert cmd.ack.HasField("request_id") and cmd.ack.request_id == 11
    assert len(cmd.ack.message_id) == 1
    ack_id = cmd.ack.message_id[0]
    assert (ack_id.ledgerId, ack_id.entryId, ack_id.partition) == (9, 99, 2)
    assert not ack_id.HasField("batch_index")
    assert list(ack_id.ack_set) == []
    assert not ack_id.HasField("batch_size")


def test_ack_inside_a_batch_of_known_size() -> None:
    """Through index 3 of a batch of 10: indexes 4..9 stay unacknowledged, as Java's
    ``bitSet.set(0, 10); bitSet.clear(0, 4)`` gives ``toLongArray() == [0b1111110000]``."""
    cmd = decode_one(
        commands.ack_cumulative_through(
            consumer_id=5, message_id=MessageId(9, 99, 3, partition=0), request_id=12, batch_size=10
        )
    )
    ack_id = cmd.ack.message_id[0]
    assert (ack_id.ledgerId, ack_id.entryId, ack_id.batch_index, ack_id.partition) == (9, 99, 3, 0)
    assert list(ack_id.ack_set) == [0b1111110000]
    assert list(ack_id.ack_set) == [1008]
    assert ack_id.batch_size == 10


def test_ack_inside_a_batch_of_unknown_size_runs_to_the_word_end() -> None:
    """Through index 0: bits 1..63 set, which as a signed Java long is -2."""
    cmd = decode_one(
        commands.ack_cumulative_through(
            consumer_id=5, message_id=MessageId(1, 2, 0, partition=-1), request_id=13
        )
    )
    ack_id = cmd.ack.message_id[0]
    assert ack_id.batch_index == 0
    assert not ack_id.HasField("partition")
    assert list(ack_id.ack_set) == [-2]
    assert not ack_id.HasField("batch_size")


def test_ack_set_bytes_on_the_wire() -> None:
    """ack_set is a repeated int64 (unpacked, field 5): -2 travels as a ten-byte varint."""
    frame = commands.ack_cumulative_through(
        consumer_id=1, message_id=MessageId(0, 7, 0), request_id=2
    )
    # size 33, command size 29, BaseCommand{type: 10, ack (field 10, 25 bytes): consumer_id 1,
    # ack_type Cumulative, message_id (17 bytes) MessageIdData{ledgerId 0, entryId 7,
    # batch_index 0, ack_set -2}, request_id 2}
    assert frame.hex() == (
        "000000210000001d080a5219080110011a1108001007200028feffffffffffffffff014002"
    )


@pytest.mark.parametrize(
    ("first", "end", "words"),
    [
        (4, 10, [0b1111110000]),
        (1, 64, [-2]),
        (63, 64, [-(1 << 63)]),
        (64, 128, [0, -1]),
        (65, 70, [0, 0b111110]),
        (100, 100, []),
        (0, 1, [1]),
    ],
)
def test_ack_set_words(first: int, end: int, words: list[int]) -> None:
    assert commands.ack_set_words(first, end) == words


def test_ack_through_index_63_sets_the_next_word() -> None:
    cmd = decode_one(
        commands.ack_cumulative_through(consumer_id=1, message_id=MessageId(0, 7, 63), request_id=2)
    )
    assert list(cmd.ack.message_id[0].ack_set) == [0, -1]


# --- which acks move the subscription through a position --------------------------------------


@pytest.mark.parametrize("whole_entries_only", [False, True])
def test_nothing_consumed_needs_no_ack(whole_entries_only: bool) -> None:
    assert cumulative_acks(MessageId.earliest(), whole_entries_only=whole_entries_only) == []


@pytest.mark.parametrize("whole_entries_only", [False, True])
def test_a_whole_entry_is_acked_as_it_is(whole_entries_only: bool) -> None:
    position = MessageId(3, 40, -1, partition=2)
    acks = cumulative_acks(position, whole_entries_only=whole_entries_only)
    assert acks == [MessageId(3, 40, -1)]
    assert acks[0].partition == 2


def test_inside_a_batch_the_previous_entry_then_the_batch_index() -> None:
    acks = cumulative_acks(MessageId(3, 40, 5, partition=1), whole_entries_only=False)
    assert acks == [MessageId(3, 39, -1), MessageId(3, 40, 5)]
    assert [a.partition for a in acks] == [1, 1]


def test_inside_a_batch_on_a_broker_counting_entries_only_the_previous_entry() -> None:
    """pulsar-lite takes a batch-index ack for the whole entry: never send one there."""
    acks = cumulative_acks(MessageId(3, 40, 5, partition=1), whole_entries_only=True)
    assert acks == [MessageId(3, 39, -1)]
    assert acks[0].partition == 1


def test_inside_the_first_entry_of_a_ledger() -> None:
    assert cumulative_acks(MessageId(3, 0, 5), whole_entries_only=False) == [MessageId(3, 0, 5)]
    assert cumulative_acks(MessageId(3, 0, 5), whole_entries_only=True) == []
