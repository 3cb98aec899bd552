"""The contract's GC marks, built once (providers.marks), and each backend's
rule for a mark value, as tables."""

import re

import pytest

from providers import base, marks
from providers.aws.build import TAG_VALUE
from providers.base import CreateRequest
from providers.gcp.insert import LABEL_VALUE as GCE_LABEL
from providers.hetzner.servers import LABEL_VALUE as HETZNER_LABEL
from providers.marks import ValueRule

M, U, INST, N = base.LABEL_MANAGED, base.LABEL_UID, base.LABEL_INSTALLATION, base.LABEL_NAMESPACE


def req(uid="7c1e-uid", installation="", namespace="", **kw) -> CreateRequest:
    return CreateRequest(name="proxy-abc", uid=uid, installation=installation, namespace=namespace, **kw)


@pytest.mark.parametrize(
    ("request_", "want"),
    [
        (req(), {M: "true", U: "7c1e-uid"}),  # no installation, no namespace: no marks for them
        (req(installation="blue"), {M: "true", U: "7c1e-uid", INST: "blue"}),
        (req(namespace="team-a"), {M: "true", U: "7c1e-uid", N: "team-a"}),
        (req(installation="blue", namespace="team-a"), {M: "true", U: "7c1e-uid", INST: "blue", N: "team-a"}),
        (req(namespace="Not_A_Label"), {M: "true", U: "7c1e-uid"}),  # base.namespace_mark: no mark
        (req(proxy_name="web", cloud_init="#cloud-config"), {M: "true", U: "7c1e-uid"}),  # nothing else leaks in
    ],
)
def test_of_builds_the_contracts_marks(request_, want):
    got = marks.of(request_)
    assert got == want
    assert list(got) == [k for k in (M, U, INST, N) if k in want]  # the contract's order


@pytest.mark.parametrize(
    ("rule", "uid", "ok"),
    [
        (GCE_LABEL, "7c1e-uid_1", True),
        (GCE_LABEL, "7C1E", False),  # GCE label values are lowercase
        (GCE_LABEL, "a.b", False),
        (GCE_LABEL, "x" * 63, True),
        (GCE_LABEL, "x" * 64, False),
        (GCE_LABEL, "", False),
        (HETZNER_LABEL, "Ab.c-d_e", True),
        (HETZNER_LABEL, "-leading", False),  # alphanumeric at both ends
        (HETZNER_LABEL, "trailing.", False),
        (HETZNER_LABEL, "x" * 64, False),
        (TAG_VALUE, "arn:aws/x=y+z@w", True),
        (TAG_VALUE, "x" * 256, True),
        (TAG_VALUE, "x" * 257, False),
        (TAG_VALUE, "with space", False),
        (None, "anything at all, even spaces", True),  # a backend that takes any string
    ],
)
def test_problem_judges_the_uid_by_the_backends_rule(rule, uid, ok):
    got = marks.problem(req(uid=uid), rule)
    if ok:
        assert got is None
    else:
        assert got is not None and got.startswith("uid is not a valid ") and repr(uid[:80]) in got


def test_problem_says_the_rule_and_cuts_a_long_value():
    rule = ValueRule("GCE label value", re.compile(r"^[a-z]+$"), "lowercase letters")
    assert marks.problem(req(uid="A" * 500), rule) == f"uid is not a valid GCE label value (lowercase letters; got {'A' * 80!r})"
    bare = ValueRule("tag", re.compile(r"^[a-z]+$"))
    assert marks.problem(req(uid="A"), bare) == "uid is not a valid tag (got 'A')"


@pytest.mark.parametrize("rule", [None, GCE_LABEL, HETZNER_LABEL, TAG_VALUE])
def test_problem_then_judges_the_installation_on_every_backend(rule):
    assert marks.problem(req(uid="u1", installation="blue"), rule) is None
    got = marks.problem(req(uid="u1", installation="Blue Team"), rule)
    assert got == base.installation_problem("Blue Team") and got


def test_a_bad_uid_is_named_before_a_bad_installation():
    got = marks.problem(req(uid="BAD UID", installation="Blue Team"), GCE_LABEL)
    assert got is not None and got.startswith("uid ")
