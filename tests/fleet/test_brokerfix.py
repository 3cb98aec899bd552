"""fleet.celery.brokerfix: on a closed channel, kombu's restore and ack are skipped
instead of crashing the worker (the integration test's Redis restart hits
this only when the timing is unlucky, so the guard is pinned here too)."""

from types import SimpleNamespace

import pytest
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


def test_an_ack_or_reject_on_an_unreachable_broker_is_a_warning_not_an_error(caplog):
    """A Sentinel master killed under load: the ack's connection error is logged
    as what happens to the message, not raised for Celery to log as critical."""

    class Refused(ConnectionError):
        pass

    def refuse(self, tag):
        raise Refused("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    qos = qos_on(object())
    qos.channel.connection.connection_errors = (Refused, KeyError)  # as kombu's Redis transport lists them
    for what in ("ack", "reject"):
        assert brokerfix._skip_on_closed_channel(refuse, what)(qos, "t1") is None
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    assert "redelivered after the visibility timeout" in caplog.records[0].getMessage()

    def unknown(self, tag):
        raise KeyError(tag)

    with pytest.raises(KeyError):  # anything but a broker that went away is raised as before
        brokerfix._skip_on_closed_channel(unknown, "ack")(qos, "t1")
    qos.channel.connection.connection_errors = ()
    with pytest.raises(Refused):
        brokerfix._skip_on_closed_channel(refuse, "ack")(qos, "t1")
