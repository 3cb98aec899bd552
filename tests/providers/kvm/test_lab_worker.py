"""A real kvm worker (celery process) against the lab: its shutdown closes
the libvirt connection while libvirt is still loaded, so SIGTERM ends it
without `Exception ignored in: <function virConnect.__del__>`."""

from __future__ import annotations

import signal

import pytest

from fleet.celery import routing
from fleet.testing.kvmlab import TEST_POOL, TEST_URI
from fleet.testing.procs import wait_for
from tests.integration.conftest import make_stack, redis_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


def test_worker_shutdown_after_a_check_is_quiet(lab, redis_server, make_stack):  # noqa: F811
    host = {"name": "lab", "pool": TEST_POOL, "address": lab.address, "user": lab.user, "socket": lab.socket, "uri": TEST_URI}
    provider = {"name": "kvm-lab", "type": "kvm",
                "kvm": {"sshKeyFile": str(lab.key_file), "knownHostsFile": str(lab.known_hosts), "hosts": [host]}}
    stack = make_stack(redis_server.url, [provider])
    worker = stack.worker("kvm-lab")
    stack.wait_ready("worker:kvm-lab")
    stack.send_check("kvm-lab")
    # the check's linked record_check reaches the controller queue when the check has finished
    # (Celery's "succeeded" line shows only with --log-level=debug)
    wait_for(lambda: redis_server.client().llen(routing.CONTROLLER_QUEUE), 30, "the check to finish")
    stack.kill("worker:kvm-lab", signal.SIGTERM)
    log = stack.log("worker:kvm-lab")
    assert worker.returncode == 0, log[-3000:]
    assert "Exception ignored" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
