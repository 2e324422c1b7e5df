"""Options as Spark hands them over: a case-insensitive string map read with typed errors.

Every error names the option and what it accepts. Options the Java client knows but that
mean nothing here are accepted with one warning per process, so a job moved from a JVM
connector keeps running; anything else unknown is refused with a did-you-mean hint.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Collection, Mapping

from pulsar_spark.errors import ConfigurationError

log = logging.getLogger(__name__)

# The one topic to read or write; reads also take a list or a pattern instead.
TOPIC = "topic"

# Keys Spark itself may put into a source's or sink's options.
SPARK_OPTIONS = ("path", "checkpointlocation", "queryname")

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_without_effect(name: str) -> None:
    with _warned_lock:
        if name in _warned:
            return
        _warned.add(name)
    log.warning(
        "option %r is accepted for compatibility with the Java Pulsar client but has no "
        "effect in pulsar-spark",
        name,
    )


class OptionValues:
    """Case-insensitive access with typed, option-naming errors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._values = {k.lower(): v for k, v in options.items()}

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        return None if value is None else str(value)

    def has(self, name: str) -> bool:
        return name.lower() in self._values

    def refuse_unknown(
        self,
        known: tuple[str, ...],
        purpose: str,
        without_effect: Collection[str] = (),
        *,
        system: str = "Pulsar",
    ) -> None:
        """Refuse an option that is neither ``known`` nor one of ``without_effect`` (names
        the Java client has, accepted with a warning that they change nothing here)."""
        lower = {k.lower(): k for k in known}
        ignored = {k.lower(): k for k in without_effect}
        for key in self._values:
            if key in lower or key in SPARK_OPTIONS:
                continue
            if key in ignored:
                _warn_without_effect(ignored[key])
                continue
            close = difflib.get_close_matches(key, [*lower, *ignored], n=1)
            hint = f" Did you mean {(lower | ignored)[close[0]]!r}?" if close else ""
            raise ConfigurationError(
                f"unknown option {key!r} for {purpose} {system}.{hint} "
                f"Known options: {', '.join(known)}"
            )

    def required(self, name: str, what: str) -> str:
        value = self.get(name)
        if value is None or not value.strip():
            raise ConfigurationError(f"option {name!r} is required: {what}")
        return value.strip()

    def positive_int(self, name: str, default: int) -> int:
        text = self.get(name)
        if text is None:
            return default
        try:
            value = int(text.strip())
        except ValueError as exc:
            raise ConfigurationError(
                f"option {name!r} must be a positive integer, got {text!r}"
            ) from exc
        if value <= 0:
            raise ConfigurationError(f"option {name!r} must be a positive integer, got {value}")
        return value

    def boolean(self, name: str, *, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ConfigurationError(f"option {name!r} must be 'true' or 'false', got {text!r}")
        return lowered == "true"
