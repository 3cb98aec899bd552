"""Reading what a user hands us (the providers file, Proxy manifests) as
hostile input, the one reader both use, bounded in time and memory:

- `read_bounded`: only a regular file (never blocking on a FIFO or a
  device), at most `limit` bytes, whatever its size claims;
- `decode`: strict UTF-8; a UTF-16 file (with a BOM or without: every other
  byte NUL) or an invalid byte is named with its offset and line; a UTF-8
  BOM is dropped;
- `documents` / `load_one`: YAML through the safe constructor only, each
  document bounded before it is built, in one pass over the parser's events:
  nesting deeper than `YamlLimits.max_depth` (an alias counts as deep as the
  node it names), more than `max_nodes` values in the stream counted as
  aliases expand (so an alias bomb stops after a few hundred events), an
  alias to a node that contains it or to no node, non-scalar and duplicate
  keys (naming both lines), numbers longer than `max_number_chars`, and
  values the constructor cannot build (a timestamp like 2024-13-45) are a
  `YamlProblem` with the field path, never a traceback. A problem in one
  document leaves the others readable; a syntax error or the exhausted
  budget ends the stream (`fatal`).

Messages name places by field path and line, never by a snippet of the text
(it may be cloud-init or a secret); values appear only through
`providers.text.show`.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from providers.text import clip, show


class FileProblem(Exception):
    """Why the file can't be read; the message names it as the caller said (`what`)."""


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def read_bounded(path: str | Path, limit: int, what: str = "the file") -> bytes:
    """The file's bytes, or FileProblem."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise FileProblem(f"cannot read {what}: {exc.strerror or exc}") from None
    except ValueError:  # an embedded NUL
        raise FileProblem(f"cannot read {what}: the path contains a NUL byte") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(f"{what} must be a regular file, this is {_kind(st.st_mode)}")
        if st.st_size > limit:
            raise FileProblem(f"{what} is {st.st_size} bytes; at most {limit} are read")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileProblem(f"cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileProblem(f"{what} is larger than {limit} bytes")
    return data


def raise_open_files_limit() -> int:
    """Lift the soft limit of open files to the hard one (a socket per connection or probe
    is a descriptor); the limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return int(target)
    return int(soft)


