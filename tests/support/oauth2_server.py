"""A loopback OAuth2 issuer for the client-credentials grant.

It serves the OpenID discovery document, its signing key as a JSON Web Key Set and a token
endpoint; a client that posts the right ``client_id``/``client_secret`` gets an RS256 JWT (see
:mod:`tokens`) whose subject is its client id, issued by :attr:`OAuth2Server.issuer_url` for
the audience the client asked for. A broker verifies it with the issuer's public key, as Apache
Pulsar's OpenID Connect provider does with the key set it fetches from the issuer.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import rsa

from . import tokens

DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/.well-known/jwks.json"
TOKEN_PATH = "/oauth2/token"
KEY_ID = "pulsar-spark-test-issuer"


@dataclass
class TokenRequests:
    """What the token endpoint was asked: how many tokens it issued, and the last form."""

    served: int = 0
    refused: int = 0
    last_form: dict[str, str] = field(default_factory=dict)


class OAuth2Server:
    """An issuer at :attr:`issuer_url` for the clients in ``clients`` (id to secret)."""

    def __init__(self, clients: Mapping[str, str], *, lifetime: float = 3600.0) -> None:
        """Start serving on a free loopback port, with a new RSA key to sign tokens with."""
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.clients = dict(clients)
        self.lifetime = lifetime
        """Seconds a new token is valid for (settable; ``expires_in`` is its whole part)."""
        self.requests = TokenRequests()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.issuer_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.token_endpoint = self.issuer_url + TOKEN_PATH
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def write_credentials_file(self, path: Path, client_id: str, client_secret: str) -> Path:
        """Write the JSON key file Apache Pulsar's OAuth2 client plugin reads; return ``path``."""
        path.write_text(
            json.dumps(
                {
                    "type": "client_credentials",
                    "client_id": client_id,
                    "client_secret": client_secret,
                    "issuer_url": self.issuer_url,
                }
            )
        )
        return path

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OAuth2Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _discovery(self) -> dict[str, object]:
        return {
            "issuer": self.issuer_url,
            "token_endpoint": self.token_endpoint,
            "jwks_uri": self.issuer_url + JWKS_PATH,
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_post"],
        }

    def _key_set(self) -> dict[str, object]:
        numbers = self.key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": KEY_ID,
                    "n": _b64_number(numbers.n),
                    "e": _b64_number(numbers.e),
                }
            ]
        }

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, object]]:
        with self._lock:
            self.requests.last_form = dict(form)
            if form.get("grant_type") != "client_credentials":
                self.requests.refused += 1
                return 400, {"error": "unsupported_grant_type"}
            client_id = form.get("client_id", "")
            if client_id not in self.clients or self.clients[client_id] != form.get(
                "client_secret"
            ):
                self.requests.refused += 1
                return 401, {"error": "invalid_client"}
            lifetime = self.lifetime
            self.requests.served += 1
        now = time.time()
        claims: dict[str, object] = {
            "iss": self.issuer_url,
            "sub": client_id,
            "iat": int(now),
            "nbf": int(now),
            "exp": math.ceil(now + lifetime),
        }
        if form.get("audience"):
            claims["aud"] = form["audience"]
        token = tokens.sign_rs256(claims, self.key, KEY_ID)
        body: dict[str, object] = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(lifetime),
        }
        if "scope" in form:
            body["scope"] = form["scope"]
        return 200, body

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == DISCOVERY_PATH:
                    self._reply(200, issuer._discovery())
                elif path == JWKS_PATH:
                    self._reply(200, issuer._key_set())
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace")
                if self.path.split("?")[0] != TOKEN_PATH:
                    self._reply(404, {"error": "not_found"})
                    return
                form = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
                self._reply(*issuer._token(form))

            def _reply(self, status: int, body: dict[str, object]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                """Keep test output quiet."""

        return Handler


def _b64_number(value: int) -> str:
    data = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
