"""fleet.store.target: one Redis URL for every process, plain or Sentinel (pure parts)."""

from __future__ import annotations

import pytest

from fleet.settings import broker_problem, redact_url
from fleet.store import target
from fleet.store.target import Target, TargetError


@pytest.mark.parametrize("url, want", [
    ("sentinel://h1:26379;h2:26380/2?master_name=fleet",
     Target("", (("h1", 26379), ("h2", 26380)), "fleet", 2)),
    ("sentinel://:s3cr%2Ft@10.0.0.1:26379/0?master_name=m-1&sentinel_password=x",
     Target("", (("10.0.0.1", 26379),), "m-1", 0, "s3cr/t", "x")),
    ("sentinel://[::1]:26379?master_name=fleet", Target("", (("::1", 26379),), "fleet", 0)),
    ("redis://127.0.0.1:6379/0", Target("redis://127.0.0.1:6379/0")),
])
def test_urls_are_read_into_their_parts(url, want):
    assert target.parse(url) == want


@pytest.mark.parametrize("url, why", [
    ("sentinel://h1:26379/0", "needs ?master_name"),
    ("sentinel://h1/0?master_name=fleet", "HOST:PORT"),
    ("sentinel://h1:99999/0?master_name=fleet", "HOST:PORT"),
    ("sentinel://h1:26379/x?master_name=fleet", "database number"),
    ("sentinel://h1:26379/0?master_name=fleet&db=3", "unknown query parameters db"),
    ("sentinel://h1:26379/0?master_name=bad!name", "needs ?master_name"),
    ("sentinel://" + ";".join(f"h{i}:26379" for i in range(17)) + "/0?master_name=f", "at most 16"),
])
def test_bad_sentinel_urls_say_why(url, why):
    with pytest.raises(TargetError, match=why.replace("?", r"\?")):
        target.parse(url)
    assert why.split()[-1].strip("?") in (broker_problem(url) or "")


def test_a_sentinel_url_is_a_valid_broker_and_its_secrets_are_redacted():
    url = "sentinel://:pw-SENTINEL@h1:26379;h2:26379/0?master_name=fleet&sentinel_password=sp-SENTINEL"
    assert broker_problem(url) is None
    assert "SENTINEL" not in redact_url(url)


def test_celery_gets_kombus_sentinel_transport_with_the_master_name():
    conf = target.celery_config("sentinel://:p%40ss@h1:26379;h2:26380/3?master_name=fleet&sentinel_password=sp")
    assert conf["broker_url"] == "sentinel://:p%40ss@h1:26379/3;sentinel://:p%40ss@h2:26380/3"
    assert conf["result_backend"] == conf["broker_url"]
    want = {"master_name": "fleet", "sentinel_kwargs": {"password": "sp"}}
    assert conf["broker_transport_options"] == want == conf["result_backend_transport_options"]
    assert target.celery_config("redis://h:6379/0") == {"broker_url": "redis://h:6379/0", "result_backend": "redis://h:6379/0"}
