"""A real kube-apiserver on loopback for the tests, envtest-style.

`KubeServer(apiserver, workdir).start()` makes a CA, a serving certificate
for 127.0.0.1, an admin client certificate (group `system:masters`) and a
ServiceAccount key pair (Python's `cryptography`), starts one etcd
(`etcd` from PATH) and one kube-apiserver on free loopback ports, waits for
`/readyz`, writes an admin kubeconfig and installs the CRDs shipped in
`deploy/crd/` (waiting until they are Established). `stop()` ends both
processes and removes the working directory.

The binary comes from the environment: `FLEET_TEST_KUBE_APISERVER` names a
kube-apiserver (`../shared/tools/kube-apiserver/install DIR` puts one in
DIR; `.ci/run` does that when the folder is there). Without it the tests
that need the server are skipped with that reason (`tests/conftest.py`).

There is no controller-manager, scheduler or kubelet: no pod runs, a
deleted namespace stays Terminating, owner references are not collected and
no ServiceAccount token is made by itself (`token` asks the TokenRequest
API for one). Each test gets its own namespace (`namespace()`).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

from fleet.testing.procs import die_with_parent

ENV = "FLEET_TEST_KUBE_APISERVER"
ROOT = Path(__file__).resolve().parents[2]  # the checkout: deploy/crd is read from it
CRD_DIR = ROOT / "deploy" / "crd"
READY_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def configured() -> tuple[str | None, str]:
    """(the kube-apiserver path, "") when the environment names a usable
    one and etcd is on PATH; else (None, why the tests are skipped)."""
    path = os.environ.get(ENV, "")
    if not path:
        return None, (f"no real API server: set {ENV}=/path/to/kube-apiserver "
                      "(../shared/tools/kube-apiserver/install DIR puts one in DIR; .ci/run does it)")
    if not os.access(path, os.X_OK):
        return None, f"{ENV}={path} is not an executable file"
    if shutil.which("etcd") is None:
        return None, "etcd is not on PATH (apt-get install etcd-server; the install script does it)"
    return path, ""


# --- certificates ------------------------------------------------------------------


def _certs(d: Path) -> None:
    """ca.{crt,key}, apiserver.{crt,key} (127.0.0.1, localhost), admin.{crt,key}
    (CN admin, O system:masters), sa.{key,pub}: PEM files in `d`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key_pem(key: Any) -> bytes:
        return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))

    def name(cn: str, org: str | None = None) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("fleet-test-ca")).issuer_name(name("fleet-test-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    (d / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    def leaf(file: str, subject: x509.Name, usage: Any, sans: list[x509.GeneralName] | None = None) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        (d / f"{file}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (d / f"{file}.key").write_bytes(key_pem(key))

    leaf("apiserver", name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH,
         [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    leaf("admin", name("admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (d / "sa.key").write_bytes(key_pem(sa))
    (d / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))


# --- the server -----------------------------------------------------------------------


class KubeServer:
    """etcd + kube-apiserver for one test session; see the module docstring."""

    def __init__(self, apiserver: str, workdir: Path | None = None) -> None:
        self.apiserver = apiserver
        self.etcd = shutil.which("etcd") or "etcd"
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="fleet-kube-"))
        self._own_dir = workdir is None
        self.port = 0
        self.url = ""
        self.kubeconfig = str(self.dir / "admin.kubeconfig")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ssl: ssl.SSLContext | None = None

    # -- life ------------------------------------------------------------------------

    def start(self) -> KubeServer:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        d = self.dir
        (d / "certs").mkdir(parents=True, exist_ok=True)
        _certs(d)
        client_port, peer_port, self.port = free_port(), free_port(), free_port()
        self._spawn("etcd", [
            self.etcd, "--data-dir", str(d / "etcd"), "--name", "default",
            "--listen-client-urls", f"http://127.0.0.1:{client_port}", "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}", "--log-level", "warn",
        ])
        self._spawn("kube-apiserver", [
            self.apiserver, f"--etcd-servers=http://127.0.0.1:{client_port}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}", f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none", f"--cert-dir={d / 'certs'}",
        ])
        self.url = f"https://127.0.0.1:{self.port}"
        self._wait_ready()
        self.write_kubeconfig(self.kubeconfig, client_cert=(d / "admin.crt", d / "admin.key"))
        self.install_crds()

    def _spawn(self, role: str, argv: list[str]) -> None:
        with open(self.dir / f"{role}.log", "ab") as log:
            self.procs[role] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                                preexec_fn=die_with_parent)

    def log(self, role: str) -> str:
        path = self.dir / f"{role}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            for role, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{role} exited with {p.returncode}:\n{self.log(role)[-3000:]}")
            try:
                status, body = self.request("GET", "/readyz")
                if status == 200 and body.strip() == b"ok":
                    return
                last = f"{status} {body[-300:]!r}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(f"kube-apiserver not ready after {READY_TIMEOUT:.0f}s ({last}):\n{self.log('kube-apiserver')[-3000:]}")

    def stop(self) -> None:
        """End kube-apiserver, then etcd (SIGTERM, then SIGKILL after 15 s), and
        remove the working directory when the server made it."""
        for role in ("kube-apiserver", "etcd"):
            p = self.procs.pop(role, None)
            if p is None:
                continue
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- talking to it ------------------------------------------------------------------

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
            ctx.load_cert_chain(str(self.dir / "admin.crt"), str(self.dir / "admin.key"))
            self._ssl = ctx
        return self._ssl

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                token: str | None = None) -> tuple[int, bytes]:
        """One request as the admin (or with a bearer `token`): (status, body)."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
            ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        else:
            ctx = self._context()
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def json(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201),
             content_type: str = "application/json") -> dict[str, Any]:
        """A request whose answer must be one of `ok`; the decoded body."""
        status, raw = self.request(method, path, body, content_type)
        if status not in ok:
            raise AssertionError(f"{method} {path}: {status} {raw[:2000].decode(errors='replace')}")
        out: dict[str, Any] = json.loads(raw) if raw else {}
        return out

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create `obj`, or replace it (a PUT with the current resourceVersion) when it exists."""
        path = collection_path(obj)
        status, raw = self.request("POST", path, obj)
        if status == 409:
            current = self.json("GET", f"{path}/{obj['metadata']['name']}")
            body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
            return self.json("PUT", f"{path}/{obj['metadata']['name']}", body)
        if status not in (200, 201):
            raise AssertionError(f"create {obj['kind']} {obj['metadata'].get('name')}: {status} {raw[:2000].decode(errors='replace')}")
        out: dict[str, Any] = json.loads(raw)
        return out

    def install_crds(self) -> None:
        names = []
        for path in sorted(CRD_DIR.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    self.apply(doc)
                    names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + 30
        for n in names:
            while True:
                crd = self.json("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or ()}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {n} not Established: {crd.get('status')}")
                time.sleep(0.1)
        # discovery of the new group can lag Established by a moment
        for n in names:
            plural, group = n.split(".", 1)
            crd = self.json("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
            version = crd["spec"]["versions"][0]["name"]
            while self.request("GET", f"/apis/{group}/{version}/{plural}")[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{n} not served")
                time.sleep(0.1)

    def namespace(self, prefix: str = "t") -> str:
        """A new namespace with a unique name."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def token(self, namespace: str, account: str, seconds: int = 3600) -> str:
        """A token of ServiceAccount namespace/account (TokenRequest; the account must exist)."""
        out = self.json("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": seconds}})
        return str(out["status"]["token"])

    def write_kubeconfig(self, path: str, *, client_cert: tuple[Path, Path] | None = None, token: str | None = None,
                         namespace: str = "default") -> str:
        """A kubeconfig for this server: the admin's client certificate, or a bearer token."""
        user: dict[str, Any] = {}
        if client_cert:
            user = {"client-certificate-data": base64.b64encode(client_cert[0].read_bytes()).decode(),
                    "client-key-data": base64.b64encode(client_cert[1].read_bytes()).decode()}
        if token:
            user = {"token": token}
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": self.url, "certificate-authority-data": base64.b64encode((self.dir / "ca.crt").read_bytes()).decode()}}],
            "users": [{"name": "test", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
        }
        Path(path).write_text(yaml.safe_dump(cfg))
        return path

    def kubeconfig_for(self, namespace: str, account: str, path: str) -> str:
        """A kubeconfig authenticating as ServiceAccount namespace/account."""
        return self.write_kubeconfig(path, token=self.token(namespace, account), namespace=namespace)

    def can(self, user: str, verb: str, resource: str, namespace: str = "", group: str = "",
            groups: tuple[str, ...] = (), name: str = "") -> tuple[bool, str]:
        """The real authorizer's answer to a SubjectAccessReview (`kubectl auth
        can-i VERB RESOURCE -n NAMESPACE --as USER`): (allowed, reason)."""
        resource_name, _, sub = resource.partition("/")
        attrs: dict[str, Any] = {"verb": verb, "resource": resource_name, "group": group}
        if sub:
            attrs["subresource"] = sub
        if namespace:
            attrs["namespace"] = namespace
        if name:
            attrs["name"] = name
        spec: dict[str, Any] = {"user": user, "resourceAttributes": attrs}
        if groups:
            spec["groups"] = list(groups)
        out = self.json("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                        {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        st = out.get("status") or {}
        return bool(st.get("allowed")), str(st.get("reason") or st.get("evaluationError") or "")


# Kinds the harness can POST: where each collection lives.
_CORE = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "Secret": "secrets", "ConfigMap": "configmaps",
         "Service": "services", "Pod": "pods", "PersistentVolumeClaim": "persistentvolumeclaims"}


def collection_path(obj: dict[str, Any]) -> str:
    """The REST collection of `obj`, from its apiVersion, kind and namespace."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    ns = (obj.get("metadata") or {}).get("namespace")
    if kind in _CORE and api_version == "v1":
        base, plural = "/api/v1", _CORE[kind]
    else:
        plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
                  "RoleBinding": "rolebindings", "Deployment": "deployments", "CustomResourceDefinition": "customresourcedefinitions",
                  "Proxy": "proxies", "ProviderHealth": "providerhealths", "Lease": "leases",
                  "NetworkPolicy": "networkpolicies", "ProxyPool": "proxypools"}.get(kind, kind.lower() + "s")
        base = f"/apis/{api_version}"
    return f"{base}/namespaces/{ns}/{plural}" if ns and kind != "Namespace" else f"{base}/{plural}"


def apply_all(server: KubeServer, objects: list[dict[str, Any]]) -> None:
    """Apply every object (`fleet render`'s output, as `kubectl apply -f -`), namespaces first."""
    for obj in sorted(objects, key=lambda o: o["kind"] != "Namespace"):
        server.apply(obj)


def render_installation(server: KubeServer, providers_text: str, namespace: str, installation: str | None = None,
                        proxy_namespaces: tuple[str, ...] | None = None, workdir: Path | None = None) -> list[dict[str, Any]]:
    """`fleet render -c FILE --namespace NAMESPACE [--installation ID] [--proxy-namespaces ...] | kubectl apply -f -`
    on this server, creating the namespaces it needs first; the objects rendered."""
    from fleet.cli.render import render
    from fleet.config import load

    d = Path(workdir or tempfile.mkdtemp(prefix="fleet-render-"))
    path = d / "providers.yaml"
    path.write_text(providers_text)
    objects = render(load(str(path)), providers_text, namespace=namespace, installation=installation,
                     proxy_namespaces=proxy_namespaces)
    wanted = {namespace, *(o["metadata"].get("namespace") for o in objects if o["metadata"].get("namespace"))}
    for ns in sorted(n for n in wanted if n and n != "*"):
        status, raw = server.request("POST", "/api/v1/namespaces",
                                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if status not in (201, 409):
            raise AssertionError(f"namespace {ns}: {status} {raw[:300]!r}")
    apply_all(server, objects)
    return objects
