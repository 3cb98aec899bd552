"""Loading and validating the providers file, before anything starts.

The file is `providers: [{name, type, <type>: {...}}]`. Every problem is
collected (not just the first) and names its field path and the bad value,
e.g. `providers[1].kvm.hosts[0].address: ... (got 'nas1')`. The type
allow-list and the blocks come from `providers.registry.TYPES`.

The file is hostile input until proven otherwise, so loading is bounded in
time and memory (`fleet validate` on any file ends in well under a second):

- only a regular file is read (a FIFO, /dev/zero or a directory is refused
  without blocking), at most `MAX_FILE_BYTES`; it must be UTF-8 (a UTF-16
  BOM or invalid bytes are named with their offset);
- a first pass over the YAML events, before anything is built, refuses
  nesting deeper than `MAX_DEPTH`, more than `MAX_NODES` nodes counted as
  aliases expand (so an alias bomb stops after a few hundred events),
  aliases to a node that contains them, non-scalar keys and duplicate keys
  (naming both lines), and records each node's field path for later errors;
- integers and floats longer than `MAX_NUMBER_CHARS` and values the YAML
  constructor cannot build (a timestamp like 2024-13-45) are errors with
  their path, never tracebacks;
- messages show values through `fleet.settings.show` (bounded, containers by
  size only), never the value of an unknown key (it may be a misspelt
  secret: `vendorDta`) and never a block's `secret_fields`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from fleet.settings import show
from fleet.untrusted import FileProblem, read_bounded
from providers import registry

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)
MAX_NAME = 63
MAX_FILE_BYTES = 1 << 20  # 1 MiB; a file of 100 providers is ~50 KiB
MAX_NODES = 50_000  # after alias expansion; 1,000 fake targets with 5 fields is ~11,000
MAX_DEPTH = 32  # the deepest real path (providers[0].kvm.hosts[0].x) is 5 levels
MAX_NUMBER_CHARS = 40
MAX_PROBLEMS = 50  # listed; the rest are counted

if TYPE_CHECKING:  # the stubs' CSafeLoader is no SafeLoader subclass; both build the same
    _BASE_LOADER = yaml.SafeLoader
else:
    _BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SIMPLE_KEY = re.compile(r"[A-Za-z_][-A-Za-z0-9_]{0,63}", re.ASCII)


class ConfigError(Exception):
    """The providers file is unusable; `problems` lists every reason."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems[:MAX_PROBLEMS]))

    def report(self) -> str:
        lines = [f"{self.source}: {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems[:MAX_PROBLEMS]]
        if len(self.problems) > MAX_PROBLEMS:
            lines.append(f"  - ... and {len(self.problems) - MAX_PROBLEMS} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    type: str
    block: BaseModel

    def redacted(self) -> dict[str, Any]:
        """The effective config with secret fields masked, for display."""
        data = self.block.model_dump(mode="json")
        for f in getattr(type(self.block), "secret_fields", ()):
            if data.get(f):
                data[f] = "<redacted>"
        return {"name": self.name, "type": self.type, self.type: data}


@dataclass(frozen=True)
class ProvidersConfig:
    providers: tuple[ProviderConfig, ...]

    def names(self) -> list[str]:
        return [p.name for p in self.providers]

    def get(self, name: str) -> ProviderConfig:
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(f"provider {name!r} is not configured (have: {', '.join(self.names()) or 'none'})")


def _key(key: Any) -> str:
    """A mapping key as a path step: `.name` when plain, else `[<bounded repr>]`."""
    if isinstance(key, str) and _SIMPLE_KEY.fullmatch(key):
        return f".{key}"
    return f"[{show(key, 40)}]"


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else _key(part)
    return out


def _type_of(value: Any) -> str:
    """What a value is, without showing it (for unknown keys)."""
    if value is None:
        return "null"
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "a list",
            dict: "a mapping"}.get(type(value), f"a {type(value).__name__}")


def _unknown(at: str, key: Any, value: Any, known: Any) -> str:
    """An unknown key: never its value (it may be a misspelt secret field)."""
    hint = ""
    if isinstance(key, str) and len(key) <= 64:
        close = difflib.get_close_matches(key, [k for k in known if isinstance(k, str)], n=1)
        if close:
            hint = f"; did you mean {close[0]!r}?"
    return f"{_path(at, (key,))}: unknown key{hint} (its value, {_type_of(value)}, is not shown)"


def validate_name(name: Any) -> str | None:
    """Why `name` is not a DNS-1123 label, or None."""
    if not isinstance(name, str) or not name:
        return "is required and must be a string"
    if len(name) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters, has {len(name)}"
    if not DNS1123_LABEL.fullmatch(name):
        return "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"
    return None


def _block_problems(at: str, model: Any, exc: ValidationError) -> list[str]:
    secret = set(getattr(model, "secret_fields", ()))
    known = list(getattr(model, "model_fields", {}))
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            out.append(_unknown(_path(at, loc[:-1]), loc[-1], err.get("input"), known if len(loc) == 1 else ()) if loc else at)
            continue
        where = _path(at, loc)
        msg = str(err["msg"])
        msg = msg if len(msg) <= 200 else msg[:200] + "..."
        if err["type"] == "missing":
            out.append(f"{where}: {msg}")
        elif any(part in secret for part in loc):
            out.append(f"{where}: {msg} (got <redacted>)")
        else:
            out.append(f"{where}: {msg} (got {show(err.get('input'))})")
    return out


def parse(data: Any, source: str = "<providers>") -> ProvidersConfig:
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the file must be a mapping with a 'providers' list (got {show(data)})"])
    for key in data:
        if key != "providers":
            problems.append(_unknown("", key, data[key], ["providers"]).lstrip(".") + "; the only top-level key is 'providers'")
    entries = data.get("providers")
    if not isinstance(entries, list):
        raise ConfigError(source, problems + [f"providers: must be a list (got {show(entries)})"])

    types = sorted(registry.TYPES)
    out: list[ProviderConfig] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        at = f"providers[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{at}: must be a mapping with name and type (got {show(entry)})")
            continue
        name: Any = entry.get("name")  # a str once validate_name passes it
        type_name = entry.get("type")
        why = validate_name(name)
        if why:
            problems.append(f"{at}.name: {why} (got {show(name)})")
        elif name in seen:
            problems.append(f"{at}.name: duplicate of providers[{seen[name]}].name (got {show(name)})")
        else:
            seen[name] = i
        for key in entry:
            if key not in ("name", "type") and not (isinstance(key, str) and key in registry.TYPES):
                problems.append(_unknown(at, key, entry[key], ["name", "type", *types]))
        if not isinstance(type_name, str) or type_name not in registry.TYPES:
            problems.append(f"{at}.type: must be one of {', '.join(types)} (got {show(type_name)})")
            continue
        for other in types:
            if other != type_name and other in entry:
                problems.append(f"{at}.{other}: a {type_name} provider takes only a '{type_name}' block (got {other!r})")
        raw = entry.get(type_name, {})
        if raw is None:
            raw = {}
        model = registry.config_model(type_name)
        try:
            block = model.model_validate(raw)
        except ValidationError as exc:
            problems.extend(_block_problems(f"{at}.{type_name}", model, exc))
            continue
        except RecursionError:  # a bounded file cannot nest this deep; parse() may be handed anything
            problems.append(f"{at}.{type_name}: nested too deeply")
            continue
        if not why:
            out.append(ProviderConfig(name=name, type=type_name, block=block))
    if problems:
        raise ConfigError(source, problems)
    return ProvidersConfig(tuple(out))


