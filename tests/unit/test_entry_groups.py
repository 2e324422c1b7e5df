"""When a reader decodes the batched entries it has gathered: by messages, entries or bytes."""

from __future__ import annotations

import pytest

from pulsar_spark.client.reader import GROUP_MESSAGES, MAX_GROUP, MAX_GROUP_BYTES, group_full


@pytest.mark.parametrize(
    ("entries", "messages", "size", "full"),
    [
        (1, 1000, 100_000, False),
        (8, 7999, 800_000, False),  # eight batches of a thousand are not yet a group
        (8, 8000, 800_000, True),
        (20, 8000, 1_600_000, True),  # small batches: as many messages, in more entries
        (31, 3100, 310_000, False),
        (32, 3200, 320_000, True),  # batches of 100: the entry cap comes first
        (3, 30, MAX_GROUP_BYTES, True),  # large messages: the byte cap
    ],
)
def test_a_group_is_full_at_its_messages_entries_or_bytes(
    entries: int, messages: int, size: int, full: bool
) -> None:
    assert (GROUP_MESSAGES, MAX_GROUP, MAX_GROUP_BYTES) == (8000, 32, 4 * 1024 * 1024)
    assert group_full(entries, messages, size) is full
