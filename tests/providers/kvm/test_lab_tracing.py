"""Child spans against the lab: a `kvm.dial` span and one `libvirt.<method>`
span per RPC, nested under the caller's span across the RPC threads."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from providers import base
from providers.base import CreateRequest, Deadline, Placement
from providers.kvm.provider import new
from tests.providers.kvm.test_lab_check import lab_config

pytestmark = pytest.mark.integration

SENTINEL = "CLOUD-INIT-SENTINEL-tracing"


def test_check_spans_nest_under_the_callers_span(lab, spans):
    p = new("kvm-lab", lab_config(lab))
    try:
        with trace.get_tracer("test").start_as_current_span("provider.check") as parent:
            (st,) = p.check(Deadline.after(10))
        assert st.ready
        finished = spans.get_finished_spans()
        pid = parent.get_span_context().span_id
        by_parent = {}
        for s in finished:
            by_parent.setdefault(s.parent.span_id if s.parent else None, []).append(s)
        names = [s.name for s in finished]
        assert "kvm.dial" in names
        rpcs = [s for s in finished if s.name.startswith("libvirt.")]
        assert {s.name for s in rpcs} >= {"libvirt.getLibVersion", "libvirt.getHostname", "libvirt.storagePoolLookupByName",
                                          "libvirt.info"}
        ids = {s.context.span_id for s in finished}
        for s in rpcs + [s for s in finished if s.name == "kvm.dial"]:
            assert s.parent is not None and (s.parent.span_id == pid or s.parent.span_id in ids)
            assert s.attributes["kvm.host"] == "lab"
        assert any(s.parent.span_id == pid for s in rpcs), "RPC spans lost their parent across the RPC thread"
    finally:
        p.close()


def test_failed_dial_span_names_the_stage(lab, spans, tmp_path):
    p = new("kvm-lab", lab_config(lab, key_file=tmp_path / "missing"))
    try:
        (st,) = p.check(Deadline.after(5))
        assert st.reason == "SSHMaterialUnavailable"
        (dial,) = [s for s in spans.get_finished_spans() if s.name == "kvm.dial"]
        assert dial.attributes["kvm.dial.stage"] == "ssh-material"
    finally:
        p.close()


def test_no_cloud_init_in_span_attributes(lab, spans):
    cfg = lab_config(lab)
    p = new("kvm-lab", cfg)
    try:
        req = CreateRequest(name="proxy-tracing0000000", uid="u-trace", cloud_init=SENTINEL,
                            placement=Placement(zone="lab", machine_type="nope", image="nope"))
        with pytest.raises(base.Permanent):  # unknown machine type: refused before the backend
            p.create(req, Deadline.after(10))
        assert SENTINEL not in repr([(s.name, dict(s.attributes or {})) for s in spans.get_finished_spans()])
    finally:
        p.close()
