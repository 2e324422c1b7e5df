"""The two bounds every position option takes, ``earliest`` and ``latest``, and the JSON
objects the options take otherwise (Pulsar's positions per partition, TubeMQ's offsets)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pulsar_spark.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Earliest:
    pass


@dataclass(frozen=True, slots=True)
class Latest:
    pass


def bound_or_json(
    option: str, text: str, what: str, example: str
) -> Earliest | Latest | dict[str, Any]:
    """``earliest``, ``latest`` or a non-empty JSON object of ``what`` (errors name ``option``
    and show ``example``), as startingOffsets/endingOffsets take them."""
    value = text.strip()
    if value.lower() == "earliest":
        return Earliest()
    if value.lower() == "latest":
        return Latest()
    return json_object(option, text, what, example, "neither 'earliest', 'latest' nor")


def json_object(option: str, text: str, what: str, example: str, instead: str) -> dict[str, Any]:
    """A non-empty JSON object of ``what``; errors say the text is ``instead`` one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"option {option!r}: {text!r} is {instead} a JSON object of {what} ({exc.msg})"
        ) from exc
    if not isinstance(data, dict) or not data:
        raise ConfigurationError(
            f"option {option!r}: expected a non-empty JSON object of {what}, e.g. {example}"
        )
    return data
