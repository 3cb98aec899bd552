"""The one names module and the one show/clip (providers.names, providers.text): a row per rule."""

from __future__ import annotations

import re

import pytest

from providers import names
from providers.text import clip, show

NAMES = [
    # (name, label, subdomain, hostname)
    ("a", True, True, True),
    ("kvm-home", True, True, True),
    ("a" * 63, True, True, True),
    ("a" * 64, False, True, False),  # a subdomain's parts are not bounded to 63 (Kubernetes' rule)
    ("web.example", False, True, True),
    ("Web", False, False, True),  # a host name takes any case
    ("-a", False, False, False),
    ("a-", False, False, False),
    ("a_b", False, False, False),
    ("a..b", False, False, False),
    ("", False, False, False),
    ("abc\n", False, False, False),  # fullmatch: no newline slips past a `$`
    ("é", False, False, False),
    (".".join(["a" * 63] * 4), False, False, False),  # 255 characters: over 253
    ("127.0.0.1", False, True, True),
]


@pytest.mark.parametrize(("name", "label", "subdomain", "hostname"), NAMES)
def test_names(name: str, label: bool, subdomain: bool, hostname: bool) -> None:
    assert (names.is_label(name), names.is_subdomain(name), names.is_hostname(name)) == (label, subdomain, hostname)


def test_a_trailing_dot_only_where_allowed() -> None:
    assert not names.is_hostname("example.com.")
    assert names.is_hostname("example.com.", trailing_dot=True)
    assert not names.is_hostname(".", trailing_dot=True)


def test_the_patterns_are_the_functions() -> None:
    """The text patterns (for CRD and OpenAPI schemas) say what the functions check, bounds aside."""
    for name, label, subdomain, _ in NAMES:
        assert (bool(re.fullmatch(names.anchored(names.LABEL).strip("^$"), name)) and len(name) <= 63) or not label
        assert bool(re.fullmatch(names.SUBDOMAIN, name, re.ASCII)) or not subdomain
    assert not names.is_label(None) and not names.is_label(7)


@pytest.mark.parametrize(("text", "limit", "clipped"), [
    ("abc", 3, "abc"),
    ("abcd", 3, "ab…"),
    ("", 0, ""),
    ("ab", 1, "…"),
])
def test_clip_keeps_within_the_limit(text: str, limit: int, clipped: str) -> None:
    assert clip(text, limit) == clipped and len(clipped) <= limit


@pytest.mark.parametrize(("value", "shown"), [
    ("short", "'short'"),
    ("x" * 70, "'" + "x" * 60 + "'… (70 characters)"),
    (2**200, "an integer of about 61 digits"),
    (float("inf"), "inf"),
    ([1, 2], "a list of 2 item(s)"),
    ({}, "{}"),
    (None, "None"),
    (object(), "a object"),
])
def test_show_is_bounded(value: object, shown: str) -> None:
    assert show(value) == shown
