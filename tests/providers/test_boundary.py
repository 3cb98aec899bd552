"""The shared error boundary (providers.boundary), as tables: what a call
raises for each classified failure, who hears of it, and the deadline."""

import contextlib
import importlib
import threading

import pytest

from providers.base import Deadline, NotFound, Permanent, ProviderError, QuotaExceeded, Transient, wrap
from providers.boundary import Boundary, DeadlinePassed, Failure

# A classify table as a provider writes one: known exceptions, the rest Transient.
TABLE: dict[type[BaseException], type[ProviderError]] = {
    LookupError: NotFound,
    PermissionError: Permanent,
    OverflowError: QuotaExceeded,
    ConnectionError: Transient,
}


def classify(exc: BaseException, op: str) -> type[ProviderError]:
    for known, cls in TABLE.items():
        if isinstance(exc, known):
            return Permanent if cls is NotFound and op == "create" else cls
    return Transient


class Recorder:
    def __init__(self) -> None:
        self.failures: list[Failure] = []

    def __call__(self, failure: Failure) -> None:
        self.failures.append(failure)


def boundary(on_error=None) -> Boundary:
    return Boundary(provider="cloud-eu", classify=classify, on_error=on_error)


def failing(exc: BaseException):
    def fn(_remaining: float):
        raise exc
    return fn


@pytest.mark.parametrize(
    ("exc", "op", "want", "told"),
    [
        (KeyError("gone"), "get", NotFound, False),  # NotFound is an answer: never logged
        (KeyError("gone"), "create", Permanent, True),  # the table's own rule per verb
        (PermissionError("denied"), "delete", Permanent, True),
        (OverflowError("quota"), "create", QuotaExceeded, True),
        (ConnectionResetError("reset"), "list", Transient, True),
        (RuntimeError("nobody mapped me"), "get", Transient, True),  # unmapped: Transient
        (ValueError("malformed answer"), "list", Transient, True),  # reading the answer fails inside fn
    ],
)
def test_a_failure_is_classified_wrapped_from_itself_and_told_unless_not_found(exc, op, want, told):
    heard = Recorder()
    with pytest.raises(ProviderError) as err:
        boundary(heard).call(op=op, pid="zones/z/instances/n", deadline=Deadline.after(5), fn=failing(exc))
    assert type(err.value) is want
    assert (err.value.op, err.value.provider, err.value.id) == (op, "cloud-eu", "zones/z/instances/n")
    assert err.value.__cause__ is exc and err.value.cause is exc
    if told:
        (f,) = heard.failures
        assert (f.op, f.id, f.error, f.cls) == (op, "zones/z/instances/n", exc, want)
        assert 0 <= f.elapsed < 5
    else:
        assert heard.failures == []


@pytest.mark.parametrize("seconds", [0, -1, -3600])
def test_a_passed_deadline_raises_transient_before_calling(seconds):
    heard, called = Recorder(), []
    b = boundary(heard)
    with pytest.raises(Transient) as err:
        b.call(op="create", pid="n", deadline=Deadline.after(seconds), fn=called.append)
    assert called == [] and b.calls == 0 and heard.failures == []
    assert isinstance(err.value.__cause__, DeadlinePassed) and isinstance(err.value.__cause__, TimeoutError)
    assert "deadline passed before the call" in str(err.value)


def test_fn_gets_the_time_left_and_its_answer_passes_through():
    got = boundary().call(op="get", pid="n", deadline=Deadline.after(30), fn=lambda t: ("answer", t))
    assert got[0] == "answer" and 29 < got[1] <= 30


@pytest.mark.parametrize("cls", [NotFound, QuotaExceeded, Transient, Permanent])
def test_a_provider_error_from_fn_is_already_translated_and_passes_unchanged(cls):
    heard, inner = Recorder(), wrap(cls, "create", "cloud-eu", "hosts/h/images/i", "download failed")
    with pytest.raises(ProviderError) as err:
        boundary(heard).call(op="create", pid="n", deadline=Deadline.after(5), fn=failing(inner))
    assert err.value is inner and heard.failures == []


def test_without_a_hook_failures_are_only_raised():
    with pytest.raises(Transient):
        boundary(None).call(op="get", pid="n", deadline=Deadline.after(5), fn=failing(RuntimeError("x")))


