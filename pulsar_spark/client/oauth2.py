"""OAuth2 client credentials (Java's ``AuthenticationOAuth2``): a token from the issuer, cached.

The token endpoint is found through the issuer's OpenID configuration
(``<issuerUrl>/.well-known/openid-configuration``, key ``token_endpoint``). The client id and
secret come from the key file named by ``privateKey`` (``file:///path`` or a ``data:`` URL),
read again at every fetch so rotated credentials are picked up. The access token goes to the
broker with the ``token`` method. One token per configuration is kept per process and renewed
once most of its lifetime has passed, or when a broker's challenge says the token a connection
sent has expired (an issuer's ``exp`` may fall before ``expires_in`` says), so every
connection and every challenge of a long query gets a token that is still valid.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import ClassVar

from pulsar_spark.client.auth import Authentication, file_url_path, json_object
from pulsar_spark.errors import ConfigurationError, CredentialsError

RENEW_AFTER = 0.8
"""Fraction of a token's lifetime after which it is renewed before use."""


@dataclass(frozen=True, slots=True)
class OAuth2Authentication(Authentication):
    plugin: ClassVar[str] = "AuthenticationOAuth2"
    method: ClassVar[str | None] = "token"
    issuer_url: str = ""
    private_key: str = ""  # file:///path or data:...; names where the secret is, not the secret
    audience: str | None = None
    scope: str | None = None

    def credentials(self, timeout: float, stale: bytes | None = None) -> bytes:
        return _cache.token(self, timeout, None if stale is None else stale.decode()).encode()


def parse_oauth2(params: dict[str, object], option: str, form: str) -> OAuth2Authentication:
    issuer, key = params.get("issuerUrl"), params.get("privateKey")
    if not isinstance(issuer, str) or not isinstance(key, str) or not issuer or not key:
        raise ConfigurationError(
            f"option {option!r}: issuerUrl and privateKey are required; {form}"
        )
    if urllib.parse.urlsplit(issuer).scheme not in ("http", "https"):
        raise ConfigurationError(f"option {option!r}: issuerUrl must be an http(s) URL")
    if key.startswith("file:"):
        file_url_path(key, option)
    elif not key.startswith("data:"):
        raise ConfigurationError(
            f"option {option!r}: privateKey must be file:///path/credentials.json or a data: URL"
        )
    audience, scope = params.get("audience"), params.get("scope")
    auth = OAuth2Authentication(
        issuer_url=issuer.rstrip("/"),
        private_key=key,
        audience=str(audience) if audience else None,
        scope=str(scope) if scope else None,
    )
    try:
        _client_credentials(auth)
    except CredentialsError as exc:
        raise ConfigurationError(f"option {option!r}: {exc}") from exc
    return auth


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    renew_at: float  # time.monotonic()


class _TokenCache:
    """One token per configuration; concurrent askers wait for a single fetch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[OAuth2Authentication, _Token] = {}
        self._fetching: dict[OAuth2Authentication, threading.Lock] = {}

    def token(self, auth: OAuth2Authentication, timeout: float, stale: str | None) -> str:
        """The cached token, or a new one if it is due for renewal or is ``stale``."""
        with self._lock:
            fetch_lock = self._fetching.setdefault(auth, threading.Lock())
        with fetch_lock:
            cached = self._tokens.get(auth)
            fresh_enough = cached is not None and time.monotonic() < cached.renew_at
            if cached is not None and fresh_enough and cached.value != stale:
                return cached.value
            fresh = _fetch_token(auth, timeout)
            self._tokens[auth] = fresh
            return fresh.value


_cache = _TokenCache()


def _fetch_token(auth: OAuth2Authentication, timeout: float) -> _Token:
    client_id, client_secret = _client_credentials(auth)
    endpoint = _token_endpoint(auth, timeout)
    form = {"grant_type": "client_credentials", "client_id": client_id}
    form["client_secret"] = client_secret
    if auth.audience:
        form["audience"] = auth.audience
    if auth.scope:
        form["scope"] = auth.scope
    started = time.monotonic()
    answer = _http_json(
        urllib.request.Request(
            endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        ),
        f"the token endpoint {endpoint} (client id {client_id!r})",
        timeout,
    )
    token = answer.get("access_token")
    if not isinstance(token, str) or not token:
        raise CredentialsError(f"the token endpoint {endpoint} answered without an access_token")
    lifetime = answer.get("expires_in")
    if not isinstance(lifetime, int | float) or lifetime <= 0:
        return _Token(token, float("inf"))
    return _Token(token, started + RENEW_AFTER * float(lifetime))


def _token_endpoint(auth: OAuth2Authentication, timeout: float) -> str:
    url = f"{auth.issuer_url}/.well-known/openid-configuration"
    answer = _http_json(urllib.request.Request(url), f"the OpenID configuration {url}", timeout)
    endpoint = answer.get("token_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise CredentialsError(f"the OpenID configuration {url} names no token_endpoint")
    return endpoint


def _http_json(request: urllib.request.Request, what: str, timeout: float) -> dict[str, object]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise CredentialsError(f"{what} refused: HTTP {exc.code}{_oauth_error(exc)}") from None
    except (OSError, ValueError) as exc:
        raise CredentialsError(f"{what} could not be reached: {exc}") from None
    answer = json_object(body)
    if answer is None:
        raise CredentialsError(f"{what} did not answer with a JSON object")
    return answer


def _oauth_error(exc: urllib.error.HTTPError) -> str:
    """The standard ``error`` code of an OAuth2 error answer (nothing else of the body)."""
    try:
        code = json.loads(exc.read()).get("error")
    except (ValueError, AttributeError, OSError):
        return ""
    return f" ({code})" if isinstance(code, str) else ""


def _client_credentials(auth: OAuth2Authentication) -> tuple[str, str]:
    """client_id and client_secret from the key file (read now, so rotation is seen)."""
    where = "the privateKey data URL"
    try:
        if auth.private_key.startswith("file:"):
            where = file_url_path(auth.private_key, "privateKey")
            with open(where, encoding="utf-8") as file:
                text = file.read()
        else:
            text = _data_url(auth.private_key)
    except OSError as exc:
        raise CredentialsError(f"cannot read the OAuth2 key file {where}: {exc.strerror}") from None
    except ValueError:
        raise CredentialsError(f"{where} is not a data: URL") from None
    values = json_object(text)
    if values is None:
        raise CredentialsError(f"{where} is not a JSON key file")
    client_id, client_secret = values.get("client_id"), values.get("client_secret")
    if not isinstance(client_id, str) or not isinstance(client_secret, str):
        raise CredentialsError(f"{where} must hold client_id and client_secret")
    return client_id, client_secret


def _data_url(url: str) -> str:
    header, sep, data = url.partition(",")
    if not sep:
        raise ValueError("not a data URL")
    if header.endswith(";base64"):
        return base64.b64decode(data).decode()
    return urllib.parse.unquote(data)
