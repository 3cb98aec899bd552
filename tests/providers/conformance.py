"""The provider contract as tests (docs/providers.md §2 and the §8 checklist).

A provider's test module subclasses `ProviderConformance` and supplies a
`provider` fixture (against its fake or lab) plus `make_request`; every rule
below then runs against it. Rules that depend on a backend's timing (Running
needs an IP) are checked on whatever state the backend reports.
"""

from __future__ import annotations

import uuid

import pytest

from providers import base
from providers.base import CreateRequest, Deadline, Instance, State

DEADLINE = 30.0


class ProviderConformance:
    # Ids the provider can never resolve: each must be Permanent on get.
    malformed_ids: tuple[str, ...] = ("", "not-an-id")

    def make_request(self, uid: str) -> CreateRequest:
        return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="default", cloud_init="#cloud-config\n")

    def deadline(self) -> Deadline:
        return Deadline.after(DEADLINE)

    def _create(self, provider) -> tuple[str, CreateRequest]:
        req = self.make_request(str(uuid.uuid4()))
        return provider.create(req, self.deadline()), req

    def test_create_is_idempotent_by_name(self, provider):
        pid, req = self._create(provider)
        assert provider.create(req, self.deadline()) == pid

    def test_uid_and_created_at_are_read_back(self, provider):
        pid, req = self._create(provider)
        inst = provider.get(pid, self.deadline())
        assert isinstance(inst, Instance)
        assert inst.id == pid
        assert inst.uid == req.uid
        assert inst.created_at is not None

    def test_running_only_with_an_ip(self, provider):
        pid, _ = self._create(provider)
        inst = provider.get(pid, self.deadline())
        assert inst.state in State
        if inst.state is State.RUNNING:
            assert inst.ip

    def test_get_after_delete_is_not_found(self, provider):
        pid, _ = self._create(provider)
        provider.delete(pid, self.deadline())
        with pytest.raises(base.NotFound) as err:
            provider.get(pid, self.deadline())
        assert err.value.op == "get"
        assert err.value.id == pid

    def test_delete_twice_is_fine(self, provider):
        pid, _ = self._create(provider)
        provider.delete(pid, self.deadline())
        provider.delete(pid, self.deadline())

    def test_malformed_id_is_permanent(self, provider):
        for bad in self.malformed_ids:
            with pytest.raises(base.Permanent):
                provider.get(bad, self.deadline())

    def test_list_by_tag_lists_created_with_uid(self, provider):
        pid, req = self._create(provider)
        listed = {i.id: i for i in provider.list_by_tag(self.deadline())}
        assert pid in listed
        assert listed[pid].uid == req.uid
        assert listed[pid].created_at is not None

    def test_errors_carry_the_configured_name(self, provider):
        with pytest.raises(base.ProviderError) as err:
            provider.get(self.malformed_ids[-1], self.deadline())
        assert err.value.provider == self.provider_name

    provider_name = "conformance"
