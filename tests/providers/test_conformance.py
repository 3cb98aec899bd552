"""The conformance suite's own verdicts: an escaped backend exception, a
classified error without its cause, a false NotFound and a malformed verdict
each fail it (a suite that cannot fail proves nothing)."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

from providers import base
from providers.base import TargetStatus
from providers.registry import TYPES
from tests.providers import conformance
from tests.providers.conformance import assert_contract_error, assert_valid_targets


def wrapped(cls: type[base.ProviderError], op: str = "get", cause: BaseException | None = None) -> base.ProviderError:
    try:
        try:
            raise cause or OSError("reset")
        except Exception as exc:
            raise base.wrap(cls, op, "p", "id", exc) from exc
    except base.ProviderError as err:
        return err


@pytest.mark.parametrize(
    "outcome",
    [KeyError("metadata"), json.JSONDecodeError("x", "{", 1), ValueError("?"), base.ProviderError("get", "p")],
)
def test_an_escaped_or_unclassified_exception_fails(outcome):
    with pytest.raises(AssertionError, match="escaped"):
        assert_contract_error("get", "p", outcome, may_be_gone=False)


def test_a_classified_error_without_its_cause_fails():
    with pytest.raises(AssertionError, match="__cause__"):
        assert_contract_error("get", "p", base.Transient("get", "p", "id", "no cause"), may_be_gone=False)


def test_a_false_not_found_fails_and_a_true_one_passes():
    with pytest.raises(AssertionError, match="false NotFound"):
        assert_contract_error("get", "p", wrapped(base.NotFound), may_be_gone=False)
    with pytest.raises(AssertionError, match="false NotFound"):
        assert_contract_error("create", "p", wrapped(base.NotFound, "create"), may_be_gone=True)
    assert_contract_error("get", "p", wrapped(base.NotFound), may_be_gone=True)


def test_the_op_and_the_configured_name_are_checked():
    with pytest.raises(AssertionError):
        assert_contract_error("delete", "p", wrapped(base.Transient, "get"), may_be_gone=False)
    with pytest.raises(AssertionError):
        assert_contract_error("get", "other", wrapped(base.Transient), may_be_gone=False)
    assert_contract_error("list_by_tag", "p", wrapped(base.Transient, "list"), may_be_gone=False)
    assert_contract_error("get", "p", None, may_be_gone=False)  # returning is fine


@pytest.mark.parametrize(
    "targets",
    [
        [TargetStatus("", reason="Reachable")],
        [TargetStatus("a", reason="Whatever")],
        [TargetStatus("a", reason="Reachable", latency=float("nan"))],
        [TargetStatus("a", reason="Reachable", latency=-1)],
        [TargetStatus("a", reason="Reachable"), TargetStatus("a", reason="Reachable")],
        [TargetStatus("a", reason="Reachable", details={"n": 1})],  # type: ignore[dict-item]
        ("not", "a list"),
    ],
)
def test_malformed_verdicts_fail(targets):
    with pytest.raises(AssertionError):
        assert_valid_targets(targets, base.SHARED_REASONS)


# --- every registered type runs every mixin ------------------------------------------


MIXINS = (conformance.ProviderConformance, conformance.CheckerConformance, conformance.FaultConformance)
# A type that can't run a mixin, and why. Each entry must still be needed
# (the test below fails once the type gains the mixin, so the list can't rot).
EXEMPT = {
    ("fake", "FaultConformance"): "no backend: scripted verdicts, no request to fail",
    ("local", "FaultConformance"): "no wire: state files and squid processes on this host (its own tests break both)",
    ("upstream", "FaultConformance"): "no wire: the verbs read and write a state file and read listFile (its own tests break both)",
}


def mixins_run_by(type_name: str) -> set[str]:
    """The mixins subclassed by a test class in tests/providers/<type>/."""
    package = importlib.import_module(f"tests.providers.{type_name}")
    found: set[str] = set()
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and obj.__module__ == module.__name__ and obj.__name__.startswith("Test"):
                found.update(m.__name__ for m in MIXINS if issubclass(obj, m))
    return found


@pytest.mark.parametrize("type_name", sorted(TYPES))
def test_every_registered_type_runs_every_mixin(type_name):
    found = mixins_run_by(type_name)
    for mixin in MIXINS:
        exempt = (type_name, mixin.__name__) in EXEMPT
        if exempt:
            assert mixin.__name__ not in found, f"{type_name} runs {mixin.__name__} now: drop it from EXEMPT"
        else:
            assert mixin.__name__ in found, f"no test class in tests/providers/{type_name}/ subclasses {mixin.__name__}"


def test_the_meta_test_can_fail():
    """A package without the mixins is caught (here: a package that has none)."""
    assert mixins_run_by("fake") >= {"ProviderConformance", "CheckerConformance"}
    assert "FaultConformance" not in mixins_run_by("fake")
