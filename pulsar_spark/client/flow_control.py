"""How many permits a reader grants, and when: memory stays bounded whatever the broker counts.

How this works
--------------
Permits are what a broker may send ahead of the reader. Apache Pulsar counts them in
*messages* (a batched entry of 1000 messages costs 1000; it sends whole entries, so permits may
run negative). pulsar-lite counts *entries*: one permit, one entry, however many messages it
holds, so a window meant as 50,000 messages would let it send 50,000 entries, which is often
the whole topic, queued in memory. The connection says which kind of broker it is (pulsar-lite
names itself in its Connected answer), and :class:`FlowControl` turns the reader's window into
the broker's unit:

1. **Slow start.** The first grant is small (:data:`FIRST_GRANT`); the window opens once the
   first entries show how many messages an entry holds and how large they are.
2. **A window in messages and in bytes.** The window is ``window`` messages, or fewer when
   that many would exceed ``max_bytes`` at the sizes seen so far (50,000 values of 10 KB would
   be 500 MB); for a broker that counts entries it is divided by the messages per entry.
3. **A byte cap.** No permits are granted while the entries received and not yet taken by the
   reader exceed ``max_bytes`` (sizes vary); the next entry the reader takes brings the grant.

Grants are batched: nothing is sent until at least half the window can be given back, which
keeps Flow commands (and the acknowledgements sent just before them) rare.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_spark.protocol.connection import is_pulsar_lite

FIRST_GRANT = 4
"""Permits of the first Flow: one entry or a few single messages, on either kind of broker."""

DEFAULT_MAX_QUEUED_BYTES = 16 * 1024 * 1024
"""Payload bytes the broker may send ahead of the reader."""


def counts_entries(server_version: str) -> bool:
    """Whether a broker counts Flow permits per entry instead of per message (pulsar-lite)."""
    return is_pulsar_lite(server_version)


@dataclass
class FlowControl:
    """Permit accounting for one consumer; see the module docstring."""

    window: int  # messages the broker may send ahead of the reader
    counts_entries: bool = False  # the broker counts permits per entry (pulsar-lite)
    max_bytes: int = DEFAULT_MAX_QUEUED_BYTES
    granted: int = 0  # permits granted so far, in the broker's unit
    messages: int = 0  # messages in the entries taken so far
    entries: int = 0  # entries taken so far
    size: int = 0  # payload bytes of the entries taken so far
    _last_target: int = 0  # the window as last computed (0: not yet)

    def first_grant(self) -> int:
        """Permits for the Flow sent right after subscribing."""
        return self.grant(min(self.window, FIRST_GRANT))

    def grant(self, permits: int) -> int:
        """Record ``permits`` sent in a Flow (the first, a nudge, or a regular grant)."""
        self.granted += permits
        return permits

    def on_entry(self, messages: int, size: int, queued_bytes: int) -> int:
        """The reader took an entry of ``messages`` messages and ``size`` payload bytes; the
        queue still holds ``queued_bytes``. Return the permits to grant now (0: none)."""
        self.messages += messages
        self.entries += 1
        self.size += size
        if queued_bytes > self.max_bytes:
            return 0
        outstanding = self.granted - self._spent()
        if self._last_target and outstanding * 2 > self._last_target:
            return 0  # more than half the window still on its way: nothing to compute
        target = self._last_target = self._target()
        missing = target - outstanding
        if missing * 2 < target:
            return 0
        return self.grant(missing)

    def _spent(self) -> int:
        return self.entries if self.counts_entries else self.messages

    def _target(self) -> int:
        """The window in the broker's unit, from the sizes seen so far."""
        per_message = max(1, self.size // max(1, self.messages))
        messages = max(1, min(self.window, self.max_bytes // per_message))
        if not self.counts_entries:
            return messages
        return max(1, messages * self.entries // max(1, self.messages))
