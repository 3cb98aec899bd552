"""The local provider against real squid processes on loopback ports.

Each test gets its own state directory under /tmp and a window of 100
ports; the fixtures kill and check for any squid left under the directory.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from providers import base
from providers.base import Deadline, State
from providers.local import process, squid
from providers.local.state import Record
from tests.providers.local.conftest import ORIGIN_BODY, request, squids_under, wait_for

pytestmark = pytest.mark.integration

SENTINEL = "SENTINEL-cloud-init-local-3e9d"


def d(seconds: float = 15.0) -> Deadline:
    return Deadline.after(seconds)


def running(provider, pid: str) -> base.Instance:
    return wait_for(lambda: (i := provider.get(pid, d())).state is State.RUNNING and i, 15, f"{pid} to run")


def fetch(proxy_port: int, url: str) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy_port}"}))
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


def record(state_dir: str, name: str) -> dict:
    with open(os.path.join(state_dir, name + ".json")) as f:
        return json.load(f)


def files_under(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                out[path] = fh.read()
    return out


# -- the proxy works, and only for its sources ----------------------------------------------


def test_a_request_through_the_proxy_reaches_the_origin(provider, ports, origin):
    req = request(next(ports))
    pid = provider.create(req, d())
    inst = running(provider, pid)
    assert (inst.id, inst.ip, inst.uid) == (pid, "127.0.0.1", req.uid)
    assert inst.created_at is not None
    assert fetch(req.port, origin) == (200, ORIGIN_BODY)


def test_connect_tunnels_to_the_origin(provider, ports, origin):
    req = request(next(ports))
    running(provider, provider.create(req, d()))
    host_port = origin.split("/")[2]
    with socket.create_connection(("127.0.0.1", req.port), timeout=10) as s:
        s.sendall(f"CONNECT {host_port} HTTP/1.1\r\nHost: {host_port}\r\n\r\n".encode())
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n".encode())
        body = b""
        while chunk := s.recv(4096):
            body += chunk
    assert body.endswith(ORIGIN_BODY)


def test_a_source_not_allowed_is_denied(make_provider, ports, origin):
    provider = make_provider(allowedSources=["10.0.0.0/8"])  # we connect from 127.0.0.1
    req = request(next(ports))
    running(provider, provider.create(req, d()))
    status, _ = fetch(req.port, origin)
    assert status == 403


def test_the_generated_config_is_not_an_open_proxy(make_provider, state_dir, ports):
    provider = make_provider()
    req = request(next(ports))
    provider.create(req, d())
    with open(os.path.join(state_dir, req.name, "squid.conf")) as f:
        lines = f.read().splitlines()
    assert "acl fleet_sources src 127.0.0.0/8" in lines
    assert [x for x in lines if x.startswith("http_access")] == ["http_access allow fleet_sources", "http_access deny all"]
    assert f"http_port 127.0.0.1:{req.port}" in lines


# -- state on disk, and what get reads back --------------------------------------------------


def test_the_record_holds_the_marks_and_the_process(provider, state_dir, ports):
    req = request(next(ports), installation="blue")
    pid = provider.create(req, d())
    rec = record(state_dir, req.name)
    assert rec["labels"] == {base.LABEL_MANAGED: "true", base.LABEL_UID: req.uid, base.LABEL_INSTALLATION: "blue",
                             base.LABEL_NAMESPACE: "default"}
    assert (rec["name"], rec["uid"], rec["namespace"], rec["proxyName"]) == (req.name, req.uid, "default", "p")
    assert (rec["port"], rec["bindAddress"]) == (req.port, "127.0.0.1")
    assert process.alive(rec["pid"], rec["startTicks"])
    assert provider.get(pid, d()).created_at == Record(**{k: v for k, v in rec.items() if k != "format"}).created()
    assert provider.get(pid, d()).installation == "blue" and provider.get(pid, d()).namespace == "default"


def test_get_reads_the_disk_not_memory(make_provider, ports):
    a, b = make_provider(), make_provider()  # two workers on one state dir
    req = request(next(ports))
    pid = a.create(req, d())
    assert running(b, pid).uid == req.uid
    b.delete(pid, d())
    with pytest.raises(base.NotFound):
        a.get(pid, d())


def test_a_killed_squid_is_stopped_and_delete_cleans_up(provider, state_dir, ports):
    req = request(next(ports))
    pid = provider.create(req, d())
    running(provider, pid)
    rec = record(state_dir, req.name)
    os.kill(rec["pid"], signal.SIGKILL)
    assert wait_for(lambda: provider.get(pid, d()).state is State.STOPPED, 10, "Stopped")
    assert provider.get(pid, d()).ip == ""
    assert provider.create(req, d()) == pid  # idempotent: no restart behind the reconciler's back
    assert provider.get(pid, d()).state is State.STOPPED
    provider.delete(pid, d())
    assert os.listdir(state_dir) == [".locks"]
    assert not [f for f in os.listdir(squid.SHM_DIR) if f.startswith(rec["service"])]  # SIGKILL left them; delete removed them


def test_delete_stops_the_process_and_removes_its_state(provider, state_dir, ports):
    req = request(next(ports))
    pid = provider.create(req, d())
    running(provider, pid)
    rec = record(state_dir, req.name)
    start = time.monotonic()
    provider.delete(pid, d())
    assert time.monotonic() - start < 5
    assert not process.alive(rec["pid"], rec["startTicks"])
    assert os.listdir(state_dir) == [".locks"]
    assert not [f for f in os.listdir(squid.SHM_DIR) if f.startswith(rec["service"])]
    with pytest.raises(base.NotFound):
        provider.get(pid, d())
    provider.delete(pid, d())  # twice is fine
    assert provider.list_by_tag(d()) == []


def test_get_keeps_returning_the_instance_while_a_delete_is_in_progress(provider, ports):
    req = request(next(ports))
    pid = provider.create(req, d())
    running(provider, pid)
    deleting = threading.Thread(target=provider.delete, args=(pid, d()))
    deleting.start()
    seen: list[State] = []
    repeat_took = None
    while deleting.is_alive():
        try:
            seen.append(provider.get(pid, d()).state)
        except base.NotFound:
            assert not deleting.is_alive() or not os.path.exists(provider.store.record_path(req.name))
            break
        if repeat_took is None and provider.store.read(req.name).deleting:
            t = time.monotonic()
            provider.delete(pid, d())  # a repeat while the first is at it: returns at once
            repeat_took = time.monotonic() - t
        time.sleep(0.05)
    deleting.join(10)
    assert seen, "get answered NotFound while the delete was still in progress"
    assert repeat_took is not None and repeat_took < 0.5
    with pytest.raises(base.NotFound):
        provider.get(pid, d())


# -- idempotency and concurrency -------------------------------------------------------------


def test_create_twice_is_one_process(provider, state_dir, ports):
    req = request(next(ports))
    pid = provider.create(req, d())
    assert provider.create(req, d()) == pid
    running(provider, pid)
    assert len(squids_under(state_dir)) == 1


def test_concurrent_creates_of_one_name_make_one_instance(make_provider, state_dir, ports):
    workers = [make_provider() for _ in range(2)]  # two workers, four threads each
    req = request(next(ports))
    got: list[str] = []
    errors: list[BaseException] = []

    def create(p):
        try:
            got.append(p.create(req, d()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(workers[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    assert set(got) == {f"local/{req.name}"} and len(got) == 8
    running(workers[0], got[0])
    assert len(squids_under(state_dir)) == 1


def test_concurrent_creates_of_one_port_make_one_instance(provider, state_dir, ports):
    port = next(ports)
    reqs = [request(port) for _ in range(4)]
    outcomes: list[object] = []

    def create(r):
        try:
            outcomes.append(provider.create(r, d()))
        except base.ProviderError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=create, args=(r,)) for r in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    ok = [o for o in outcomes if isinstance(o, str)]
    assert len(ok) == 1, outcomes
    assert all(isinstance(o, base.Transient) and f"port {port}" in str(o) for o in outcomes if o not in ok)
    assert len(squids_under(state_dir)) == 1


# -- ports -------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-1, 100, None])
def test_a_port_outside_the_range_is_permanent_before_anything_is_touched(provider, state_dir, port_window, offset):
    port = 3128 if offset is None else port_window[0] + offset
    with pytest.raises(base.Permanent) as err:
        provider.create(request(port), d())
    assert f"port {port}" in str(err.value) and f"{port_window[0]}-{port_window[1]}" in str(err.value)
    assert err.value.op == "create" and err.value.provider == "local-test"
    assert isinstance(err.value.__cause__, ValueError)
    assert os.listdir(state_dir) == []  # not even the lock directory


def test_a_port_held_by_another_process_is_transient(provider, state_dir, ports):
    port = next(ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(base.Transient) as err:
            provider.create(request(port), d())
    assert f"port {port} on 127.0.0.1 is in use by another process" in str(err.value)
    assert provider.list_by_tag(d()) == []
    provider.create(request(port), d())  # freed: fine now


def test_a_port_held_by_another_instance_is_transient(provider, ports):
    port = next(ports)
    first = provider.create(request(port), d())
    with pytest.raises(base.Transient) as err:
        provider.create(request(port), d())
    assert f"taken by {first}" in str(err.value)


# -- pids ---------------------------------------------------------------------------------------


@pytest.fixture
def stranger():
    """An unrelated process, started with start_new_session like squid."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    time.sleep(0.05)  # a later clock tick than the squid the test starts next (a start time is in 10 ms ticks)
    yield p
    p.kill()
    p.wait()


