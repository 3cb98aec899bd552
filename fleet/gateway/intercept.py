"""TLS interception, for the clients that ask for it (`intercept: true` in the clients file): the gateway ends the
crawler's TLS with a leaf certificate for the CONNECT's host, signed by fleet's own CA, and opens its own TLS to the
origin through the chosen proxy's tunnel, verified against the system's trust (and an optional extra bundle). Inside,
the requests are plain HTTP to the gateway: status and body bans, retries on another proxy, cooldowns per host.

- `Authority`: the CA (`ca.crt`, `ca.key` in `--gateway-ca-dir`, a mounted Secret in a cluster; the key refused when
  its file is readable by anyone but its owner, never logged) and a bounded cache of leaf contexts. The leaves share
  one key made at start (as mitmproxy's do): a leaf costs a certificate signature, not a key pair.
- `origin_context`: the client side to origins (ALPN http/1.1, hostname checked, `--gateway-origin-ca-file` added).
- `secure`: the upstream TLS handshake on a tunnel's channel; a certificate the origin's name does not verify is
  `DialError(decide.UNTRUSTED_ORIGIN)` with the verifier's reason, never accepted.

A leaf is loaded into its `ssl.SSLContext` from an anonymous memory file (`os.memfd_create`): the leaf key never
touches a disk.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import stat
from collections import OrderedDict
from pathlib import Path

from fleet.gateway import decide
from fleet.gateway.dialers import Channel, DialError

CERT_FILE, KEY_FILE = "ca.crt", "ca.key"
MAX_LEAVES = 1000  # leaf contexts cached (least recently used dropped); a leaf is made again in about a millisecond
LEAF_DAYS = 30
CA_YEARS = 10
ALPN = ["http/1.1"]  # HTTP/1.1 inside: the front-end the gateway has


class CaError(ValueError):
    """The CA cannot be used or made (the message names the file and why)."""


def make_ca(directory: Path, common_name: str = "fleet gateway CA") -> None:
    """A new CA in `directory`: `ca.key` (0600, created exclusively: an existing key is never overwritten) and
    `ca.crt`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fleet")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365 * CA_YEARS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(directory / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CaError(f"{directory / KEY_FILE} exists: a CA key is never overwritten") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    (directory / CERT_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def ensure_ca(directory: Path) -> bool:
    """The CA in `directory`, made when the directory holds neither file; True when it was made."""
    cert, key = directory / CERT_FILE, directory / KEY_FILE
    if cert.exists() or key.exists():
        return False
    make_ca(directory)
    return True


def private_key(path: Path, what: str = "the CA key") -> bytes:
    """A key file's bytes, refused when its mode lets anyone else read it: others never; its group only when the
    group is this process's own and the file is another user's (a Kubernetes Secret volume under the pod's
    fsGroup: root-owned, mode 0440 whatever its defaultMode, readable by this process through that group alone)."""
    try:
        st = os.stat(path)  # a Secret's file is a symlink into ..data: its target's mode is what counts
    except OSError as exc:
        raise CaError(f"{path}: {exc.strerror}") from None
    through_group = st.st_gid == os.getegid() and st.st_uid != os.geteuid()
    if st.st_mode & stat.S_IRWXO or (st.st_mode & stat.S_IRWXG and not through_group):
        raise CaError(f"{path}: {what} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); make it 0600 "
                      f"or 0400 (a Secret volume: defaultMode: 0400)")
    with open(path, "rb") as f:
        return f.read(64 * 1024)


