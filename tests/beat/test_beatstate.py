"""What beat leaves in Redis for readers: the last-round stamp, the published
schedule, skipped checks. (The lock's Lua scripts need a real redis-server:
tests/integration/test_beat.py.)"""

from __future__ import annotations

import fakeredis
import pytest

from fleet.celery import beat
from fleet.settings import Settings
from fleet.store import Store, keys

SETTINGS = Settings(provider_check_interval=10, installation="lab")


def doc(owner="beat-1"):
    s = SETTINGS
    return beat.schedule_doc(s.provider_check_interval, s.check_timeout, s.overdue_after, s.installation_id, ["a", "b"], owner, 1.0)


def test_nothing_on_record():
    r = fakeredis.FakeRedis()
    assert beat.last_round(Store(r)) is None
    assert beat.published_schedule(Store(r)) is None
    assert beat.skipped_checks(Store(r)) == {}


def test_a_round_stamps_the_time_republishes_the_schedule_and_counts_skips():
    r = fakeredis.FakeRedis()
    beat.record_round(Store(r), 1700000000.25, doc(), ["b"])
    beat.record_round(Store(r), 1700000010.5, doc(), ["b"])
    assert beat.last_round(Store(r)) == 1700000010.5
    assert beat.published_schedule(Store(r)) == {
        "interval": 10.0, "timeout": 10.0, "overdue_after": 30.0, "installation": "lab", "providers": ["a", "b"],
        "beat": "beat-1", "published_at": 1700000010.5,
    }
    assert beat.skipped_checks(Store(r)) == {"b": 2}
    assert r.ttl(keys.BEAT_SCHEDULE) == -1, "readers need the schedule with beat gone: no expiry"


def test_published_at_start():
    r = fakeredis.FakeRedis()
    beat.publish_schedule(Store(r), doc())
    assert beat.published_schedule(Store(r))["overdue_after"] == SETTINGS.overdue_after
    assert beat.last_round(Store(r)) is None


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[1, 2]", b'{"interval": "10s", "timeout": 5, "overdue_after": 25}', b'{"interval": 10, "timeout": 5}',
     b'{"interval": -1, "timeout": 5, "overdue_after": 25}', b'{"interval": true, "timeout": 5, "overdue_after": 25}'],
)
def test_a_schedule_that_is_not_ours_reads_as_none(raw):
    r = fakeredis.FakeRedis()
    r.set(keys.BEAT_SCHEDULE, raw)
    assert beat.published_schedule(Store(r)) is None


@pytest.mark.parametrize("raw", [b"soon", b"nan", b"inf"])
def test_a_bad_stamp_reads_as_none(raw):
    r = fakeredis.FakeRedis()
    r.set(keys.BEAT_LAST_ROUND, raw)
    assert beat.last_round(Store(r)) is None


def test_lock_timing_lets_a_standby_take_over_within_the_ttl():
    assert beat.RENEW_EVERY * 3 <= beat.LOCK_TTL
    assert beat.STANDBY_EVERY < beat.RENEW_EVERY
