"""Options as Spark hands them over: a case-insensitive string map read with typed errors.

Every error names the option and what it accepts. Options the Java client knows but that
mean nothing here are accepted with one warning per process, so a job moved from a JVM
connector keeps running. Java options that ask for something this connector does not do, and
that it would silently not get (encryption, a TLS restriction, a partition router), are
refused with what would happen instead (:class:`Unsupported`): a job asking for encryption must
never send or read plain text unknowingly. Anything else unknown is refused with a did-you-mean
hint. No error shows an option's value: some are passwords.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pulsar_spark.errors import ConfigurationError

log = logging.getLogger(__name__)

# The one topic to read or write; reads also take a list or a pattern instead.
TOPIC = "topic"

# streamnative/pulsar-spark's admin REST endpoint and the settings of its admin client. Nothing
# in this connector uses the admin API (maxBytesPerTrigger is counted over the binary
# protocol), so they are accepted, on reads and writes, with the no-effect warning.
ADMIN_URL = "admin.url"
ADMIN_SETTINGS = "pulsar.admin."

# Keys Spark itself may put into a source's or sink's options.
SPARK_OPTIONS = ("path", "checkpointlocation", "queryname")

# Units of a duration such as "30s" or "15m", in seconds, as Spark writes time strings (a bare
# number is milliseconds, as in Kafka's maxTriggerDelay).
DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+)\s*([a-z]*)")

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


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A Java client option whose request this connector would not honour, refused.

    ``instead`` says what would happen if it were ignored (and what to do), ending the error.
    ``accepted`` lists the values (any case) that ask for nothing beyond what the connector
    does anyway, usually the Java default: those are accepted with the no-effect warning.
    """

    name: str
    instead: str
    accepted: tuple[str, ...] = ()

    def asks_nothing(self, value: str) -> bool:
        return value.strip().lower() in {v.lower() for v in self.accepted}

    def error(self) -> ConfigurationError:
        only = (
            f" (only {' or '.join(repr(v) for v in self.accepted)} is accepted)"
            if self.accepted
            else ""
        )
        return ConfigurationError(
            f"option {self.name!r} is not supported yet{only}: {self.instead}"
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
        unsupported: Collection[Unsupported] = (),
        *,
        system: str = "Pulsar",
        prefixes_without_effect: Collection[str] = (),
    ) -> None:
        """Refuse an option that is neither ``known`` nor one of ``without_effect`` (names
        the Java client has, accepted with a warning that they change nothing here), and one
        of ``unsupported`` unless its value asks for nothing. An option starting with one of
        ``prefixes_without_effect`` (a whole family of Java settings) is accepted with the
        warning too."""
        lower = {k.lower(): k for k in known}
        ignored = {k.lower(): k for k in without_effect}
        refused = {u.name.lower(): u for u in unsupported}
        prefixes = tuple(p.lower() for p in prefixes_without_effect)
        for key, value in self._values.items():
            if key in lower or key in SPARK_OPTIONS:
                continue
            if prefixes and key.startswith(prefixes):
                _warn_without_effect(key)
                continue
            if key in refused:
                if not refused[key].asks_nothing(str(value)):
                    raise refused[key].error()
                _warn_without_effect(refused[key].name)
                continue
            if key in ignored:
                _warn_without_effect(ignored[key])
                continue
            names = lower | ignored | {k: u.name for k, u in refused.items()}
            close = difflib.get_close_matches(key, list(names), n=1)
            hint = f" Did you mean {names[close[0]]!r}?" if close else ""
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

    def duration(self, name: str, default: str) -> float:
        """A positive duration in seconds, written as a whole number and a unit ("30s",
        "5m"; a bare number is milliseconds)."""
        text = self.get(name)
        given = default if text is None else text
        match = _DURATION.fullmatch(given.strip().lower())
        unit = "ms" if match is None or not match[2] else match[2]
        if match is None or unit not in DURATION_UNITS or int(match[1]) <= 0:
            raise ConfigurationError(
                f"option {name!r} must be a positive duration such as '30s', '5m' or '1h' "
                f"(units: {', '.join(DURATION_UNITS)}; a bare number is milliseconds), "
                f"got {text!r}"
            )
        return int(match[1]) * DURATION_UNITS[unit]

    def boolean(self, name: str, *, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise ConfigurationError(f"option {name!r} must be 'true' or 'false', got {text!r}")
        return lowered == "true"


def refuse_overwrite(overwrite: bool, system: str) -> None:
    """Refuse a write in overwrite mode: topics only ever grow."""
    if overwrite:
        raise ConfigurationError(
            f"{system} topics are append-only: use mode('append') (overwrite would need to "
            "delete messages, which the connector never does)"
        )