def test_a_recorded_pid_reused_by_another_process_is_never_killed(provider, state_dir, ports, stranger):
    req = request(next(ports))
    pid = provider.create(req, d())
    running(provider, pid)
    rec = record(state_dir, req.name)
    provider.store.write(provider.store.read(req.name).with_(pid=stranger.pid))  # the kernel gave squid's pid away
    os.kill(rec["pid"], signal.SIGKILL)
    assert provider.get(pid, d()).state is State.STOPPED
    provider.delete(pid, d())
    assert stranger.poll() is None, "delete killed a process that was not its squid"
    with pytest.raises(base.NotFound):
        provider.get(pid, d())


def test_a_record_without_a_pid_finds_its_squid_by_config(provider, state_dir, ports):
    """The starter died between starting squid and recording its pid."""
    req = request(next(ports))
    pid = provider.create(req, d())
    running(provider, pid)
    rec = record(state_dir, req.name)
    provider.store.write(provider.store.read(req.name).with_(pid=0, startTicks=0))
    assert provider.get(pid, d()).state is State.RUNNING
    provider.delete(pid, d())
    assert not process.alive(rec["pid"], rec["startTicks"])


def test_squid_outlives_the_worker_that_started_it(make_provider, state_dir, port_window):
    provider = make_provider()
    req = request(port_window[0] + 7)
    code = (
        "import sys; from providers.local.config import LocalConfig; from providers.local.provider import new;"
        "from providers.base import CreateRequest, Deadline;"
        f"p = new('local-test', LocalConfig(stateDir={state_dir!r}, portRange='{port_window[0]}-{port_window[1]}'));"
        f"print(p.create(CreateRequest(name={req.name!r}, uid={req.uid!r}, port={req.port}), Deadline.after(10)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr
    pid = out.stdout.strip()
    assert running(provider, pid).uid == req.uid  # the worker is gone; squid serves on
    provider.delete(pid, d())
    assert squids_under(state_dir) == []


# -- deadlines, lists, secrets ----------------------------------------------------------------------


def test_an_expired_deadline_returns_at_once(provider, ports):
    pid = provider.create(request(next(ports)), d())
    for call in (lambda dl: provider.create(request(next(ports)), dl), lambda dl: provider.get(pid, dl),
                 lambda dl: provider.delete(pid, dl), provider.list_by_tag):
        start = time.monotonic()
        with pytest.raises(base.Transient) as err:
            call(Deadline.after(-1))
        assert time.monotonic() - start < 0.5
        assert isinstance(err.value.__cause__, TimeoutError)
    assert provider.get(pid, d()).uid  # nothing was deleted


def test_a_busy_name_lock_is_transient_at_the_deadline(provider, ports):
    req = request(next(ports))
    provider.store.ensure()
    with provider.store.name_lock(req.name, d()):
        start = time.monotonic()
        with pytest.raises(base.Transient, match="holds instance"):
            provider.create(req, Deadline.after(0.3))
        assert time.monotonic() - start < 1.3


def test_list_leaves_out_an_unreadable_record_and_raises_on_an_unreadable_dir(make_provider, state_dir, ports, tmp_path):
    provider = make_provider()
    good = provider.create(request(next(ports)), d())
    with open(os.path.join(state_dir, "proxy-broken.json"), "w") as f:
        f.write("{not json")
    assert [i.id for i in provider.list_by_tag(d())] == [good]
    with pytest.raises(base.Transient):
        provider.get("local/proxy-broken", d())  # exists, unreadable: not NotFound
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(base.Transient) as err:
        make_provider(stateDir=str(blocked)).list_by_tag(d())
    assert err.value.op == "list"


def test_cloud_init_never_reaches_logs_or_disk(provider, state_dir, ports, caplog):
    caplog.set_level(logging.DEBUG)
    req = request(next(ports), cloud_init=f"#cloud-config\n# {SENTINEL}\n")
    pid = provider.create(req, d())
    running(provider, pid)
    provider.list_by_tag(d())
    for path, data in files_under(state_dir).items():
        assert SENTINEL.encode() not in data, path
    provider.delete(pid, d())
    with pytest.raises(base.Transient) as err:
        provider.create(req, Deadline.after(-1))
    assert SENTINEL not in str(err.value) and SENTINEL not in repr(req)
    assert SENTINEL not in caplog.text
    assert "started squid" in caplog.text  # the logs were captured


def test_create_returns_before_squid_listens(provider, ports):
    """SHOULD return once submitted: create does not wait for the port."""
    req = request(next(ports))
    start = time.monotonic()
    pid = provider.create(req, d())
    assert time.monotonic() - start < 1.0
    assert provider.get(pid, d()).state in (State.PROVISIONING, State.RUNNING)


def test_delete_of_a_corrupt_record_still_stops_its_squid(provider, state_dir, ports):
    req = request(next(ports))
    pid = provider.create(req, d())
    running(provider, pid)
    rec = record(state_dir, req.name)
    with open(os.path.join(state_dir, req.name + ".json"), "w") as f:
        f.write("{garbage")
    with pytest.raises(base.Transient):
        provider.get(pid, d())  # unreadable is not gone
    provider.delete(pid, d())
    assert not process.alive(rec["pid"], rec["startTicks"])
    assert os.listdir(state_dir) == [".locks"]
