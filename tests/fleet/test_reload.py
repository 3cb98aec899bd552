"""Reloading the providers file: the pure decisions (what changed, what to
rebuild, when to load a new content), the Watcher on real files (a
half-written file, a refused one, the ConfigMap `..data` symlink swap), and
fleet.runtime's switch (changed providers rebuilt and their old instance
closed, unchanged ones kept, removed ones no longer built)."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from fleet import reload, runtime
from fleet.config import load_bytes, parse, read_bytes
from fleet.reload import LOAD, NOTHING, REMIND, REMIND_EVERY, RESTORED, WAIT, Change, ReloadStatus, Watch, Watcher

FAKE = {"name": "edge", "type": "fake"}


def cfg(*entries):
    return parse({"providers": list(entries)})


def fake(name, **block):
    return {"name": name, "type": "fake", **({"fake": block} if block else {})}


# --- what changed ----------------------------------------------------------------------


@pytest.mark.parametrize("old, new, want", [
    ([fake("a")], [fake("a")], Change()),
    ([fake("a"), fake("b")], [fake("b"), fake("a")], Change()),  # order is no change
    ([fake("a")], [fake("a"), fake("late")], Change(added=("late",))),
    ([fake("a"), fake("b")], [fake("a")], Change(removed=("b",))),
    ([fake("a")], [fake("a", latencyMs=5)], Change(changed=("a",))),
    ([fake("a", latencyMs=5)], [fake("a", latencyMs=5)], Change()),  # an equal block, rebuilt anew by the loader
    ([fake("a")], [{"name": "a", "type": "local"}], Change(changed=("a",))),  # another type
    ([fake("a"), fake("b")], [fake("b", checks=False), fake("c")], Change(("c",), ("a",), ("b",))),
])
def test_diff(old, new, want):
    assert reload.diff(cfg(*old), cfg(*new)) == want


def test_a_change_summary_and_truth():
    assert not Change()
    assert Change(added=("x",))
    assert Change(("c",), ("a",), ("b",)).summary() == "added c; removed a; changed b"
    assert Change(("c",), ("a",), ("b",)).touched == {"a", "b", "c"}


@pytest.mark.parametrize("change, built, want", [
    (Change(changed=("a",)), ["a", "b"], ["a"]),
    (Change(removed=("b",)), ["a", "b"], ["b"]),
    (Change(added=("a",)), ["a"], []),  # cannot be built before it exists; nothing to close
    (Change(changed=("x",)), ["a"], []),  # changed but never built here
    (Change(), ["a"], []),
])
def test_to_retire(change, built, want):
    assert reload.to_retire(change, built) == want


# --- when to load --------------------------------------------------------------------------

T = 1000.0


@pytest.mark.parametrize("watch, digest, now, want_action, want_watch", [
    (Watch("A"), "A", T, NOTHING, Watch("A")),
    (Watch("A"), "B", T, WAIT, Watch("A", pending="B")),  # seen once: maybe half-written
    (Watch("A", pending="B"), "B", T, LOAD, Watch("A", pending="B")),  # the same twice: load it
    (Watch("A", pending="B"), "C", T, WAIT, Watch("A", pending="C")),  # still moving
    (Watch("A", pending="B"), "A", T, NOTHING, Watch("A")),  # put back before it settled
    (Watch("A", refused="B", reminded=T), "B", T + 1, NOTHING, Watch("A", refused="B", reminded=T)),
    (Watch("A", refused="B", reminded=T), "B", T + REMIND_EVERY, REMIND, Watch("A", refused="B", reminded=T + REMIND_EVERY)),
    (Watch("A", refused="B", reminded=T), "C", T, WAIT, Watch("A", pending="C", refused="B", reminded=T)),
    (Watch("A", refused="B", reminded=T), "A", T, RESTORED, Watch("A")),  # the good file put back
])
def test_on_look(watch, digest, now, want_action, want_watch):
    assert reload.on_look(watch, digest, now) == (want_watch, want_action)


def test_on_load():
    assert reload.on_load(Watch("A", pending="B"), "B", True, T) == Watch("B")
    assert reload.on_load(Watch("A", pending="B"), "B", False, T) == Watch("A", refused="B", reminded=T)


# --- the Watcher on real files ---------------------------------------------------------------


def scrape(status: ReloadStatus) -> dict[str, float]:
    reg = CollectorRegistry()
    reg.register(status.collector())
    out = {}
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


class Applied:
    def __init__(self):
        self.calls = []

    def __call__(self, config, change):
        self.calls.append((config.names(), change))


def watcher_for(path, status=None, clock=time.time):
    data = read_bytes(path)
    applied = Applied()
    status = status or ReloadStatus()
    status.loaded(clock())
    w = Watcher(str(path), (reload.digest_of(data), load_bytes(data, str(path))), lambda: read_bytes(path),
                lambda d: load_bytes(d, str(path)), applied, status=status, clock=clock)
    return w, applied, status


def write(path, *entries):
    path.write_text(yaml.safe_dump({"providers": list(entries)}))


def test_a_new_file_applies_at_the_second_look_with_what_changed(tmp_path):
    path = tmp_path / "providers.yaml"
    write(path, FAKE)
    w, applied, _ = watcher_for(path)
    assert w.look() == NOTHING
    write(path, FAKE, fake("late"))
    assert w.look() == WAIT and applied.calls == []
    assert w.look() == "reloaded"
    assert applied.calls == [(["edge", "late"], Change(added=("late",)))]
    assert w.look() == NOTHING  # once


def test_a_half_written_file_is_never_applied(tmp_path):
    """A file read while being written in place may even parse, with providers
    missing: it is acted on only once two looks agree."""
    path = tmp_path / "providers.yaml"
    write(path, FAKE, fake("b"))
    w, applied, status = watcher_for(path)
    full = path.read_text()
    path.write_text(full[: full.index("- name: b")])  # a valid YAML prefix: only edge
    assert w.look() == WAIT
    write(path, FAKE, fake("b"), fake("c"))  # the writer finished
    assert w.look() == WAIT
    assert w.look() == "reloaded"
    assert applied.calls == [(["edge", "b", "c"], Change(added=("c",)))]  # b was never removed
    assert scrape(status)["proxy_operator_config_reload_failures_total"] == 0


def test_a_bad_file_is_refused_logged_once_with_its_field_path_and_counted(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fleet.reload")
    path = tmp_path / "providers.yaml"
    write(path, FAKE)
    now = [T]
    w, applied, status = watcher_for(path, clock=lambda: now[0])
    assert scrape(status)["proxy_operator_config_last_reload_successful"] == 1
    # a misspelt secret field: the loader names it, never its value
    write(path, FAKE, {"name": "kvm-home", "type": "kvm", "kvm": {"vendorDta": "SENTINEL-secret"}}, {"name": "Bad_Name", "type": "fake"})
    assert [w.look(), w.look()] == [WAIT, "refused"]
    for _ in range(3):
        assert w.look() == NOTHING  # still the same bad file: logged and counted once
    assert applied.calls == []
    assert w.config.names() == ["edge"]  # the old config stays
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "providers[1].kvm.vendorDta: unknown key" in errors[0] and "providers[2].name" in errors[0]
    assert str(path) in errors[0] and "\n" not in errors[0]
    assert "SENTINEL" not in caplog.text
    m = scrape(status)
    assert m["proxy_operator_config_last_reload_successful"] == 0
    assert m["proxy_operator_config_reload_failures_total"] == 1
    assert m["proxy_operator_config_last_reload_success_timestamp_seconds"] == T

    now[0] = T + REMIND_EVERY  # still bad: said again, not counted again
    assert w.look() == REMIND
    assert scrape(status)["proxy_operator_config_reload_failures_total"] == 1

    now[0] = T + REMIND_EVERY + 2
    write(path, FAKE, fake("late"))  # fixed
    assert [w.look(), w.look()] == [WAIT, "reloaded"]
    assert applied.calls[-1][0] == ["edge", "late"]
    m = scrape(status)
    assert m["proxy_operator_config_last_reload_successful"] == 1
    assert m["proxy_operator_config_last_reload_success_timestamp_seconds"] == T + REMIND_EVERY + 2


def test_a_removed_file_is_refused_and_its_return_restores(tmp_path):
    path = tmp_path / "providers.yaml"
    write(path, FAKE)
    w, applied, status = watcher_for(path)
    good = path.read_bytes()
    path.unlink()
    assert [w.look(), w.look()] == [WAIT, "refused"]
    assert scrape(status)["proxy_operator_config_last_reload_successful"] == 0
    path.write_bytes(good)  # the same file as in use: nothing to load
    assert w.look() == RESTORED
    assert applied.calls == [] and scrape(status)["proxy_operator_config_last_reload_successful"] == 1


def configmap_dir(root, text, stamp):
    """What kubelet writes for a ConfigMap volume: the file is a symlink through `..data`."""
    d = root / f"..{stamp}"
    d.mkdir()
    (d / "providers.yaml").write_text(text)
    return d


def swap(root, target):
    """kubelet's atomic update: a new `..data` symlink renamed over the old one."""
    tmp = root / "..data_tmp"
    tmp.symlink_to(target.name)
    os.rename(tmp, root / "..data")


