"""A self-signed certificate for a loopback origin, and an HTTPS `LoopbackServer` over it: the origin a browser or
a crawler reaches through a tunnel, which nobody between them can read."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from fleet.testing.http import Backlogged, LoopbackServer


def self_signed(directory: Path, ip: str = "127.0.0.1", *more: str) -> tuple[Path, Path]:
    """(certificate, key) PEM files for `ip` and the `more` addresses (its subjectAltName), valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(a)) for a in (ip, *more)]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "origin.crt", directory / "origin.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


class _HandshakeInThread(Backlogged):
    """The TLS handshake in the connection's own thread, not in the accept loop, where one slow or silent client
    (a browser's preconnect) would hold up every other connection."""

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError):
            return  # a client that went away or spoke no TLS: nothing to serve
        super().finish_request(request, client_address)


def https_server(handler: type[BaseHTTPRequestHandler], directory: Path, name: str = "origin-https",
                 host: str = "127.0.0.1", certificate: tuple[Path, Path] | None = None) -> LoopbackServer:
    """A `LoopbackServer` speaking TLS (HTTP/1.1 by ALPN) with `certificate` (cert, key), else a self-signed one
    for `host`."""
    cert, key = certificate or self_signed(directory, host)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    tls.set_alpn_protocols(["http/1.1"])
    server = LoopbackServer(handler, name, host, server=_HandshakeInThread)
    server.httpd.socket = tls.wrap_socket(server.httpd.socket, server_side=True, do_handshake_on_connect=False)
    server.url = server.url.replace("http://", "https://", 1)
    return server