def decode(data: bytes, what: str = "the file") -> str:
    """`data` as strict UTF-8 text, or FileProblem naming `what`."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) > 1 and (data[0] == 0) != (data[1] == 0)):
        raise FileProblem(f"{what} looks UTF-16 encoded; save it as UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileProblem(f"{what} is not UTF-8: invalid byte 0x{data[exc.start]:02x} at offset {exc.start} "
                          f"(line {line}); save it as UTF-8") from None
    return text.removeprefix("\ufeff")  # a UTF-8 BOM is harmless


# --- YAML ------------------------------------------------------------------------

if TYPE_CHECKING:  # the stubs' CSafeLoader is no SafeLoader subclass; both parse the same
    _PARSER = yaml.SafeLoader
else:
    _PARSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SIMPLE_KEY = re.compile(r"[A-Za-z_][-A-Za-z0-9_]{0,63}", re.ASCII)
MAX_PROBLEM = 160  # characters of a YAML parser's own message


@dataclass(frozen=True)
class YamlLimits:
    max_nodes: int  # values in the stream, aliases counted as they expand
    max_depth: int = 32
    max_number_chars: int = 40


class YamlProblem(Exception):
    """Why a document cannot be used: `path` is the field path (`.a[0].b`,
    "" for the document), `why` the reason; `fatal` when the rest of the
    stream is not read."""

    def __init__(self, path: str, why: str, *, fatal: bool = False, line: int | None = None) -> None:
        super().__init__(f"{path.lstrip('.') or 'the document'}: {why}")
        self.path, self.why, self.fatal, self.line = path, why, fatal, line  # line: 1-based, where known

    @property
    def where(self) -> str:
        """The path without its leading '.' ("" for the document)."""
        return self.path.lstrip(".")


def key_step(key: Any) -> str:
    """A mapping key as a path step: `.name` when plain, else `[<bounded repr>]`."""
    if isinstance(key, str) and _SIMPLE_KEY.fullmatch(key):
        return f".{key}"
    return f"[{show(key, 40)}]"


class _Frame:
    __slots__ = ("anchor", "expect_key", "height", "index", "keys", "kind", "path", "pending", "start")
    keys: dict[Any, int]  # a key's first line

    def __init__(self, kind: str, path: str, start: int, anchor: str | None) -> None:
        self.kind, self.path, self.start, self.anchor = kind, path, start, anchor
        self.expect_key, self.index, self.keys, self.pending, self.height = True, 0, {}, path, 0

    def here(self) -> str:
        return self.pending if self.kind == "map" else f"{self.path}[{self.index}]"

    def advance(self) -> None:
        if self.kind == "map":
            self.expect_key = True
        else:
            self.index += 1


class _Builder(yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """The safe composer and constructor over one document's checked events.
    A value it cannot build (2024-13-45, an integer of 5,000 digits) is a
    YAML error at its node, never a traceback."""

    def __init__(self, events: list[yaml.Event], limits: YamlLimits) -> None:
        self._events, self._next, self._limits = events, 0, limits
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    def check_event(self, *choices: type[yaml.Event]) -> bool:
        if self._next >= len(self._events):
            return False
        return not choices or isinstance(self._events[self._next], choices)

    def peek_event(self) -> yaml.Event:
        return self._events[self._next]

    def get_event(self) -> yaml.Event:
        self._next += 1
        return self._events[self._next - 1]

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        most = self._limits.max_number_chars
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith((":int", ":float")) and len(node.value) > most:
            raise yaml.constructor.ConstructorError(
                None, None, f"a number of {len(node.value)} characters (at most {most})", node.start_mark)
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError, ArithmeticError, AttributeError, LookupError) as exc:
            what = node.tag.rsplit(":", 1)[-1]
            raise yaml.constructor.ConstructorError(
                None, None, f"not a valid {what} ({type(exc).__name__})", node.start_mark) from None


def _yaml_problem(exc: yaml.YAMLError, paths: dict[tuple[int, int], str], *, fatal: bool = False) -> YamlProblem:
    """The problem of a parser's or constructor's error: its reason and
    place, never its snippet of the text."""
    if isinstance(exc, yaml.reader.ReaderError):
        return YamlProblem("", f"not valid YAML: unacceptable character #x{exc.character:04x} at character {exc.position} "
                               f"({exc.reason})", fatal=fatal)
    mark = getattr(exc, "problem_mark", None)
    problem = clip(str(getattr(exc, "problem", None) or type(exc).__name__), MAX_PROBLEM)
    if mark is None:
        return YamlProblem("", f"not valid YAML: {problem}", fatal=fatal)
    return YamlProblem(paths.get((mark.line, mark.column), ""),
                       f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}",
                       fatal=fatal, line=mark.line + 1)


class _Stream:
    """One pass over a stream's events: each document's events, checked."""

    def __init__(self, text: str, limits: YamlLimits) -> None:
        self.events = yaml.parse(text, Loader=_PARSER)
        self.limits = limits
        self.total = 0  # values so far in the stream, aliases expanded

    def next_event(self, where: str) -> yaml.Event | None:
        try:
            return next(self.events)
        except StopIteration:
            return None
        except yaml.MarkedYAMLError as exc:
            # libyaml scans flow collections ahead and stops at its own depth
            # limit (1000) before the events reach ours: the same problem.
            if "nesting depth" in str(exc.problem) and exc.problem_mark is not None:
                raise YamlProblem(where, f"nested deeper than {self.limits.max_depth} levels "
                                         f"(line {exc.problem_mark.line + 1})", fatal=True,
                                  line=exc.problem_mark.line + 1) from None
            raise _yaml_problem(exc, {}, fatal=True) from None
        except yaml.YAMLError as exc:
            raise _yaml_problem(exc, {}, fatal=True) from None

    def document(self, start: yaml.Event) -> tuple[list[yaml.Event], dict[tuple[int, int], str], dict[str, int]]:
        """The events of the document `start` opens, through its end, each
        node's field path by its (line, column), and each field path's
        1-based line (a mapping entry's: its key's). Raises YamlProblem."""
        limits = self.limits
        events: list[yaml.Event] = [start]
        paths: dict[tuple[int, int], str] = {}
        lines: dict[str, int] = {}
        sizes: dict[str, int] = {}  # an anchor's expanded size
        heights: dict[str, int] = {}  # an anchor's height (a scalar: 0)
        open_anchors: set[str] = set()
        stack: list[_Frame] = []

        def fail(path: str, mark: Any, why: str) -> YamlProblem:
            return YamlProblem(path, f"{why} (line {mark.line + 1})", line=mark.line + 1)

        def spend(values: int, path: str, mark: Any) -> None:
            self.total += values
            if self.total > limits.max_nodes:
                raise YamlProblem(path, f"the file has more than {limits.max_nodes} values (aliases counted as they "
                                        f"expand) (line {mark.line + 1})", fatal=True, line=mark.line + 1)

        def grow(parent: _Frame | None, height: int) -> None:
            if parent is not None:
                parent.height = max(parent.height, height + 1)
                parent.advance()

        while True:
            ev = self.next_event(stack[-1].here() if stack else "")
            if ev is None:
                return events, paths, lines
            events.append(ev)
            if isinstance(ev, yaml.DocumentEndEvent):
                return events, paths, lines
            if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                fr = stack.pop()
                if fr.anchor:
                    sizes[fr.anchor], heights[fr.anchor] = self.total - fr.start, fr.height
                    open_anchors.discard(fr.anchor)
                grow(stack[-1] if stack else None, fr.height)
                continue
            if not isinstance(ev, yaml.NodeEvent):
                continue
            assert ev.start_mark is not None  # the parser marks every event
            parent = stack[-1] if stack else None
            if parent is not None and parent.kind == "map" and parent.expect_key:
                if not isinstance(ev, yaml.ScalarEvent):
                    raise fail(parent.path, ev.start_mark, "mapping keys must be plain strings or numbers")
                key = ev.value
                at = parent.path + key_step(key)
                if key in parent.keys:
                    raise fail(at, ev.start_mark, f"duplicate key {show(key, 40)} (first at line {parent.keys[key]})")
                parent.keys[key] = lines[at] = ev.start_mark.line + 1
                parent.pending, parent.expect_key = at, False
                spend(1, at, ev.start_mark)
                continue
            path = parent.here() if parent is not None else ""
            level = len(stack)
            if isinstance(ev, yaml.AliasEvent):
                anchor = ev.anchor or ""
                if anchor in open_anchors:
                    raise fail(path, ev.start_mark, f"alias *{show(anchor, 40)[1:-1]} refers to a node that contains it")
                if anchor not in sizes:
                    raise YamlProblem("", f"not valid YAML at line {ev.start_mark.line + 1}, column {ev.start_mark.column + 1}: "
                                          f"found undefined alias {show(anchor, 40)}", fatal=True, line=ev.start_mark.line + 1)
                if level + heights[anchor] > limits.max_depth:
                    raise fail(path, ev.start_mark, f"nested deeper than {limits.max_depth} levels")
                spend(sizes[anchor], path, ev.start_mark)
                grow(parent, heights[anchor])
                continue
            if level > limits.max_depth:
                raise fail(path, ev.start_mark, f"nested deeper than {limits.max_depth} levels")
            spend(1, path, ev.start_mark)
            paths.setdefault((ev.start_mark.line, ev.start_mark.column), path)
            lines.setdefault(path, ev.start_mark.line + 1)
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append(_Frame("map" if isinstance(ev, yaml.MappingStartEvent) else "seq", path, self.total - 1, ev.anchor))
                if ev.anchor:
                    open_anchors.add(ev.anchor)
            else:
                if ev.anchor:
                    sizes[ev.anchor], heights[ev.anchor] = 1, 0
                grow(parent, 0)

    def skip_document(self) -> None:
        """Past the end of a document whose check failed (nothing counted)."""
        while True:
            ev = self.next_event("")
            if ev is None or isinstance(ev, yaml.DocumentEndEvent):
                return


def _build(events: list[yaml.Event], paths: dict[tuple[int, int], str], limits: YamlLimits) -> Any:
    builder = _Builder(events, limits)
    try:
        node = builder.compose_document()
        return builder.construct_document(node)
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, paths) from None
    except RecursionError:  # not reached within max_depth; kept so no input ends in a traceback
        raise YamlProblem("", f"nested deeper than {limits.max_depth} levels") from None


def documents(text: str, limits: YamlLimits, *, single: bool = False) -> Iterator[Any]:
    """Each document's data in `text`, or a YamlProblem in its place; after
    a `fatal` one, nothing more. With `single`, a second document is a
    fatal problem."""
    for item in _documents(text, limits, single):
        yield item if isinstance(item, YamlProblem) else item.data


def located_documents(text: str, limits: YamlLimits) -> Iterator[Located | YamlProblem]:
    """`documents`, each with where its fields are (`Located`)."""
    return _documents(text, limits, False)


def _documents(text: str, limits: YamlLimits, single: bool) -> Iterator[Located | YamlProblem]:
    stream = _Stream(text, limits)
    seen = 0
    try:
        while True:
            ev = stream.next_event("")
            if ev is None:
                return
            if not isinstance(ev, yaml.DocumentStartEvent):
                continue
            seen += 1
            if single and seen > 1:
                assert ev.start_mark is not None
                yield YamlProblem("", f"not valid YAML at line {ev.start_mark.line + 1}, column {ev.start_mark.column + 1}: "
                                      "expected a single document in the stream, found another", fatal=True,
                                  line=ev.start_mark.line + 1)
                return
            try:
                events, paths, lines = stream.document(ev)
            except YamlProblem as problem:
                yield problem
                if problem.fatal:
                    return
                stream.skip_document()
                continue
            try:
                yield Located(_build(events, paths, limits), lines)
            except YamlProblem as problem:
                yield problem
    except YamlProblem as problem:  # a syntax error between documents
        yield problem


def load_one(text: str, limits: YamlLimits) -> Any:
    """The one document in `text` (None when there is none). Raises YamlProblem."""
    return load_located(text, limits).data


@dataclass(frozen=True)
class Located:
    """A document's data and where its fields are: each field path (as
    `YamlProblem.where` spells it: `rules[0].actions.cooldown`, "" the
    document) by its 1-based line, a mapping entry's being its key's. A node
    reached through an alias has its anchor's place (see `line`)."""

    data: Any
    lines: dict[str, int]  # the paths as the reader builds them (a leading '.' before a key)

    def line(self, path: str) -> int | None:
        """`path`'s line, else its nearest enclosing field's that has one."""
        raw = path if path == "" or path.startswith("[") else "." + path
        while True:
            if raw in self.lines:
                return self.lines[raw]
            if not raw:
                return None
            cut = raw.rfind("[") if raw.endswith("]") else raw.rfind(".")
            raw = raw[:max(cut, 0)]


def load_located(text: str, limits: YamlLimits) -> Located:
    """The one document in `text` with its fields' lines (data None, no lines when there is none).
    Raises YamlProblem."""
    found = Located(None, {})
    for item in _documents(text, limits, single=True):
        if isinstance(item, YamlProblem):
            raise item
        found = item
    return found
