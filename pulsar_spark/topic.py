"""Topic names: parsing and expanding ``persistent://tenant/namespace/local-name``.

Short names follow Pulsar's conventions: ``events`` means
``persistent://public/default/events`` and ``tenant/ns/events`` means
``persistent://tenant/ns/events``. A partition of a partitioned topic is the topic
``<name>-partition-<i>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pulsar_spark.errors import ConfigurationError

PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(?P<base>.+)-partition-(?P<index>\d+)$")
_DOMAINS = ("persistent", "non-persistent")


@dataclass(frozen=True, slots=True)
class TopicName:
    """A fully qualified topic name, split into its parts."""

    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a short or fully qualified topic name; raise ConfigurationError if invalid."""
        text = name.strip()
        if not text:
            raise ConfigurationError("topic name is empty")
        domain = "persistent"
        qualified = "://" in text
        if qualified:
            domain, _, text = text.partition("://")
            if domain not in _DOMAINS:
                raise ConfigurationError(
                    f"topic {name!r}: domain must be one of {', '.join(_DOMAINS)}"
                )
        parts = text.split("/")
        if len(parts) == 1 and not qualified:
            parts = ["public", "default", parts[0]]
        if len(parts) != 3 or not all(parts):
            raise ConfigurationError(
                f"topic {name!r} is not a valid name: use 'name', 'tenant/namespace/name' "
                "or 'persistent://tenant/namespace/name'"
            )
        return cls(domain, parts[0], parts[1], parts[2])

    @property
    def full_name(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The partition index if this names one partition, else -1."""
        match = _PARTITION_RE.match(self.local_name)
        return int(match.group("index")) if match else -1

    @property
    def base_name(self) -> str:
        """The full name without any ``-partition-N`` suffix."""
        match = _PARTITION_RE.match(self.full_name)
        return match.group("base") if match else self.full_name

    def partition(self, index: int) -> str:
        """Full name of partition ``index`` of this topic."""
        return f"{self.full_name}{PARTITION_SUFFIX}{index}"

    def __str__(self) -> str:
        return self.full_name


def full_topic_name(name: str) -> str:
    """Expand a short topic name to its fully qualified form."""
    return TopicName.parse(name).full_name
