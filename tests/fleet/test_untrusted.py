"""The one hostile-input reader (fleet.untrusted), each hostile input once:
the providers file (tests/fleet/test_hostile_input.py) and the manifests
(tests/fleet/proxies/test_manifests.py) test it as their callers see it."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from fleet.untrusted import (
    FileProblem,
    Located,
    YamlLimits,
    YamlProblem,
    decode,
    documents,
    load_located,
    load_one,
    read_bounded,
)

LIMITS = YamlLimits(max_nodes=1000, max_depth=8, max_number_chars=40)
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))

# text -> (the problem's path, the start of its reason, fatal)
HOSTILE: dict[str, tuple[str, str, str, bool]] = {
    "billion laughs": (BOMB, ".c[7]", "the file has more than 1000 values (aliases counted as they expand) (line 3)", True),
    "a 41-digit number": ("a: " + "9" * 41 + "\n", ".a", "not valid YAML at line 1, column 4: a number of 41 characters (at most 40)",
                          False),
    "a 41-character float": ("a: 1." + "5" * 39 + "\n", ".a", "not valid YAML at line 1, column 4: a number of 41 characters", False),
    "duplicate key": ("a: 1\nb: 2\na: 3\n", ".a", "duplicate key 'a' (first at line 1) (line 3)", False),
    "alias into itself": ("a: &x [1, *x]\n", ".a[1]", "alias *x refers to a node that contains it (line 1)", False),
    "undefined alias": ("a: *nowhere\n", "", "not valid YAML at line 1, column 4: found undefined alias 'nowhere'", True),
    "too deep": ("a: " + "[" * 9 + "]" * 9 + "\n", ".a" + "[0]" * 8, "nested deeper than 8 levels (line 1)", False),
    "too deep through an alias": ("a: &d [[[[[[1]]]]]]\nb: [[[*d]]]\n", ".b[0][0][0]", "nested deeper than 8 levels (line 2)", False),
    "libyaml's own depth limit": ("a: " + "[" * 20000 + "]" * 20000, ".a[0]", "nested deeper than 8 levels (line 1)", True),
    "complex key": ("? [a]\n: 1\n", "", "mapping keys must be plain strings or numbers (line 1)", False),
    "bad timestamp": ("a: 2024-13-45\n", ".a", "not valid YAML at line 1, column 4: not a valid timestamp (ValueError)", False),
    "python tag": ("a: !!python/object/apply:os.system [echo]\n", ".a",
                   "not valid YAML at line 1, column 4: could not determine a constructor", False),
    "NUL character": ("a: [\x00]\n", "", "not valid YAML: unacceptable character #x0000", True),
    "syntax error": ("a: b: c\n", "", "not valid YAML at line 1, column 5: mapping values are not allowed", True),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_yaml_is_a_problem_with_its_path(case: str) -> None:
    text, path, why, fatal = HOSTILE[case]
    start = time.monotonic()
    got = list(documents(text + "---\nafter: 1\n", LIMITS))
    assert time.monotonic() - start < 2
    problem = got[0]
    assert isinstance(problem, YamlProblem), problem
    assert (problem.path, problem.fatal) == (path, fatal), problem
    assert problem.why.startswith(why), problem.why
    assert got[1:] == ([] if fatal else [{"after": 1}])  # a bad document leaves the next one readable
    said = re.search(r"\(line (\d+)\)$", why) or re.search(r"at line (\d+), column", why)
    assert problem.line == (int(said.group(1)) if said else None)  # the line, as a number too


def test_a_located_document_has_each_field_s_line() -> None:
    text = ("rules:\n"
            "  - name: a\n"
            "    domains: [x, y]\n"
            "    actions:\n"
            "      cooldown:\n"
            "        soon\n"
            "  - {name: b, 'odd key': 1}\n"
            "copy: &c {deep: [1]}\n"
            "again: *c\n")
    doc = load_located(text, LIMITS)
    assert doc.data["rules"][0]["actions"] == {"cooldown": "soon"}
    lines = {path: doc.line(path) for path in (
        "", "rules", "rules[0]", "rules[0].name", "rules[0].domains[1]", "rules[0].actions",
        "rules[0].actions.cooldown", "rules[1]", "rules[1].name", "rules[1]['odd key']", "again", "again.deep[0]",
        "rules[0].actions.cooldown.unknown", "nowhere")}
    assert lines == {
        "": 1, "rules": 1, "rules[0]": 2, "rules[0].name": 2, "rules[0].domains[1]": 3, "rules[0].actions": 4,
        "rules[0].actions.cooldown": 5,  # a mapping entry's line is its key's, not its value's
        "rules[1]": 7, "rules[1].name": 7, "rules[1]['odd key']": 7,
        "again": 9, "again.deep[0]": 9,  # through an alias: the alias's place, the nearest one known
        "rules[0].actions.cooldown.unknown": 5, "nowhere": 1}
    assert load_located("", LIMITS) == Located(None, {}) and Located(None, {}).line("a") is None
    assert load_one(text, LIMITS) == doc.data


def test_a_shared_alias_below_the_bound_is_built_once() -> None:
    doc = load_one("labels: &l {x: y}\nannotations: *l\n", LIMITS)
    assert doc == {"labels": {"x": "y"}, "annotations": {"x": "y"}}


def test_the_budget_is_the_stream_s_not_a_document_s() -> None:
    text = "---\n".join(f"a: [{', '.join(['1'] * 300)}]\n" for _ in range(4))
    got = list(documents(text, LIMITS))
    assert got[:3] == [{"a": [1] * 300}] * 3
    assert isinstance(got[3], YamlProblem) and got[3].fatal and got[3].why.startswith("the file has more than 1000 values")


def test_one_document_only_where_single() -> None:
    with pytest.raises(YamlProblem, match="not valid YAML at line 2, column 1: expected a single document"):
        load_one("a: 1\n---\nb: 2\n", LIMITS)
    assert load_one("", LIMITS) is None
    assert load_one("# nothing\n", LIMITS) is None


def test_empty_documents_are_none() -> None:
    assert list(documents("# nothing here\n---\n---\n...\n", LIMITS)) == [None, None]


ENCODINGS: dict[str, tuple[bytes, str | None]] = {
    "UTF-16 with a BOM": ("a: 1\n".encode("utf-16"), "the file looks UTF-16 encoded; save it as UTF-8"),
    "UTF-16 without a BOM": ("a: 1\n".encode("utf-16-le"), "the file looks UTF-16 encoded; save it as UTF-8"),
    "UTF-16 big-endian without a BOM": ("a: 1\n".encode("utf-16-be"), "the file looks UTF-16 encoded"),
    "Latin-1": ("a: 1\nb: caf\xe9\n".encode("latin-1"), "the file is not UTF-8: invalid byte 0xe9 at offset 11 (line 2); save it as UTF-8"),
    "a UTF-8 BOM is dropped": (b"\xef\xbb\xbfa: 1\n", None),
}


@pytest.mark.parametrize("case", ENCODINGS)
def test_encodings(case: str) -> None:
    data, why = ENCODINGS[case]
    if why is None:
        assert decode(data) == "a: 1\n"
        return
    with pytest.raises(FileProblem) as info:
        decode(data)
    assert str(info.value).startswith(why)


def test_the_size_bound_reads_no_more(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * 2049)
    with pytest.raises(FileProblem, match="the file is 2049 bytes; at most 2048 are read"):
        read_bounded(path, 2048)
    assert read_bounded(path, 4096) == b"#" * 2049


@pytest.mark.parametrize("kind", ["fifo", "dir", "/dev/zero"])
def test_only_a_regular_file_is_read(tmp_path: Path, kind: str) -> None:
    path: Any = tmp_path
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # nobody writes: reading it would block forever
    elif kind == "/dev/zero":
        path = kind
    with pytest.raises(FileProblem, match="must be a regular file"):
        read_bounded(path, 1024)