class Authority:
    """The CA and its leaves. `context_for(host)` is the server context for one CONNECT host (cached, at most
    `max_leaves`): its certificate names the host, and a client hello naming another host is refused (the origin's
    certificate is checked against the CONNECT's host, so the two must agree)."""

    def __init__(self, directory: Path, max_leaves: int = MAX_LEAVES) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key_pem = private_key(directory / KEY_FILE)
        try:
            cert_pem = (directory / CERT_FILE).read_bytes()
        except OSError as exc:
            raise CaError(f"{directory / CERT_FILE}: {exc.strerror}") from None
        try:
            self._ca_key = serialization.load_pem_private_key(key_pem, password=None)
            self.certificate = x509.load_pem_x509_certificate(cert_pem)
        except (ValueError, TypeError) as exc:  # never the key's bytes in the message
            raise CaError(f"{directory}: the CA files are not a PEM certificate and an unencrypted PEM key "
                          f"({type(exc).__name__})") from None
        if self.certificate.public_key().public_numbers() != self._ca_key.public_key().public_numbers():  # type: ignore[union-attr]
            raise CaError(f"{directory}: {CERT_FILE} is not the certificate of {KEY_FILE}")
        self.certificate_pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = self._leaf_key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption())
        self.max_leaves = max_leaves
        self._leaves: OrderedDict[str, tuple[ssl.SSLContext, float]] = OrderedDict()
        self.made = 0  # leaves made (the cache's misses)

    def fingerprint(self) -> str:
        """The CA certificate's SHA-256 fingerprint, as `openssl x509 -fingerprint -sha256` prints it."""
        from cryptography.hazmat.primitives import hashes

        return ":".join(f"{b:02X}" for b in self.certificate.fingerprint(hashes.SHA256()))

    def __repr__(self) -> str:  # never the keys
        return f"Authority({self.certificate.subject.rfc4514_string()!r}, leaves={len(self._leaves)})"

    def context_for(self, host: str) -> ssl.SSLContext:
        host = host.lower().rstrip(".")
        now = datetime.datetime.now(datetime.UTC).timestamp()
        got = self._leaves.get(host)
        if got is not None and got[1] > now:
            self._leaves.move_to_end(host)
            return got[0]
        ctx = self._context(host)
        self._leaves[host] = (ctx, now + LEAF_DAYS * 86400 / 2)  # made again at half its validity
        self._leaves.move_to_end(host)
        while len(self._leaves) > self.max_leaves:
            self._leaves.popitem(last=False)
        self.made += 1
        return ctx

    def _context(self, host: str) -> ssl.SSLContext:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.UTC)
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
                .issuer_name(self.certificate.subject).public_key(self._leaf_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
                .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self._ca_key.public_key()), critical=False)  # type: ignore[arg-type]
                .sign(self._ca_key, hashes.SHA256()))  # type: ignore[arg-type]
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(ALPN)
        load_chain(ctx, cert.public_bytes(serialization.Encoding.PEM) + self.certificate_pem, self._leaf_key_pem)

        def same_host(_obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> int | None:
            if name is None or name.lower().rstrip(".") == host:
                return None
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME

        ctx.sni_callback = same_host
        return ctx


def load_chain(ctx: ssl.SSLContext, chain_pem: bytes, key_pem: bytes) -> None:
    """`load_cert_chain` reads files only: these are anonymous memory files, gone when closed. An encrypted key is
    an SSLError here, never a passphrase prompt on the terminal."""
    fds = [os.memfd_create("fleet-leaf", os.MFD_CLOEXEC) for _ in range(2)]
    try:
        for fd, data in zip(fds, (chain_pem, key_pem), strict=True):
            os.write(fd, data)
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}", password=_no_passphrase)
    finally:
        for fd in fds:
            os.close(fd)


def _no_passphrase() -> bytes:
    raise ssl.SSLError("the key is encrypted (fleet reads unencrypted PEM keys only)")


def origin_context(extra_ca_file: str | None = None) -> ssl.SSLContext:
    """The gateway's side of its TLS to origins: the system's trust plus `extra_ca_file`, the name checked."""
    ctx = ssl.create_default_context(cafile=None)
    if extra_ca_file:
        try:
            ctx.load_verify_locations(cafile=extra_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise CaError(f"--gateway-origin-ca-file {extra_ca_file}: not a readable PEM bundle ({exc})") from None
    ctx.set_alpn_protocols(ALPN)
    return ctx


async def secure(channel: Channel, host: str, context: ssl.SSLContext, timeout: float) -> Channel | DialError:
    """TLS to the origin over `channel` (a tunnel through a proxy), within `timeout`: the same channel, now
    encrypted, or why not — UNTRUSTED_ORIGIN (its `detail`: the verifier's reason), TIMEOUT, CONNECT_ERROR."""
    try:
        await channel.writer.start_tls(context, server_hostname=host, ssl_handshake_timeout=timeout)
    except ssl.SSLCertVerificationError as exc:
        channel.close()
        return DialError(decide.UNTRUSTED_ORIGIN, f"{host}: {exc.verify_message or exc.reason}")
    except TimeoutError:
        channel.close()
        return DialError(decide.TIMEOUT)
    except (ssl.SSLError, OSError, ConnectionError, EOFError) as exc:
        channel.close()
        return DialError(decide.CONNECT_ERROR, f"{host}: TLS failed ({type(exc).__name__})")
    return channel
