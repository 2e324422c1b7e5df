"""When a reader decodes the batched entries it has gathered: by messages or bytes."""

from __future__ import annotations

import pytest

from pulsar_spark.protocol.read_stage import GROUP_MESSAGES, MAX_GROUP_BYTES, group_full


@pytest.mark.parametrize(
    ("messages", "size", "full"),
    [
        (1000, 100_000, False),
        (7999, 800_000, False),  # eight batches of a thousand are not yet a group
        (8000, 800_000, True),
        (7999, 1_200_000, False),  # 7,999 batches of one message each: not yet either
        (8000, 1_200_000, True),
        (30, MAX_GROUP_BYTES - 1, False),
        (30, MAX_GROUP_BYTES, True),  # large messages: the byte cap
    ],
)
def test_a_group_is_full_at_its_messages_or_bytes(messages: int, size: int, full: bool) -> None:
    assert (GROUP_MESSAGES, MAX_GROUP_BYTES) == (8000, 4 * 1024 * 1024)
    assert group_full(messages, size) is full
