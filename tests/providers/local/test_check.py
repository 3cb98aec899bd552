"""The local Checker: the reason table, the details, and the real squid."""

import errno
import os
import subprocess

import pytest

from providers import base
from providers.base import Deadline
from providers.local import check
from providers.local.check import LOCAL_REASONS, check_local, squid_reason
from tests.providers.local.conftest import squid_binary


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (TimeoutError("squid -v did not answer"), base.REASON_TIMEOUT),
        (subprocess.TimeoutExpired(["squid"], 1), check.REASON_SQUID_FAILED),  # version() turns these into TimeoutError
        (FileNotFoundError(errno.ENOENT, "No such file", "/usr/sbin/squid"), check.REASON_SQUID_NOT_FOUND),
        (PermissionError(errno.EACCES, "Permission denied", "/usr/sbin/squid"), check.REASON_SQUID_NOT_FOUND),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/x/squid"), check.REASON_SQUID_NOT_FOUND),
        (RuntimeError("squid -v exited with 1"), check.REASON_SQUID_FAILED),
        (RuntimeError("squid -v printed no version"), check.REASON_SQUID_FAILED),
        (OSError(errno.ENOEXEC, "Exec format error"), check.REASON_SQUID_FAILED),
    ],
)
def test_squid_reasons(exc, want):
    assert squid_reason(exc) == want
    assert want in LOCAL_REASONS


def test_a_healthy_host_with_the_real_squid(state_dir):
    binary = squid_binary()
    if binary is None:
        pytest.skip("squid is not installed")
    got = check_local(state_dir, binary, Deadline.after(10))
    assert [t.name for t in got] == ["stateDir", "squid"]
    assert all(t.ready and t.reason == base.REASON_REACHABLE for t in got), got
    assert got[0].details["path"] == state_dir and got[0].details["instances"] == "0"
    assert got[1].details["version"].split(".")[0].isdigit()
    assert os.listdir(state_dir) == []  # the write probe left nothing


def test_a_state_dir_squid_cannot_enter_is_unusable(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root hands squid to another user")
    os.chmod(tmp_path, 0o700)
    got = check.check_state_dir(str(tmp_path / "state"))
    assert not got.ready and got.reason == check.REASON_STATE_DIR_UNUSABLE
    assert "cannot enter" in got.message and str(tmp_path) in got.message


@pytest.mark.parametrize("state_dir_value", ["relative", "/with space"])
def test_an_unsafe_state_dir_is_unusable(state_dir_value):
    got = check.check_state_dir(state_dir_value)
    assert not got.ready and got.reason == check.REASON_STATE_DIR_UNUSABLE


def test_a_state_dir_under_a_file_is_unusable(tmp_path):
    (tmp_path / "f").write_text("")
    got = check.check_state_dir(str(tmp_path / "f" / "state"))
    assert not got.ready and got.reason == check.REASON_STATE_DIR_UNUSABLE and "Not a directory" in got.message


def _executable(path, mode=0o755):
    path.write_text("#!/bin/sh\necho 'Squid Cache: Version 5.7'\n")
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize("make, configured, want", [
    (lambda d: _executable(d / "squid"), True, None),
    (lambda d: str(d / "missing"), True, "squidPath {p} is not an executable file"),
    (lambda d: _executable(d / "squid", 0o644), True, "squidPath {p} is not an executable file"),
    (lambda d: str(d), True, "squidPath {p} is not an executable file"),  # a directory
    (lambda d: _executable(d / "squid"), False, None),  # found on $PATH
    (lambda d: str(d / "none"), False, "there is no squid on $PATH, nor at {p}"),
], ids=["executable", "missing", "not-executable", "directory", "on-path", "nowhere"])
def test_a_worker_host_without_squid_is_named_with_the_fix(tmp_path, monkeypatch, make, configured, want):
    from providers import registry
    from providers.local.config import LocalConfig

    path = make(tmp_path)
    if configured:
        block = LocalConfig(squidPath=path)
    else:  # unset: `squid` on $PATH, else the fallback
        monkeypatch.setenv("PATH", str(tmp_path) if want is None else "/nonexistent")
        monkeypatch.setattr("providers.local.config.FALLBACK_SQUID", path)
        if want is None:
            path = str(tmp_path / "squid")
        block = LocalConfig()
    problem = registry.host_problem("local", block)
    if want is None:
        assert problem is None and check.host_problem(block) is None
    else:
        assert problem == (f"the local provider runs Squid, and {want.format(p=path)}: install Debian's squid package "
                           "(apt-get install squid; fleet's image has it) or set squidPath")
    assert registry.host_problem("fake", object()) is None  # types without a hook: nothing to find


def test_the_real_squid_is_found(state_dir):
    from providers.local.config import LocalConfig

    if squid_binary() is None:
        pytest.fail("squid is not installed: run `make test`, which installs it")
    assert check.host_problem(LocalConfig()) is None
