"""The TLS listener's certificate pair (`fleet.gateway.tlsfront`) on real files and real handshakes (in memory):
which key modes are refused, why a pair cannot be served, a new pair served to the next hello while the first
stays when a new one is broken (logged once); and `fleet render` mounting the pair only when asked."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import ssl
from pathlib import Path

import pytest

from fleet.cli import render as rendering
from fleet.config import load
from fleet.gateway import intercept, tlsfront
from fleet.settings import Settings
from fleet.testing.tls import issue, make_ca, self_signed
from tests.deploy.conftest import THREE, by_kind, of_component, pod


@pytest.fixture
def pair(tmp_path):
    ca = make_ca(tmp_path)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    fingerprint = issue(ca, cert, key)
    return ca, cert, key, fingerprint


@pytest.mark.parametrize(("mode", "ok"), [(0o600, True), (0o400, True), (0o640, False), (0o604, False),
                                          (0o644, False), (0o440, False)])
def test_a_key_of_its_owner_only_is_read(pair, mode, ok):
    _, _, key, _ = pair
    key.chmod(mode)
    if ok:
        assert b"PRIVATE KEY" in intercept.private_key(key)
    else:
        with pytest.raises(intercept.CaError, match=f"readable by others \\(mode {mode:04o}\\)"):
            intercept.private_key(key)


def test_group_read_passes_only_when_the_group_is_the_processs_own_and_the_file_another_users(pair, monkeypatch):
    """A Kubernetes Secret under the pod's fsGroup: root-owned, 0440, group = the process's group."""
    _, _, key, _ = pair
    key.chmod(0o440)
    st = os.stat(key)
    monkeypatch.setattr(os, "geteuid", lambda: st.st_uid + 1)  # the file is another user's
    monkeypatch.setattr(os, "getegid", lambda: st.st_gid)
    assert b"PRIVATE KEY" in intercept.private_key(key)
    monkeypatch.setattr(os, "getegid", lambda: st.st_gid + 1)  # a group this process is not
    with pytest.raises(intercept.CaError):
        intercept.private_key(key)
    key.chmod(0o444)  # others: never
    monkeypatch.setattr(os, "getegid", lambda: st.st_gid)
    with pytest.raises(intercept.CaError):
        intercept.private_key(key)


def test_pairs_that_cannot_be_served_are_refused_with_the_files_named(pair, tmp_path):
    _, cert, key, fingerprint = pair
    got = tlsfront.load_pair(str(cert), str(key))
    assert got.fingerprint.replace(":", "").lower() == fingerprint
    _, other_key = self_signed(tmp_path)
    cases = {
        "is not the certificate of --gateway-tls-key-file": (str(cert), str(other_key)),
        "missing.key": (str(cert), str(tmp_path / "missing.key")),
        "cannot read --gateway-tls-cert-file": (str(tmp_path / "missing.crt"), str(key)),
        "not a PEM certificate and an unencrypted PEM key": (str(key), str(key)),
    }
    for message, (c, k) in cases.items():
        with pytest.raises(tlsfront.TlsError, match=message) as exc:
            tlsfront.load_pair(c, k)
        assert "PRIVATE KEY" not in str(exc.value)


def test_an_encrypted_key_is_refused_not_prompted_for(pair, tmp_path):
    from cryptography.hazmat.primitives import serialization

    _, cert, key, _ = pair
    loaded = serialization.load_pem_private_key(key.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"secret")))
    locked.chmod(0o600)
    with pytest.raises(tlsfront.TlsError, match="unencrypted PEM key"):
        tlsfront.load_pair(str(cert), str(locked))


def _served(listener: ssl.SSLContext, ca: Path) -> str:
    """The fingerprint a client sees in a handshake with `listener` (memory BIOs, no sockets)."""
    client_ctx = ssl.create_default_context(cafile=str(ca))
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    server = listener.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side, out, into in ((client, c_out, s_in), (server, s_out, c_in)):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
            into.write(out.read())
    assert client.selected_alpn_protocol() is None or client.selected_alpn_protocol() == "http/1.1"
    return hashlib.sha256(client.getpeercert(binary_form=True) or b"").hexdigest()


def test_a_new_pair_serves_the_next_hello_and_a_broken_one_is_logged_once(pair, tmp_path, caplog):
    ca, cert, key, first = pair
    now = [0.0]
    served = tlsfront.ServerCert(str(cert), str(key), clock=lambda: now[0])
    listener = served.listener()
    assert _served(listener, ca[0]) == first
    second = issue(ca, cert, key)
    assert _served(listener, ca[0]) == first  # not looked at again before RECHECK
    now[0] += 5
    assert _served(listener, ca[0]) == second
    other = tmp_path / "other"
    other.mkdir()
    issue(ca, cert, other / "k")  # a certificate of another key
    caplog.set_level(logging.INFO, "fleet.gateway")
    for _ in range(3):
        now[0] += 5
        assert _served(listener, ca[0]) == second
    refused = [r for r in caplog.records if "not usable" in r.getMessage()]
    assert len(refused) == 1 and "PRIVATE KEY" not in caplog.text


def _gateway(settings: Settings | None, tmp_path: Path) -> list[dict]:
    path = tmp_path / "providers.yaml"
    path.write_text(THREE)
    return of_component(rendering.render(load(str(path)), THREE, settings=settings), "gateway")


def test_render_mounts_the_tls_secret_only_when_the_listener_is_asked_for(tmp_path):
    plain = _gateway(None, tmp_path)
    (d,) = by_kind(plain, "Deployment").values()
    assert all(v["name"] != "tls" for v in pod(d)["volumes"])
    assert [p["name"] for p in by_kind(plain, "Service")["fleet-gateway"]["spec"]["ports"]] == ["proxy", "metrics"]

    objs = _gateway(Settings(gateway_tls_bind_address=":8443"), tmp_path)
    (d,) = by_kind(objs, "Deployment").values()
    spec = pod(d)
    (c,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FLEET_GATEWAY_TLS_BIND_ADDRESS"] == ":8443"
    assert env["FLEET_GATEWAY_TLS_CERT_FILE"] == "/etc/fleet/gateway-tls/tls.crt"
    assert env["FLEET_GATEWAY_TLS_KEY_FILE"] == "/etc/fleet/gateway-tls/tls.key"
    assert {"name": "proxy-tls", "containerPort": 8443} in c["ports"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "fleet-gateway-tls" and volume["secret"]["defaultMode"] == 0o400
    assert {"name": "tls", "mountPath": "/etc/fleet/gateway-tls", "readOnly": True} in c["volumeMounts"]
    ports = by_kind(objs, "Service")["fleet-gateway"]["spec"]["ports"]
    assert {"name": "proxy-tls", "port": 8443, "targetPort": "proxy-tls"} in ports
    Settings(**{k.removeprefix("FLEET_").lower(): v for k, v in env.items()
                if k.startswith("FLEET_GATEWAY_TLS")}).validate()
    with pytest.raises(rendering.RenderError, match="port 8888"):
        _gateway(Settings(gateway_tls_bind_address=":8888"), tmp_path)
