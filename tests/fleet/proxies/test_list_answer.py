"""`tasks.controller.proxy_list_problem`: which record_proxy_list messages are dropped (one row each)."""

from __future__ import annotations

import pytest

from tasks.controller import proxy_list_problem

GOOD = {"provider": "edge", "list_id": "abc"}


@pytest.mark.parametrize("args, kwargs, problem", [
    (({"ok": True},), GOOD, None),
    ((), GOOD, "expects one provider-call outcome"),
    (("text",), GOOD, "expects one provider-call outcome"),
    (({},), {"provider": "edge"}, "exactly the keyword arguments"),
    (({},), {**GOOD, "key": "x"}, "exactly the keyword arguments"),
    (({},), {**GOOD, "list_id": ""}, "list_id must be"),
    (({},), {**GOOD, "provider": "p" * 321}, "provider must be"),
    (({},), {**GOOD, "provider": 3}, "provider must be"),
])
def test_proxy_list_problem(args, kwargs, problem):
    got = proxy_list_problem(args, kwargs)
    assert got is None if problem is None else problem in (got or "")
