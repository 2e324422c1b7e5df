"""MessageId: ordering, JSON form and the wire's earliest/latest sentinels."""

from __future__ import annotations

import json

import pytest

from pulsar_spark.message_id import MessageId


def test_message_id_ordering() -> None:
    ids = [
        MessageId(2, 0),
        MessageId(1, 5, 3),
        MessageId.latest(),
        MessageId(1, 5),
        MessageId(1, 5, 0),
        MessageId.earliest(),
        MessageId(0, 100),
        MessageId(1, 4, 99),
    ]
    assert sorted(ids) == [
        MessageId.earliest(),
        MessageId(0, 100),
        MessageId(1, 4, 99),
        MessageId(1, 5),
        MessageId(1, 5, 0),
        MessageId(1, 5, 3),
        MessageId(2, 0),
        MessageId.latest(),
    ]


def test_message_id_partition_is_not_compared() -> None:
    assert MessageId(1, 2, 3, partition=0) == MessageId(1, 2, 3, partition=5)
    assert not MessageId(1, 2, 3, partition=0) < MessageId(1, 2, 3, partition=5)
    assert hash(MessageId(1, 2, partition=0)) == hash(MessageId(1, 2, partition=1))
    moved = MessageId(1, 2, 3).with_partition(4)
    assert (moved.ledger_id, moved.entry_id, moved.batch_index, moved.partition) == (1, 2, 3, 4)
    assert MessageId(7, 8, 9).entry == (7, 8)
    assert str(MessageId(7, 8, 9)) == "7:8:9"
    assert str(MessageId(7, 8)) == "7:8:-1"


def test_message_id_json_round_trip() -> None:
    for mid in (
        MessageId(3, 4),
        MessageId(3, 4, 5, partition=2),
        MessageId.earliest(),
        MessageId.latest(),
    ):
        data = mid.to_json()
        assert data == {
            "ledgerId": mid.ledger_id,
            "entryId": mid.entry_id,
            "batchIndex": mid.batch_index,
        }
        back = MessageId.from_json(json.loads(json.dumps(data)))
        assert back == mid
        assert back.partition == -1
    assert MessageId.from_json({"ledgerId": 1, "entryId": 2}) == MessageId(1, 2, -1)
    assert MessageId.from_json({"ledgerId": 1, "entryId": 2}).batch_index == -1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2], r"^expected an object with ledgerId/entryId, got \[1, 2\]$"),
        ({"ledgerId": 1}, r"^missing 'entryId' in message id \{'ledgerId': 1\}$"),
        ({"entryId": 1}, r"^missing 'ledgerId' in message id \{'entryId': 1\}$"),
        ({"ledgerId": "1", "entryId": 2}, r"^ledgerId must be an integer, got '1'$"),
        ({"ledgerId": 1, "entryId": 2.0}, r"^entryId must be an integer, got 2.0$"),
        (
            {"ledgerId": 1, "entryId": 2, "batchIndex": True},
            r"^batchIndex must be an integer, got True$",
        ),
    ],
)
def test_message_id_json_invalid(value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        MessageId.from_json(value)


def test_message_id_wire_sentinels() -> None:
    earliest = MessageId.earliest()
    assert (earliest.ledger_id, earliest.entry_id, earliest.batch_index) == (-1, -1, -1)
    assert earliest.is_earliest and not earliest.is_latest
    assert earliest.wire_ids() == ((1 << 64) - 1, (1 << 64) - 1)
    latest = MessageId.latest()
    assert (latest.ledger_id, latest.entry_id) == ((1 << 63) - 1, (1 << 63) - 1)
    assert latest.is_latest and not latest.is_earliest
    assert latest.wire_ids() == ((1 << 63) - 1, (1 << 63) - 1)
    back = MessageId.from_wire((1 << 64) - 1, (1 << 64) - 1, -1, -1)
    assert back.is_earliest
    assert back == earliest
    assert MessageId.from_wire(5, 6, 7, 8) == MessageId(5, 6, 7)
    assert MessageId.from_wire(5, 6, 7, 8).partition == 8
    assert MessageId.from_wire(5, (1 << 64) - 1, -1, 0).entry_id == -1
    assert MessageId(5, 6).wire_ids() == (5, 6)
    assert not MessageId(5, 6).is_earliest and not MessageId(5, 6).is_latest


def test_bound_keys_of_a_single_index_and_of_a_whole_entry() -> None:
    one, whole = MessageId(4, 7, 3), MessageId(4, 7, -1)
    assert (one.first_key(), one.last_key(), one.key_after(), one.key_before()) == (
        (4, 7, 3),
        (4, 7, 3),
        (4, 7, 4),
        (4, 7, 2),
    )
    past = 1 << 31
    assert (whole.first_key(), whole.last_key(), whole.key_after(), whole.key_before()) == (
        (4, 7, -1),
        (4, 7, past),
        (4, 7, past + 1),
        (4, 7, -2),
    )
    # a whole entry starts before its first index and ends after its last
    assert whole.first_key() < MessageId(4, 7, 0).first_key()
    assert MessageId(4, 7, 999_999).last_key() < whole.last_key() < MessageId(4, 8, 0).first_key()
