"""Orphan GC end to end on the local provider: real Squid processes, real
redis, a real controller and provider workers, standalone Proxies.

Instances are made behind fleet's back (as a crash between create and
status would leave them) with the provider's own code on the same state
directory, and aged by rewriting their records' creation time. A sweep
(`fleet gc`, what beat sends) deletes the orphan older than the min age and
never an instance with an empty UID, one of another installation, an
unmarked one, one whose Proxy exists, or one younger than the min age; the
young one goes once it is old enough. A second provider whose list fails
(its state directory is a file) is skipped while `lab` is swept. `fleet gc
--dry-run` prints the same decisions first, and deletes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fleet.store import keys
from fleet.testing.procs import wait_for
from providers import base
from providers.base import CreateRequest, Deadline
from providers.local.config import LocalConfig
from providers.local.provider import LocalProvider
from providers.local.state import Store as LocalStore
from tests.integration.test_local_proxies import alive, declare, local_stack, records, status
from tests.providers.local.conftest import kill_all, port_window, squid_binary, state_dir  # noqa: F401

pytestmark = pytest.mark.integration

OURS = "gc-test"


@pytest.fixture
def lab(redis_server, make_stack, tmp_path, state_dir, port_window):  # noqa: F811
    not_a_dir = tmp_path / "not-a-directory"
    not_a_dir.write_text("")
    lo, hi = port_window
    providers = [{"name": "lab", "type": "local", "local": {"stateDir": state_dir, "portRange": f"{lo}-{hi}"}},
                 {"name": "broken", "type": "local", "local": {"stateDir": str(not_a_dir), "portRange": f"{lo}-{hi}"}}]
    with local_stack(redis_server, make_stack, tmp_path, state_dir, port_window, providers, FLEET_INSTALLATION=OURS,
                     FLEET_GC_MIN_AGE="10m", FLEET_PROVIDER_CALL_TIMEOUT="20s") as stack:
        stack.redis = redis_server.client()
        yield stack


@pytest.fixture
def behind_our_back(lab):
    """The provider's own code on lab's state directory, in this process (its
    squids are our children: reaped at the end, after they are killed)."""
    lo, hi = lab.ports
    p = LocalProvider("lab", LocalConfig.model_validate({"stateDir": lab.state_dir, "portRange": f"{lo}-{hi}"}))
    yield p
    kill_all(lab.state_dir)
    for child in list(p._children.values()):
        child.wait(10)


def make_instance(p: LocalProvider, uid: str, port: int, installation: str = OURS, age: timedelta = timedelta(hours=1)) -> str:
    """An instance made with the provider's own code, aged by rewriting its record; its name."""
    root = p.root
    name = base.name_from_uid(uid or f"no-uid-{port}")
    p.create(CreateRequest(name=name, uid=uid or "placeholder", namespace="crawl", proxy_name=name, port=port,
                           installation=installation), Deadline.after(20))
    backdate(root, name, age)
    if not uid:  # as one made by hand (or a bug) would be: no UID at all
        store = LocalStore(root)
        rec = store.read(name)
        store.write(rec.with_(uid="", labels={**rec.labels, base.LABEL_UID: ""}))
    return name


def backdate(root: str, name: str, age: timedelta) -> None:
    store = LocalStore(root)
    rec = store.read(name)
    store.write(rec.with_(createdAt=(datetime.now(UTC) - age).isoformat(timespec="seconds")))


def sweep_state(stack) -> dict[str, str]:
    return {keys.text(k): keys.text(v) for k, v in stack.redis.hgetall(keys.GC_LOCK).items()}


def swept(stack, sweeps_before: set[str]) -> dict[str, str] | None:
    st = sweep_state(stack)
    done = st.get("id") not in sweeps_before and all(st.get(f"p:{p}") not in (None, "pending", "answered") for p in ("lab", "broken"))
    return st if done else None


