"""TLS to the gateway: the certificate and key the gateway's TLS listener (`--gateway-tls-bind-address`) serves,
so a crawler's token (its proxy password) never crosses a network in clear. Called by `fleet.gateway.process`.

The listener is the same HTTP/1.1 front-end on the same core (`fleet.gateway.server.Gateway.handle`), behind
asyncio's own TLS server layer (`start_server(ssl=...)`, the handshake bounded by the header timeout): a handshake
done on a connection the front-end already read from would lose the client's hello to the stream's buffer (uvloop
reads before the handler runs), so the TLS layer is the transport's from its first byte.

`ServerCert` holds the pair in force, a `WatchedFile` over both files (their mtime, size and inode): looked at
when a connection arrives, at most every `watched.RECHECK` s. The listener's context never changes; its
`sni_callback` (called on every client hello, with or without a server name) puts the context of the pair in force
on the connection, so a new pair serves new connections while open ones keep theirs. A new pair that cannot be used
(a key others may read, a certificate that is not the key's, half-written files) is logged once and the last good
one stays. The key is read as the CA key is (`intercept.private_key`: refused when others may read it) and loaded
from an anonymous memory file, never logged.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fleet.gateway import intercept
from fleet.gateway.watched import MAX_FILE, Stamp, WatchedFile, stamp_of
from fleet.logs import kv
from fleet.untrusted import FileProblem, read_bounded

log = logging.getLogger("fleet.gateway")

CERT_FLAG, KEY_FLAG = "--gateway-tls-cert-file", "--gateway-tls-key-file"


class TlsError(ValueError):
    """The certificate and key cannot be served (the message names the files and why, never the key's bytes)."""


@dataclass(frozen=True)
class Pair:
    context: ssl.SSLContext
    fingerprint: str  # the leaf certificate's SHA-256, as `openssl x509 -fingerprint -sha256` prints it
    not_after: str


def server_context() -> ssl.SSLContext:
    """A server context as every one here is: TLS 1.2 or later, ALPN http/1.1 only (the front-end there is)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(intercept.ALPN)
    return ctx


def load_pair(cert_file: str, key_file: str) -> Pair:
    """The context serving `cert_file` (PEM, the leaf first, then any intermediates) with `key_file`; TlsError when
    the key is readable by others, the files are not PEM, or the certificate is not the key's."""
    try:
        key_pem = intercept.private_key(Path(key_file), f"{KEY_FLAG} (a private key)")
    except intercept.CaError as exc:
        raise TlsError(f"{KEY_FLAG} {exc}") from None
    try:
        chain_pem = read_bounded(cert_file, MAX_FILE, f"{CERT_FLAG} {cert_file}")
    except FileProblem as exc:
        raise TlsError(str(exc)) from None
    ctx = server_context()
    try:
        intercept.load_chain(ctx, chain_pem, key_pem)
    except ssl.SSLError as exc:
        reason = getattr(exc, "reason", None) or str(exc)  # `reason`: OpenSSL's; the encrypted key's has none
        if reason == "KEY_VALUES_MISMATCH":
            raise TlsError(f"{CERT_FLAG} {cert_file} is not the certificate of {KEY_FLAG} {key_file}") from None
        raise TlsError(f"{CERT_FLAG} {cert_file} and {KEY_FLAG} {key_file} are not a PEM certificate and an "
                       f"unencrypted PEM key ({reason})") from None
    try:
        first = chain_pem.decode("ascii")
        der = ssl.PEM_cert_to_DER_cert(first[:first.index("-----END CERTIFICATE-----") + 25])
    except (UnicodeDecodeError, ValueError):
        raise TlsError(f"{CERT_FLAG} {cert_file}: not a PEM certificate") from None
    digest = hashlib.sha256(der).hexdigest().upper()
    return Pair(ctx, ":".join(digest[i:i + 2] for i in range(0, len(digest), 2)), _not_after(der))


def _not_after(der: bytes) -> str:
    from cryptography import x509

    try:
        return x509.load_der_x509_certificate(der).not_valid_after_utc.isoformat()
    except ValueError:
        return ""


class ServerCert(WatchedFile[Pair]):
    """The pair in force, re-read when either file changes; `listener()` is the context the listener serves with."""

    flag = CERT_FLAG
    what = "TLS certificate"
    error = TlsError

    def __init__(self, cert_file: str, key_file: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.key_file = key_file
        super().__init__(cert_file, clock)

    def _stat(self) -> Stamp:
        return stamp_of(self.path, CERT_FLAG) + stamp_of(self.key_file, KEY_FLAG)

    def _read(self) -> tuple[Stamp, Pair]:
        stamp = self._stat()  # before the read: a pair written while it is read is read again at the next look
        return stamp, load_pair(self.path, self.key_file)

    def counts(self, value: Pair) -> Mapping[str, object]:
        return {"fingerprint": value.fingerprint, "not_after": value.not_after}

    def listener(self) -> ssl.SSLContext:
        """The listening socket's context: each client hello is served with the pair in force then."""
        ctx = server_context()

        def current(conn: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
            conn.context = self.refresh().context

        ctx.sni_callback = current
        return ctx


def started(cert: ServerCert, address: str) -> None:
    log.info("serving the gateway over TLS", extra=kv(address=address, certificate=cert.path,
                                                      fingerprint=cert.value.fingerprint,
                                                      not_after=cert.value.not_after))
