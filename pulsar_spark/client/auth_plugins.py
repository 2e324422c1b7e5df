"""The Java client's auth plugins by name (``authPluginClassName``) and their parameter
strings (``authParams``), turned into :class:`~pulsar_spark.client.auth.Authentication` values.

Errors name the options and the accepted forms, never the value of the parameters.
"""

from __future__ import annotations

from pulsar_spark.client.auth import (
    NO_AUTH,
    Authentication,
    BasicAuthentication,
    TlsAuthentication,
    TokenAuthentication,
    file_url_path,
    json_object,
    read_token_file,
)
from pulsar_spark.client.oauth2 import parse_oauth2
from pulsar_spark.errors import ConfigurationError, CredentialsError

TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
BASIC_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
OAUTH2_CLASS = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"
DISABLED_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationDisabled"


def parse_authentication(
    plugin: str | None, params: str | None, *, plugin_option: str, params_option: str
) -> Authentication:
    """The plugin ``plugin`` (a Java class name or a short alias) configured by ``params``.

    Errors name the options and the accepted forms, never the value of ``params``.
    """
    name = (plugin or "").strip()
    if not name or name == DISABLED_CLASS or name.lower() == "none":
        if params:
            raise ConfigurationError(
                f"option {params_option!r} is set but {plugin_option!r} is not: name the auth "
                f"plugin, e.g. {TOKEN_CLASS} (or 'token')"
            )
        return NO_AUTH
    kind = _PLUGINS.get(name) or _ALIASES.get(name.lower())
    if kind is None:
        raise ConfigurationError(
            f"option {plugin_option!r}: unknown auth plugin {name!r}; supported: "
            f"{', '.join(_PLUGINS)} (or the short names {', '.join(_ALIASES)})"
        )
    text = (params or "").strip()
    if not text:
        raise ConfigurationError(
            f"option {params_option!r} is required with {kind}: {_FORMS[kind]}"
        )
    return _BUILDERS[kind](text, params_option)


def _token(text: str, option: str) -> Authentication:
    if text.startswith("{"):
        value = _json_params(text, option, "token").get("token")
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"option {option!r}: {_FORMS['token']}")
        text = value.strip()
    if text.startswith("file:"):
        path = file_url_path(text, option)
        read_token_file_checked(path, option)
        return TokenAuthentication(path=path)
    token = text.removeprefix("token:").strip()
    if not token:
        raise ConfigurationError(f"option {option!r}: the token is empty; {_FORMS['token']}")
    return TokenAuthentication(token=token)


def _tls(text: str, option: str) -> Authentication:
    values = _key_values(text, option, "tls")
    cert, key = values.get("tlsCertFile"), values.get("tlsKeyFile")
    if not cert or not key:
        raise ConfigurationError(f"option {option!r}: {_FORMS['tls']}")
    return TlsAuthentication(cert_file=_strip_file(cert), key_file=_strip_file(key))


def _basic(text: str, option: str) -> Authentication:
    values = _key_values(text, option, "basic")
    user, password = values.get("userId"), values.get("password")
    if not user or password is None:
        raise ConfigurationError(f"option {option!r}: {_FORMS['basic']}")
    return BasicAuthentication(user_id=user, password=password)


def _oauth2(text: str, option: str) -> Authentication:
    return parse_oauth2(_json_params(text, option, "oauth2"), option, _FORMS["oauth2"])


def _key_values(text: str, option: str, kind: str) -> dict[str, str]:
    """``{"k": "v", ...}`` or ``k1:v1,k2:v2`` (the two forms the Java plugins accept)."""
    if text.startswith("{"):
        return {k: str(v) for k, v in _json_params(text, option, kind).items()}
    values = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if not sep:
            raise ConfigurationError(f"option {option!r}: {_FORMS[kind]}")
        values[key.strip()] = value.strip()
    return values


def _json_params(text: str, option: str, kind: str) -> dict[str, object]:
    values = json_object(text)
    if values is None:
        raise ConfigurationError(f"option {option!r} is not a JSON object; {_FORMS[kind]}")
    return values


def read_token_file_checked(path: str, option: str) -> None:
    try:
        read_token_file(path)
    except CredentialsError as exc:
        raise ConfigurationError(f"option {option!r}: {exc}") from exc


def _strip_file(value: str) -> str:
    return value[len("file://") :] if value.startswith("file://") else value


_BUILDERS = {"token": _token, "tls": _tls, "basic": _basic, "oauth2": _oauth2}
_PLUGINS = {TOKEN_CLASS: "token", TLS_CLASS: "tls", BASIC_CLASS: "basic", OAUTH2_CLASS: "oauth2"}
_ALIASES = {"token": "token", "tls": "tls", "basic": "basic", "oauth2": "oauth2"}
_FORMS = {
    "token": "give token:<jwt>, file:///path/to/token (read again whenever the broker asks), "
    'or {"token": "..."}',
    "tls": "give tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem "
    '(or {"tlsCertFile": "...", "tlsKeyFile": "..."})',
    "basic": 'give {"userId": "...", "password": "..."} (or userId:...,password:...)',
    "oauth2": 'give JSON {"issuerUrl": "https://...", "privateKey": "file:///path/credentials.json",'
    ' "audience": "...", "scope": "..."} (scope optional)',
}