# --- reading the file -----------------------------------------------------------


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The file's text: only a regular file, at most `limit` bytes, strict
    UTF-8. Never blocks on a FIFO or device. Raises ConfigError."""
    source = str(path)
    try:
        data = read_bounded(path, limit, "the providers file")
    except FileProblem as exc:
        raise ConfigError(source, [str(exc)]) from None
    return decode(data, source)


def decode(data: bytes, source: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) > 1 and (data[0] == 0) != (data[1] == 0)):
        raise ConfigError(source, ["the providers file looks UTF-16 encoded; save it as UTF-8"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(source, [f"the providers file is not UTF-8: invalid byte 0x{data[exc.start]:02x} "
                                   f"at offset {exc.start} (line {line}); save it as UTF-8"]) from None
    return text.removeprefix("\ufeff")  # a UTF-8 BOM is harmless


class _Frame:
    __slots__ = ("anchor", "expect_key", "index", "keys", "kind", "path", "pending", "start")
    keys: dict[Any, int]  # a key's first line

    def __init__(self, kind: str, path: str, start: int, anchor: str | None) -> None:
        self.kind, self.path, self.start, self.anchor = kind, path, start, anchor
        self.expect_key, self.index, self.keys, self.pending = True, 0, {}, path


def _where(path: str) -> str:
    return path.lstrip(".") or "the document"


def _scan(text: str, source: str) -> dict[tuple[int, int], str]:
    """Bound the document before building it: depth, expanded size, aliases,
    keys. Returns the field path of each node by its (line, column)."""
    paths: dict[tuple[int, int], str] = {}
    sizes: dict[str, int] = {}
    open_anchors: set[str] = set()
    stack: list[_Frame] = []
    total = 0

    def fail(path: str, mark: Any, why: str) -> ConfigError:
        return ConfigError(source, [f"{_where(path)}: {why} (line {mark.line + 1})"])

    def here() -> str:
        if not stack:
            return ""
        top = stack[-1]
        return top.pending if top.kind == "map" else f"{top.path}[{top.index}]"

    events = yaml.parse(text, Loader=_BASE_LOADER)
    while True:
        try:
            ev = next(events)
        except StopIteration:
            break
        except yaml.MarkedYAMLError as exc:
            # libyaml scans flow collections ahead and stops at its own depth
            # limit (1000) before our check sees the events: same message.
            if "nesting depth" in str(exc.problem):
                raise fail(here(), exc.problem_mark, f"nested deeper than {MAX_DEPTH} levels") from None
            raise
        if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            fr = stack.pop()
            if fr.anchor:
                sizes[fr.anchor] = total - fr.start
                open_anchors.discard(fr.anchor)
            if stack:
                _advance(stack[-1])
            continue
        if not isinstance(ev, yaml.NodeEvent):
            continue
        assert ev.start_mark is not None  # the parser marks every event
        parent = stack[-1] if stack else None
        if parent is not None and parent.kind == "map" and parent.expect_key:
            if not isinstance(ev, yaml.ScalarEvent):
                raise fail(parent.path, ev.start_mark, "mapping keys must be plain strings or numbers")
            key = ev.value
            if key in parent.keys:
                raise fail(parent.path + _key(key), ev.start_mark,
                           f"duplicate key {show(key, 40)} (first at line {parent.keys[key]})")
            parent.keys[key] = ev.start_mark.line + 1
            parent.pending = parent.path + _key(key)
            parent.expect_key = False
            total += 1
            continue
        path = "" if parent is None else parent.pending if parent.kind == "map" else f"{parent.path}[{parent.index}]"
        if isinstance(ev, yaml.AliasEvent):
            assert ev.anchor is not None  # an alias always names its anchor
            if ev.anchor in open_anchors:
                raise fail(path, ev.start_mark, f"alias *{show(ev.anchor, 40)[1:-1]} refers to a node that contains it")
            total += sizes.get(ev.anchor, 1)
        else:
            total += 1
            paths[(ev.start_mark.line, ev.start_mark.column)] = path
        if total > MAX_NODES:
            raise fail(path, ev.start_mark, f"the document has more than {MAX_NODES} values (aliases counted as they expand)")
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(stack) >= MAX_DEPTH:
                raise fail(path, ev.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            stack.append(_Frame("map" if isinstance(ev, yaml.MappingStartEvent) else "seq", path, total - 1, ev.anchor))
            if ev.anchor:
                open_anchors.add(ev.anchor)
        else:
            if isinstance(ev, yaml.ScalarEvent) and ev.anchor:
                sizes[ev.anchor] = 1
            if parent is not None:
                _advance(parent)
    return paths


def _advance(fr: _Frame) -> None:
    if fr.kind == "map":
        fr.expect_key = True
    else:
        fr.index += 1


class _Loader(_BASE_LOADER):
    """SafeLoader that turns a value it cannot build into a YAML error at its
    node, and refuses numbers longer than MAX_NUMBER_CHARS."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith((":int", ":float")) and len(node.value) > MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                None, None, f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS})", node.start_mark)
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError, ArithmeticError) as exc:
            what = node.tag.rsplit(":", 1)[-1]
            raise yaml.constructor.ConstructorError(
                None, None, f"not a valid {what} ({type(exc).__name__})", node.start_mark) from None