def test_every_started_call_is_counted_once_across_threads():
    b = boundary()

    def work() -> None:
        for i in range(200):
            with contextlib.suppress(Transient):
                b.call(op="get", pid="n", deadline=Deadline.after(5), fn=failing(RuntimeError()) if i % 2 else lambda t: t)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b.calls == 800


@pytest.mark.parametrize(
    "module",
    ["providers.aws.errors", "providers.gcp.errors", "providers.hetzner.errors", "providers.kubernetes.errors",
     "providers.kvm.errors", "providers.local.errors"],
)
@pytest.mark.parametrize("op", ["create", "get", "delete", "list"])
def test_each_providers_table_at_the_boundary_makes_an_unmapped_exception_transient(module, op):
    b = Boundary(provider="p", classify=importlib.import_module(module).classify)
    exc = RuntimeError("no backend ever raises this")
    with pytest.raises(Transient) as err:
        b.call(op=op, pid="", deadline=Deadline.after(5), fn=failing(exc))
    assert err.value.__cause__ is exc


class Guard:
    """Records the deadline it guards; raises on exit when told to (as the
    watchdog's guard does once it cut the call's connection)."""

    def __init__(self, cut: bool = False) -> None:
        self.cut, self.inside, self.deadlines = cut, False, []

    def __call__(self, deadline: Deadline) -> contextlib.AbstractContextManager[object]:
        self.deadlines.append(deadline)

        @contextlib.contextmanager
        def cm():
            self.inside = True
            try:
                yield
            finally:
                self.inside = False
            if self.cut:
                raise ConnectionAbortedError("the deadline passed during the call")
        return cm()


def test_the_whole_call_runs_under_the_guard_and_a_cut_is_classified():
    g, heard, deadline = Guard(), Recorder(), Deadline.after(5)
    b = Boundary(provider="p", classify=classify, on_error=heard, guard=g)
    assert b.call(op="get", pid="n", deadline=deadline, fn=lambda t: g.inside) is True
    assert g.deadlines == [deadline] and not g.inside
    cut = Boundary(provider="p", classify=classify, on_error=heard, guard=Guard(cut=True))
    with pytest.raises(Transient) as err:
        cut.call(op="get", pid="n", deadline=deadline, fn=lambda t: "read, but can't be trusted")
    assert isinstance(err.value.__cause__, ConnectionAbortedError) and len(heard.failures) == 1


def test_a_passed_deadline_never_enters_the_guard():
    g = Guard()
    with pytest.raises(Transient):
        Boundary(provider="p", classify=classify, guard=g).call(op="get", pid="n", deadline=Deadline.after(-1), fn=lambda t: t)
    assert g.deadlines == []


def test_a_backend_that_judges_the_deadline_itself_is_called_past_it():
    """kvm: its pool dials even past the deadline, so the dial reports its stage."""
    b = Boundary(provider="p", classify=classify, deadline_first=False)
    assert b.call(op="get", pid="n", deadline=Deadline.after(-1), fn=lambda t: ("dialed", t)) == ("dialed", 0.0)
    assert b.calls == 1


def test_a_provider_may_hear_of_not_found_too():
    heard = Recorder()
    b = Boundary(provider="p", classify=classify, on_error=heard, tell_not_found=True)
    with pytest.raises(NotFound):
        b.call(op="get", pid="n", deadline=Deadline.after(5), fn=failing(KeyError("gone")))
    assert [f.cls for f in heard.failures] == [NotFound]


@pytest.mark.parametrize(("exc", "op", "want", "told"), [(OverflowError("quota"), "create", QuotaExceeded, True),
                                                         (KeyError("gone"), "get", NotFound, False)])
def test_a_failure_reported_in_an_answer_is_translated_alike(exc, op, want, told):
    heard = Recorder()
    b = boundary(heard)
    err = b.translate(op=op, pid="zones/z/instances/n", error=exc)
    assert type(err) is want and err.cause is exc and str(err) == str(wrap(want, op, "cloud-eu", "zones/z/instances/n", exc))
    assert [(f.op, f.error, f.elapsed) for f in heard.failures] == ([(op, exc, 0.0)] if told else [])
    assert b.calls == 0  # no call was made
