"""Issue 21, item 4: one installation per Redis database (fleet.store.installation)."""

from __future__ import annotations

import fakeredis
import pytest

from fleet.store import Store, keys
from fleet.store.installation import Foreign


@pytest.fixture
def r():
    return fakeredis.FakeRedis()


def test_the_first_process_claims_an_empty_database_and_its_peers_are_at_home(r):
    assert Store(r).claim_installation("blue") == "claimed"
    assert r.get(keys.INSTALLATION) == b"blue"
    assert Store(r).claim_installation("blue") == "ours"


def test_another_installation_is_refused_naming_both(r):
    Store(r).claim_installation("blue")
    with pytest.raises(Foreign, match="belongs to installation 'blue', not 'green'"):
        Store(r).claim_installation("green")
    assert r.get(keys.INSTALLATION) == b"blue"


def test_an_unmarked_database_of_fleets_own_keys_is_adopted(r):
    for key in ("fleet:px:due", "provider.edge", "fleet.controller", "_kombu.binding.provider.edge", "unacked",
                "celery-task-meta-1", "3f0a.reply.celery.pidbox", b"provider.edge\x06\x163"):
        r.set(key, "x")
    assert Store(r).claim_installation("blue") == "adopted"


def test_an_unmarked_database_with_someone_elses_keys_is_refused(r):
    r.set("fleet:px:due", "x")
    r.set("session:42", "another app")
    with pytest.raises(Foreign, match=r"keys fleet did not write .*'session:42'"):
        Store(r).claim_installation("blue")
    assert r.get(keys.INSTALLATION) is None