def _yaml_problem(exc: yaml.YAMLError, paths: dict[tuple[int, int], str]) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"not valid YAML: unacceptable character #x{exc.character:04x} at character {exc.position} ({exc.reason})"
    mark = getattr(exc, "problem_mark", None)
    problem = str(getattr(exc, "problem", None) or type(exc).__name__)
    problem = problem if len(problem) <= 160 else problem[:160] + "..."
    if mark is None:
        return f"not valid YAML: {problem}"
    path = paths.get((mark.line, mark.column))
    where = f"{_where(path)}: " if path is not None else ""
    return f"{where}not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def loads(text: str, source: str = "<providers>") -> Any:
    """The YAML document in `text`, within the bounds above. Raises ConfigError."""
    paths: dict[tuple[int, int], str] = {}
    try:
        paths = _scan(text, source)
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc, paths)]) from None
    except RecursionError:  # not reached within MAX_DEPTH; kept so no input ends in a traceback
        raise ConfigError(source, [f"nested deeper than {MAX_DEPTH} levels"]) from None


def read_bytes(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes, bounded as `read_text` reads them. Raises ConfigError."""
    try:
        return read_bounded(path, limit, "the providers file")
    except FileProblem as exc:
        raise ConfigError(str(path), [str(exc)]) from None


def load_bytes(data: bytes, source: str) -> ProvidersConfig:
    """The config in `data` (the file's bytes as `read_bytes` gave them). Raises ConfigError."""
    return parse(loads(decode(data, source), source), source)


def load(path: str | Path) -> ProvidersConfig:
    source = str(path)
    return parse(loads(read_text(path), source), source)
