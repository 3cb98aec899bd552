"""A self-signed certificate for a loopback origin, and an HTTPS `LoopbackServer` over it: the origin a browser or
a crawler reaches through a tunnel, which nobody between them can read; a CA and the certificates it issues for
127.0.0.1 (the gateway's TLS listener)."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
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


def make_ca(directory: Path) -> tuple[Path, Any, Any]:
    """A CA for a day: its certificate's file (`ca.pem` in `directory`), the certificate and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test gateway CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    path = directory / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def issue(ca: tuple[Path, Any, Any], cert_path: Path, key_path: Path) -> str:
    """A server certificate for 127.0.0.1 signed by `ca`, written as the gateway's pair (by rename, as a Secret
    update swaps its files); its SHA-256 fingerprint (hex)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    _, ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    for path, data, mode in ((key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()), 0o600),
                             (cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)):
        tmp = path.with_suffix(".new")
        tmp.write_bytes(data)
        tmp.chmod(mode)
        os.replace(tmp, path)
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


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
