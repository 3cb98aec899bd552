"""fleet.celery.brokerfix: on a closed channel, kombu's restore and ack are skipped
instead of crashing the worker (the integration test's Redis restart hits
this only when the timing is unlucky, so the guard is pinned here too)."""

from types import SimpleNamespace

from kombu.transport import redis as transport

from fleet.celery import brokerfix


def qos_on(client):
    qos = transport.QoS.__new__(transport.QoS)  # no broker behind it
    qos.channel = SimpleNamespace(connection=SimpleNamespace(client=client))
    qos._delivered = {"t1": "msg"}
    qos._dirty = set()
    return qos


def test_closed_channel_skips_restore_ack_and_reject():
    brokerfix.install()
    brokerfix.install()  # idempotent
    closed = qos_on(None)
    assert transport.QoS.restore_unacked(closed) is None
    assert closed._delivered == {}
    assert transport.QoS.ack(qos_on(None), "t1") is None
    assert transport.QoS.reject(qos_on(None), "t1") is None


def test_open_channel_calls_through():
    calls = []
    guarded = brokerfix._skip_on_closed_channel(lambda self, tag: calls.append(tag) or "done", "ack")
    assert guarded(qos_on(object()), "t1") == "done"
    assert guarded(qos_on(None), "t2") is None
    assert calls == ["t1"]
    assert transport.QoS.ack._fleet_guard
