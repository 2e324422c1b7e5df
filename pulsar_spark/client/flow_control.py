"""How many permits a reader grants, and when: memory stays bounded whatever the broker counts.

How this works
--------------
Permits are what a broker may send ahead of the reader, and brokers spend them differently:

- **pulsar-lite** counts *entries*: one permit, one entry, however many messages it holds.
- **Apache Pulsar** counts *messages* (a batched entry of 1000 messages costs 1000; permits
  run negative), but its dispatcher reads entries from storage by the permit count: while the
  consumer has permits left it reads ``min(permits, dispatcherMaxReadBatchSize)`` entries (100
  by default) at a time, each read ending when its entries are dispatched. A window of 50,000
  permits would thus bring 100 entries per read, 100,000 messages when each holds 1000, and
  500 permits as many entries as 5,000 permits would. (With ``preciseDispatcherFlowControl``
  on, a broker setting off by default, it reads ``permits / messages per entry`` entries
  instead: fewer.)

The connection says which kind of broker it is (pulsar-lite names itself in its Connected
answer), and :class:`FlowControl` keeps what is on its way or queued within the reader's
window, ``window`` messages, on either:

1. **Slow start.** The first grant is small (:data:`FIRST_GRANT`); the window opens once the
   first entries show how many messages an entry holds and how large they are.
2. **A window in messages and in bytes, granted as entries.** The window is ``window``
   messages, or fewer when that many would exceed ``max_bytes`` at the sizes seen so far
   (50,000 values of 10 KB would be 500 MB), divided by the messages per entry: the entries
   the reader lets come ahead of it. On pulsar-lite the permits outstanding *are* entries
   ahead of the reader. On Apache Pulsar a read brings at most as many entries as the
   consumer had permits, so the reader grants only when the broker has none left (its
   permits, estimated from what was granted, taken and queued, are at or below zero) and
   half the window has been taken from the queue, and then just enough for the permits to
   become the entries missing from the window.
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

    def on_entry(self, messages: int, size: int, queued_bytes: int, queued_entries: int) -> int:
        """The reader took an entry of ``messages`` messages and ``size`` payload bytes; the
        queue still holds ``queued_entries`` entries of ``queued_bytes``. Return the permits
        to grant now (0: none)."""
        self.messages += messages
        self.entries += 1
        self.size += size
        if queued_bytes > self.max_bytes:
            return 0
        if self.counts_entries:
            return self._grant_entries()
        return self._grant_for_reads(queued_entries)

    def _grant_entries(self) -> int:
        """pulsar-lite: the permits outstanding are the entries on their way or queued."""
        outstanding = self.granted - self.entries
        if self._last_target and outstanding * 2 > self._last_target:
            return 0  # more than half the window still on its way: nothing to compute
        target = self._last_target = self._window_entries()
        missing = target - outstanding
        if missing * 2 < target:
            return 0
        return self.grant(missing)

    def _grant_for_reads(self, queued_entries: int) -> int:
        """Apache Pulsar: a read brings as many entries as the broker has permits (see the
        module docstring), so permits are granted once it has none, up to the entries
        missing from the window."""
        if self.broker_permits(queued_entries) > 0:
            return 0  # the broker reads on by itself
        target = self._window_entries()
        missing = target - queued_entries
        if missing * 2 < target:
            return 0
        return self.grant(missing - self.broker_permits(queued_entries))

    def broker_permits(self, queued_entries: int) -> int:
        """The permits a broker that counts messages has left, estimated: those granted, less
        the messages taken and those of the ``queued_entries`` not yet taken (at the average
        size seen). Entries still on their way make it an overestimate, which only delays a
        grant until they arrive."""
        queued_messages = queued_entries * self.messages // max(1, self.entries)
        return self.granted - self.messages - queued_messages

    def _window_entries(self) -> int:
        """The window in entries, from the sizes seen so far."""
        per_message = max(1, self.size // max(1, self.messages))
        messages = max(1, min(self.window, self.max_bytes // per_message))
        return max(1, messages * self.entries // max(1, self.messages))
