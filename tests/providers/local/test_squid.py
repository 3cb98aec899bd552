"""squid.conf text (never an open proxy), service names, who squid runs as,
and the /proc helpers (pid + start time identity, listening sockets)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from providers.base import Deadline
from providers.local import process, squid
from providers.local.squid import RunAs, config_text, service_name, unreachable_by


def conf_lines(**kw) -> list[str]:
    args = {"bind": "127.0.0.1", "port": 31300, "instance_dir": "/var/lib/fleet/local/x/proxy-a", "sources": ["127.0.0.0/8"]}
    return config_text(**{**args, **kw}).splitlines()


def test_the_config_allows_only_the_sources_and_denies_the_rest():
    lines = [line for line in conf_lines(sources=["10.0.0.0/8", "192.168.1.7/32"]) if not line.startswith("#")]
    access = [line for line in lines if line.startswith("http_access")]
    assert access == ["http_access allow fleet_sources", "http_access deny all"]  # the last rule denies
    assert "acl fleet_sources src 10.0.0.0/8 192.168.1.7/32" in lines
    assert not any("allow all" in line for line in lines)


def test_the_config_listens_caches_nothing_and_keeps_to_its_directory():
    d = "/var/lib/fleet/local/x/proxy-a"
    lines = conf_lines()
    assert "http_port 127.0.0.1:31300" in lines
    assert "workers 1" in lines and "cache deny all" in lines and "shutdown_lifetime 1 second" in lines
    assert not any(line.startswith("cache_dir") for line in lines)
    for directive in ("pid_filename", "cache_log", "access_log", "coredump_dir"):
        (line,) = [x for x in lines if x.startswith(directive + " ")]
        assert d in line, line
    assert "http_port [::1]:31300" in conf_lines(bind="::1")


def test_squid_parses_the_config(tmp_path):
    binary = squid_or_skip()
    conf = tmp_path / "squid.conf"
    conf.write_text(config_text("127.0.0.1", 31300, str(tmp_path), ["127.0.0.0/8"]))
    got = subprocess.run([binary, "-k", "parse", "-f", str(conf)], capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got.stderr
    assert "FATAL" not in got.stderr and "ERROR" not in got.stderr, got.stderr


def squid_or_skip() -> str:
    from tests.providers.local.conftest import squid_binary

    binary = squid_binary()
    if binary is None:
        pytest.skip("squid is not installed")
    return binary


def test_service_names_are_alphanumeric_and_distinct():
    names = {service_name(d, n) for d in ("/a", "/b") for n in ("proxy-a", "proxy-b")}
    assert len(names) == 4
    assert all(n.isalnum() and n.startswith("fleet") and len(n) <= 32 for n in names)
    assert service_name("/a", "proxy-a") == service_name("/a", "proxy-a")
    assert "squid" not in names  # a system squid's default


def test_unreachable_by_names_the_closed_directory():
    root = tempfile.mkdtemp(prefix="fleet-local-unit-")  # under /tmp: every ancestor open to all
    try:
        os.chmod(root, 0o755)
        closed = os.path.join(root, "closed")
        inner = os.path.join(closed, "inner")
        os.makedirs(inner)
        os.chmod(closed, 0o700)
        st = os.stat(closed)
        stranger = RunAs("stranger", st.st_uid + 12345, st.st_gid + 12345)
        why = unreachable_by(inner, stranger)
        assert why is not None and closed in why and "0700" in why and "stranger" in why
        assert unreachable_by(inner, RunAs("owner", st.st_uid, st.st_gid)) is None
        assert unreachable_by(inner, None) is None  # squid runs as the worker itself
        os.chmod(closed, 0o711)
        assert unreachable_by(inner, stranger) is None
        assert unreachable_by(os.path.join(inner, "not", "yet"), stranger) is None  # made later, 0755
    finally:
        shutil.rmtree(root)


def test_the_run_as_user_under_root():
    who = squid.run_as()
    if os.geteuid() == 0:
        assert who is not None and who.uid != 0 and who.user in squid.RUN_AS_CANDIDATES
    else:
        assert who is None


# -- /proc ------------------------------------------------------------------------------


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def test_a_process_is_its_pid_and_start_time(sleeper):
    ticks = process.start_ticks(sleeper.pid)
    assert ticks and process.alive(sleeper.pid, ticks)
    assert not process.alive(sleeper.pid, ticks + 1)  # a reused pid has another start time
    assert not process.alive(0, ticks) and not process.alive(sleeper.pid, 0)
    assert process.start_ticks(2**22 + 1) is None


def test_a_reused_pid_is_never_signalled(sleeper):
    ticks = process.start_ticks(sleeper.pid)
    assert not process.signal_if_alive(sleeper.pid, ticks + 1, signal.SIGKILL)
    assert process.stop(sleeper.pid, ticks + 1, Deadline.after(2), grace=0.1)  # "not ours": nothing to stop
    assert sleeper.poll() is None  # untouched
    assert process.stop(sleeper.pid, ticks, Deadline.after(5), grace=1.0)
    assert sleeper.wait(5) == -signal.SIGTERM


def test_a_zombie_counts_as_dead(sleeper):
    ticks = process.start_ticks(sleeper.pid)
    os.kill(sleeper.pid, signal.SIGKILL)
    end = time.monotonic() + 5
    while process.alive(sleeper.pid, ticks) and time.monotonic() < end:
        time.sleep(0.01)
    assert not process.alive(sleeper.pid, ticks)  # not reaped yet: a zombie
    with open(f"/proc/{sleeper.pid}/stat") as f:
        assert f.read().rpartition(")")[2].split()[0] == "Z"


def test_find_by_argument(sleeper):
    marker = f"/tmp/fleet-local-marker-{os.getpid()}"
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        end = time.monotonic() + 5  # Popen returns before the child has exec'd: its cmdline shows a moment later
        while not process.find(marker) and time.monotonic() < end:
            time.sleep(0.01)
        assert [pid for pid, _ in process.find(marker)] == [p.pid]
    finally:
        p.kill()
        p.wait()
    assert process.find(marker) == []


def test_listening_is_read_from_proc_for_the_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not process.listening(os.getpid(), "127.0.0.1", port)
        s.listen()
        assert process.listening(os.getpid(), "127.0.0.1", port)
        assert not process.listening(os.getpid(), "127.0.0.2", port)
        assert not process.listening(1, "127.0.0.1", port) or not os.access("/proc/1/fd", os.R_OK)
    with socket.socket(socket.AF_INET6) as s6:
        s6.bind(("::", 0))
        s6.listen()
        port = s6.getsockname()[1]
        assert not process.listening(os.getpid(), "127.0.0.1", port)  # a wildcard is not this address
    with socket.socket(socket.AF_INET6) as s6:
        s6.bind(("::ffff:127.0.0.1", 0))
        s6.listen()
        assert process.listening(os.getpid(), "127.0.0.1", s6.getsockname()[1])  # v4-mapped


# -- squid -v ------------------------------------------------------------------------------


def script(tmp_path, body: str) -> str:
    path = tmp_path / "squid"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("body", "error", "match"),
    [
        ("echo 'Squid Cache: Version 5.7'; echo 'Service Name: squid'", None, "5.7"),
        ("echo garbage", RuntimeError, "no 'Squid Cache: Version' line"),
        ("echo broken >&2; exit 3", RuntimeError, "exited with 3: broken"),
        ("kill -9 $$", RuntimeError, "killed by signal 9"),
        ("exec sleep 30", TimeoutError, "did not answer"),
    ],
)
def test_version(tmp_path, body, error, match):
    path = script(tmp_path, body)
    start = time.monotonic()
    if error is None:
        assert squid.version(path, Deadline.after(5)) == match
    else:
        with pytest.raises(error, match=match):
            squid.version(path, Deadline.after(0.5))
    assert time.monotonic() - start < 2


def test_version_of_a_missing_binary_and_an_expired_deadline(tmp_path):
    with pytest.raises(FileNotFoundError):
        squid.version(str(tmp_path / "nope"), Deadline.after(5))
    with pytest.raises(TimeoutError):
        squid.version(script(tmp_path, "echo 'Squid Cache: Version 5.7'"), Deadline.after(-1))


def test_remove_shm_removes_only_the_instance_segments(tmp_path, monkeypatch):
    monkeypatch.setattr(squid, "SHM_DIR", str(tmp_path))
    mine = service_name("/a", "proxy-a")
    names = [f"{mine}-cf__metadata.shm", f"{mine}-cf__queues.shm", "squid-cf__metadata.shm",  # a system squid's
             f"{service_name('/a', 'proxy-b')}-cf__queues.shm", f"{mine}x-cf__queues.shm"]
    for n in names:
        (tmp_path / n).write_text("")
    squid.remove_shm(mine)
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:])


def test_prepare_hands_the_directory_to_squids_user(tmp_path):
    who = squid.run_as()
    conf = squid.prepare(str(tmp_path / "inst"), "http_port 127.0.0.1:31300\n", who)
    st = os.stat(tmp_path / "inst")
    assert conf == str(tmp_path / "inst" / "squid.conf")
    assert (st.st_uid, st.st_gid) == ((who.uid, who.gid) if who else (os.geteuid(), os.getegid()))
    assert os.stat(conf).st_mode & 0o777 == 0o644
