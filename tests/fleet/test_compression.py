"""A list's answer crosses Redis compressed (fleet.celery.compression): as
kombu compresses and inflates it, never past the bound, and small enough
that 10,000 instances and more fit under the deployed Redis' 2mb."""

from __future__ import annotations

import base64
import json
import os
import uuid
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from kombu.compression import compress, decompress

from fleet.celery import compression, routing
from fleet.celery.calls import instance_dict
from providers.base import Instance, State


def instances(n: int) -> list[dict]:
    """Answers as a worker sends them: random ids and UIDs, one installation and namespace."""
    now = datetime.now(UTC)
    return [instance_dict(Instance(id=f"fake/proxy-{uuid.uuid4().hex[:12]}", state=State.RUNNING, ip=f"127.0.{i // 250}.{i % 250}",
                                   uid=str(uuid.uuid4()), created_at=now - timedelta(seconds=i * 7.3),
                                   installation="fleet-1a2b3c", namespace="crawl-prod"))
            for i in range(n)]


def test_kombu_compresses_and_inflates_with_the_codec():
    compression.install()
    body = json.dumps(instances(100)).encode()
    packed, content_type = compress(body, compression.ALIAS)
    assert content_type == compression.CODEC and len(packed) < len(body) / 2
    assert decompress(packed, content_type) == body


@pytest.mark.parametrize("packed, why", [
    (zlib.compress(b"\0" * (compression.MAX_INFLATED + 1)), "inflates past"),
    (zlib.compress(b"[1, 2, 3]" * 1000)[:40], "cut short"),
    (b"not zlib at all", "not a zlib stream"),
])
def test_what_does_not_inflate_whole_within_the_bound_is_refused(packed, why):
    with pytest.raises(compression.InflateError, match=why):
        compression.decompress(packed)


def test_a_body_of_exactly_the_bound_inflates():
    assert len(compression.decompress(zlib.compress(b"x" * compression.MAX_INFLATED))) == compression.MAX_INFLATED


def test_only_a_lists_answer_asks_for_it():
    assert compression.link_options(routing.LIST_INSTANCES) == {"compression": compression.ALIAS}
    assert {compression.link_options(t).get("compression") for t in (
        routing.GET_INSTANCE, routing.CREATE_INSTANCE, routing.DELETE_INSTANCE)} == {None}


def test_wire_size_is_the_base64_of_the_compressed_body():
    body = json.dumps(instances(500)).encode()
    assert compression.wire_size(body) == len(base64.b64encode(zlib.compress(body, compression.LEVEL)))


def test_ten_thousand_instances_fit_one_answer_and_about_thirty_thousand_do():
    """Uncompressed, 8,000 filled the deployed Redis' 2mb; compressed, a list
    goes past a bound at some 30,000 (which a worker then reports)."""
    assert compression.answer_problem(instances(10_000)) is None
    per = compression.wire_size(json.dumps(instances(10_000)).encode()) / 10_000
    assert 25_000 <= compression.MAX_WIRE / per <= 45_000, per
    plain = len(base64.b64encode(json.dumps(instances(1000)).encode())) / 1000
    assert plain > 3 * per, (plain, per)
    assert compression.answer_problem(instances(45_000)) is not None


def test_an_answer_is_refused_by_either_bound():
    repetitive = ["x" * 100] * 90_000  # 9 MB of JSON that compresses to almost nothing
    assert "bytes of JSON, more than the" in (compression.answer_problem(repetitive) or "")
    random_hex = [os.urandom(64).hex() for _ in range(30_000)]  # 3.9 MB of JSON, half of it entropy
    assert "bytes compressed, more than the" in (compression.answer_problem(random_hex) or "")
    assert compression.answer_problem(random_hex[:15_000]) is None