def test_a_configmap_update_swaps_the_data_symlink_and_is_seen(tmp_path):
    old = yaml.safe_dump({"providers": [fake("edge", latencyMs=1)]})
    new = yaml.safe_dump({"providers": [fake("edge", latencyMs=2)]})
    assert len(old) == len(new)
    a = configmap_dir(tmp_path, old, "2026_12_01_a")
    (tmp_path / "..data").symlink_to(a.name)
    path = tmp_path / "providers.yaml"
    path.symlink_to("..data/providers.yaml")
    w, applied, _ = watcher_for(path)
    b = configmap_dir(tmp_path, new, "2026_12_01_b")
    st = os.stat(a / "providers.yaml")
    os.utime(b / "providers.yaml", ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only the content differs
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    swap(tmp_path, b)
    assert [w.look(), w.look()] == [WAIT, "reloaded"]
    assert applied.calls == [(["edge"], Change(changed=("edge",)))]
    assert w.config.get("edge").block.latencyMs == 2


def test_a_failing_hook_does_not_stop_the_watch(tmp_path, caplog):
    path = tmp_path / "providers.yaml"
    write(path, FAKE)
    data = read_bytes(path)
    seen = []

    def apply(config, change):
        seen.append(config.names())
        if len(seen) == 1:
            raise RuntimeError("boom")

    w = Watcher(str(path), (reload.digest_of(data), load_bytes(data, str(path))), lambda: read_bytes(path),
                lambda d: load_bytes(d, str(path)), apply, status=ReloadStatus(), every=0.01)
    write(path, FAKE, fake("late"))
    stop = threading.Event()
    t = threading.Thread(target=w.run, args=(stop,), daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    t.join(2)
    assert seen[:2] == [["edge", "late"], ["edge", "late"]]  # tried again at the next look
    assert "providers config reload failed" in caplog.text


# --- fleet.runtime's switch ---------------------------------------------------------------


class Closable:
    def __init__(self, name, block):
        self.name, self.block, self.closed = name, block, 0

    def close(self):
        self.closed += 1


@pytest.fixture
def fresh_runtime(tmp_path, monkeypatch):
    path = tmp_path / "providers.yaml"
    write(path, fake("a"), fake("b"))
    monkeypatch.setenv("FLEET_PROVIDERS_CONFIG", str(path))
    monkeypatch.setattr(runtime.registry, "build", lambda name, type_name, block: Closable(name, block))
    runtime.reset()
    yield path
    runtime.reset()


def wait_until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    raise AssertionError("timed out")


def test_runtime_rebuilds_changed_providers_closes_the_old_and_keeps_the_rest(fresh_runtime, monkeypatch):
    monkeypatch.setattr(runtime, "retire_after", lambda: 0.05)
    hooks = []
    runtime.on_config_change(lambda new, change: hooks.append(change))
    a, b = runtime.provider("a"), runtime.provider("b")
    stop = threading.Event()
    try:
        assert runtime.watch_config(stop, every=0.02) is not None
        assert runtime.watch_config(stop, every=0.02) is None  # once per process
        write(fresh_runtime, fake("a", latencyMs=7), fake("b"), fake("late"))
        wait_until(lambda: hooks)
        assert "late" in runtime.providers_config().names()
        assert hooks == [Change(added=("late",), changed=("a",))]
        a2 = runtime.provider("a")
        assert a2 is not a and a2.block.latencyMs == 7  # rebuilt from the new block
        assert runtime.provider("b") is b and b.closed == 0  # unchanged: kept, connections and all
        wait_until(lambda: a.closed == 1)  # the old one closed through its close hook, after the grace
        assert runtime.built("late") is None  # built on first use only

        write(fresh_runtime, fake("late"))  # a and b removed
        wait_until(lambda: runtime.providers_config().names() == ["late"])
        wait_until(lambda: a2.closed == 1 and b.closed == 1)
        with pytest.raises(KeyError, match="not configured"):
            runtime.provider("b")
    finally:
        stop.set()


def test_close_providers_closes_the_retiring_ones_too(fresh_runtime, monkeypatch):
    monkeypatch.setattr(runtime, "retire_after", lambda: 3600.0)
    a = runtime.provider("a")
    runtime._switch(cfg(fake("b")), Change(removed=("a",)))
    assert a.closed == 0  # in use by a call for up to the grace
    runtime.close_providers()  # worker shutdown: nothing left to finalizers
    assert a.closed == 1


# --- what the processes do with a change ------------------------------------------------------


@pytest.mark.parametrize("pairs, touched, want", [
    ([("crawl/x", "late"), ("crawl/a", "edge")], {"late"}, ["crawl/x"]),  # waiting on an added provider
    ([("crawl/x", "late"), ("crawl/a", "edge")], set(), []),
    ([("crawl/b", "gone"), ("crawl/a", "edge"), ("crawl/c", "gone")], {"gone", "edge"}, ["crawl/a", "crawl/b", "crawl/c"]),
    ([("crawl/a", "edge")], {"other"}, []),  # another provider's change leaves its back-off alone
])
def test_the_proxies_a_change_makes_due(pairs, touched, want):
    from fleet.proxies.runtime import affected

    assert affected(pairs, touched) == want


def test_a_check_of_a_provider_the_worker_no_longer_has_answers_not_configured():
    from fleet.health.messages import validate_message
    from tasks.checks import not_configured

    at = time.time() - 1
    r = not_configured("gone", "provider 'gone' is not configured (have: edge)", at, "gone@host")
    assert (r.provider, r.supported, r.scheduled_at, r.worker) == ("gone", True, at, "gone@host")
    (t,) = r.targets
    assert (t.name, t.ready, t.reason) == ("checker", False, "CheckerError")
    assert "is not configured" in t.message and "providers file" in t.message
    assert validate_message(r.to_dict(), r.checked_at) == r  # the controller accepts it as a result
