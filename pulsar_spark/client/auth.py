"""Authentication plugins: what a connection sends in CONNECT and answers to AUTH_CHALLENGE.

A plugin is a frozen value built once from ``authPluginClassName`` + ``authParams`` (the Java
client's names and parameter formats). It is hashable (part of the connection pool's key) and
picklable (it travels to executor tasks); its repr and every error it raises leave secrets out.
:meth:`Authentication.credentials` is asked for fresh credentials on every CONNECT and on every
challenge, so a token file is read again each time and an OAuth2 token is renewed in time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import unquote, urlsplit

from pulsar_spark.errors import ConfigurationError, CredentialsError


class Authentication:
    """What every plugin offers; see :class:`NoAuthentication` and the plugins below."""

    __slots__ = ()
    plugin: ClassVar[str]
    method: ClassVar[str | None]

    def credentials(self, timeout: float, stale: bytes | None = None) -> bytes:
        """The ``auth_data`` to send now: read again or renewed when needed. ``stale`` is what
        the broker asked to replace (a refresh challenge): a plugin that caches credentials
        gets new ones rather than return those again."""
        return b""

    def describe(self) -> str:
        """The plugin and method, for errors; never a secret."""
        return f"auth plugin {self.plugin} (method {self.method!r})"


@dataclass(frozen=True, slots=True)
class NoAuthentication(Authentication):
    """No authentication: CONNECT carries no method and no data."""

    plugin: ClassVar[str] = "AuthenticationDisabled"
    method: ClassVar[str | None] = None


NO_AUTH = NoAuthentication()


@dataclass(frozen=True, slots=True)
class TokenAuthentication(Authentication):
    """A JWT given inline (``token:...``) or in a file read again for every use."""

    plugin: ClassVar[str] = "AuthenticationToken"
    method: ClassVar[str | None] = "token"
    token: str = field(default="", repr=False)
    path: str | None = None

    def credentials(self, timeout: float, stale: bytes | None = None) -> bytes:
        if self.path is None:
            return self.token.encode()
        return read_token_file(self.path).encode()


@dataclass(frozen=True, slots=True)
class BasicAuthentication(Authentication):
    """A user id and password, sent as ``userId:password``."""

    plugin: ClassVar[str] = "AuthenticationBasic"
    method: ClassVar[str | None] = "basic"
    user_id: str = ""
    password: str = field(default="", repr=False)

    def credentials(self, timeout: float, stale: bytes | None = None) -> bytes:
        return f"{self.user_id}:{self.password}".encode()


@dataclass(frozen=True, slots=True)
class TlsAuthentication(Authentication):
    """Mutual TLS: the client certificate is the credential; CONNECT carries only the method."""

    plugin: ClassVar[str] = "AuthenticationTls"
    method: ClassVar[str | None] = "tls"
    cert_file: str = ""
    key_file: str = ""


def read_token_file(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CredentialsError(f"cannot read the token file {path}: {exc.strerror}") from exc
    if not token:
        raise CredentialsError(f"the token file {path} is empty")
    return token


def json_object(text: str | bytes) -> dict[str, object] | None:
    """``text`` parsed as a JSON object, or None if it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def file_url_path(url: str, option: str) -> str:
    """The local path of a ``file:///path`` (or ``file:/path``) URL."""
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        raise ConfigurationError(
            f"option {option!r}: a file must be given as file:///absolute/path"
        )
    return unquote(parts.path)
