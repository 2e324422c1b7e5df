"""TLS for broker connections: the trust and identity settings as an SSLContext, and the
record layer kept apart from the socket.

How this works
--------------
OpenSSL must not read and write one SSL object from two threads at once, and a connection has
a reader thread while callers send. So the socket stays a plain socket and TLS runs over
memory buffers (:class:`ssl.SSLObject` with two :class:`ssl.MemoryBIO`): :meth:`TlsChannel.
encrypt` and :meth:`TlsChannel.decrypt` turn bytes into records and back under one lock, and
only the sending side ever drains the outgoing buffer, so records leave in the order OpenSSL
made them. A record OpenSSL produces while decrypting (a TLS 1.3 key update) waits in that
buffer and goes out in front of the next frame sent (the keep-alive ping sends one at the
latest).
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading
import time
from dataclasses import dataclass

from pulsar_spark.errors import ConfigurationError, TlsError


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """How to verify the broker and, for mutual TLS, who we are.

    ``trust_certs_file`` is a PEM bundle of CAs (the system store when None). Hostname
    verification is on unless turned off; ``allow_insecure`` accepts any certificate.
    """

    trust_certs_file: str | None = None
    allow_insecure: bool = False
    verify_hostname: bool = True
    cert_file: str | None = None
    key_file: str | None = None


_READ_CHUNK = 1 << 16
# What a handshake that never starts most likely means, for a Pulsar broker.
PULSAR_TLS_PORT_HINT = "pulsar+ssl:// needs the broker's TLS port, usually 6651"


@functools.lru_cache(maxsize=32)
def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The SSLContext for ``settings`` (one per process and settings: contexts are reused)."""
    try:
        context = ssl.create_default_context(cafile=settings.trust_certs_file)
        if settings.allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif not settings.verify_hostname:
            context.check_hostname = False
        if settings.cert_file is not None:
            context.load_cert_chain(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"TLS set-up failed: {_files(settings)}: {exc}") from exc
    return context


def _files(settings: TlsSettings) -> str:
    named = [
        f"{what} {path}"
        for what, path in (
            ("trust file", settings.trust_certs_file),
            ("certificate", settings.cert_file),
            ("key", settings.key_file),
        )
        if path is not None
    ]
    return ", ".join(named) or "system trust store"


class TlsChannel:
    """One TLS session over memory buffers; the caller moves bytes to and from the socket."""

    def __init__(
        self, settings: TlsSettings, hostname: str, *, port_hint: str = PULSAR_TLS_PORT_HINT
    ) -> None:
        self.settings = settings
        self._port_hint = port_hint
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = client_context(settings).wrap_bio(
            self._incoming, self._outgoing, server_hostname=hostname
        )
        self._lock = threading.Lock()

    def handshake(self, sock: socket.socket, address: object, timeout: float) -> None:
        """Run the TLS handshake over ``sock`` within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError as exc:
                raise TlsError(
                    f"TLS handshake with {address} failed: the broker's certificate was not "
                    f"accepted: {exc.verify_message} (trusted: {_trust(self.settings)})"
                ) from exc
            except ssl.SSLError as exc:
                raise TlsError(
                    f"TLS handshake with {address} failed: {exc.reason or exc}"
                    f"{_hint(exc, self._port_hint)} (trusted: {_trust(self.settings)})"
                ) from exc
            else:
                sock.sendall(self._outgoing.read())
                return
            sock.sendall(self._outgoing.read())
            self._feed_handshake(sock, address, deadline, timeout)

    def _feed_handshake(
        self, sock: socket.socket, address: object, deadline: float, timeout: float
    ) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TlsError(
                f"TLS handshake with {address} did not complete within {timeout:g}s; is it a "
                f"TLS port? ({self._port_hint})"
            )
        sock.settimeout(remaining)
        try:
            data = sock.recv(_READ_CHUNK)
        except TimeoutError:
            return
        except OSError as exc:
            raise TlsError(f"TLS handshake with {address} failed: {exc}") from exc
        if not data:
            raise TlsError(
                f"{address} closed the connection during the TLS handshake; is it a TLS port? "
                f"({self._port_hint})"
            )
        self._incoming.write(data)

    def encrypt(self, data: bytes | memoryview) -> bytes:
        """Records for ``data``, behind any record made while decrypting."""
        with self._lock:
            self._tls.write(data)
            return self._outgoing.read()

    def decrypt(self, data: bytes | memoryview) -> bytes:
        """The plaintext that ``data`` completes (may be empty); b"" also at the peer's close."""
        with self._lock:
            self._incoming.write(data)
            chunks = []
            while True:
                try:
                    chunk = self._tls.read(_READ_CHUNK)
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)


def _trust(settings: TlsSettings) -> str:
    if settings.allow_insecure:
        return "any certificate (tlsAllowInsecureConnection)"
    where = settings.trust_certs_file or "the system trust store"
    return where if settings.verify_hostname else f"{where}, hostname not verified"


def _hint(exc: ssl.SSLError, port_hint: str) -> str:
    if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"; the peer does not speak TLS there ({port_hint})"
    return ""