def test_gc_deletes_only_old_orphans_of_ours_and_skips_a_failing_provider(lab, behind_our_back):
    lo, _ = lab.ports
    declare(lab, "live", lo)
    st = wait_for(lambda: status(lab, "live") if status(lab, "live").get("phase") == "Running" else None, 60, "crawl/live Running")
    (live_rec,) = records(lab).values()
    backdate(lab.state_dir, live_rec.name, timedelta(hours=1))  # old, but its Proxy exists

    made = {
        "orphan": make_instance(behind_our_back, "uid-orphan", lo + 1),
        "young": make_instance(behind_our_back, "uid-young", lo + 2, age=timedelta(minutes=1)),
        "no-uid": make_instance(behind_our_back, "", lo + 3),
        "theirs": make_instance(behind_our_back, "uid-theirs", lo + 4, installation="another-fleet"),
        "unmarked": make_instance(behind_our_back, "uid-unmarked", lo + 5, installation=""),
    }
    pids = {k: records(lab)[n].pid for k, n in made.items()}
    assert all(alive(pid) for pid in pids.values())

    # the dry run: the same decisions, nothing deleted; exit 1 because "broken" could not be listed
    out = lab.fleet("gc", "--dry-run", "-o", "json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    verdicts = {r["instance"]: (r["verdict"], r["why"]) for r in report["instances"]}
    assert verdicts == {
        f"local/{live_rec.name}": ("keep", "its Proxy exists"),
        f"local/{made['orphan']}": ("delete", "orphan: no Proxy has its UID, older than 10m"),
        f"local/{made['young']}": ("keep", "younger than 10m"),
        f"local/{made['no-uid']}": ("keep", "no UID: never collected"),
        f"local/{made['theirs']}": ("keep", "another installation's (another-fleet)"),
        f"local/{made['unmarked']}": ("keep", "no installation mark: never collected"),
    }
    (broken,) = [p for p in report["providers"] if p["provider"] == "broken"]
    assert broken["skipped"] == "list-failed" and "Not a directory" in broken["message"]
    table = lab.fleet("gc", "--dry-run")
    assert table.stdout.splitlines()[0].split() == ["PROVIDER", "INSTANCE", "UID", "AGE", "VERDICT", "WHY"]
    assert "1 would be deleted, nothing was" in table.stdout
    assert all(alive(pid) for pid in pids.values())

    # a sweep, as beat sends it
    sent = lab.fleet("gc")
    assert sent.returncode == 0, sent.stderr
    st = wait_for(lambda: swept(lab, set()), 60, f"the sweep to settle:\n{lab.log('controller')[-3000:]}")
    assert (st["p:lab"], st["p:broken"]) == ("swept", "list-failed")
    wait_for(lambda: made["orphan"] not in records(lab), 60, "the orphan's record removed")
    wait_for(lambda: not alive(pids["orphan"]), 10, "the orphan's squid stopped")
    assert set(records(lab)) == {live_rec.name} | {n for k, n in made.items() if k != "orphan"}
    assert all(alive(pid) for k, pid in pids.items() if k != "orphan")
    assert status(lab, "live").get("phase") == "Running"
    last = {keys.text(k): float(v) for k, v in lab.redis.hgetall(keys.GC_LAST).items()}
    assert set(last) == {"lab"}, "a provider whose list failed has no successful sweep"

    # once the young one is past the min age, the next sweep takes it
    backdate(lab.state_dir, made["young"], timedelta(minutes=11))
    first = st["id"]
    assert lab.fleet("gc").returncode == 0
    wait_for(lambda: swept(lab, {first}), 60, "the second sweep to settle")
    wait_for(lambda: made["young"] not in records(lab), 60, "the young orphan's record removed once old enough")
    assert set(records(lab)) == {live_rec.name, made["no-uid"], made["theirs"], made["unmarked"]}
    log = lab.log("controller")
    assert "Traceback" not in log and "list failed" in log
    for role in ("worker:lab", "worker:broken"):
        assert "Traceback" not in lab.log(role)
