"""Loading and validating the providers file, before anything starts.

The file is `providers: [{name, type, <type>: {...}}]`. Every problem is
collected (not just the first) and names its field path and the bad value,
e.g. `providers[1].kvm.hosts[0].address: ... (got 'nas1')`. The type
allow-list and the blocks come from `providers.registry.TYPES`.

The file is hostile input until proven otherwise, so it is read through
`fleet.untrusted` (`fleet validate` on any file ends in well under a second):
only a regular file of at most `MAX_FILE_BYTES`, strict UTF-8, YAML bounded
before it is built (`MAX_DEPTH` levels, `MAX_NODES` values counted as
aliases expand, no duplicate keys, numbers of at most `MAX_NUMBER_CHARS`),
one document. Messages show values through `providers.text.show` (bounded,
containers by size only), never the value of an unknown key (it may be a
misspelt secret: `vendorDta`) and never a block's `secret_fields`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fleet import untrusted
from fleet.untrusted import FileProblem, YamlLimits, YamlProblem, key_step, load_one, read_bounded
from providers import names, registry
from providers.text import clip, show

MAX_NAME = names.MAX_LABEL
MAX_FILE_BYTES = 1 << 20  # 1 MiB; a file of 100 providers is ~50 KiB
MAX_NODES = 50_000  # after alias expansion; 1,000 fake targets with 5 fields is ~11,000
MAX_DEPTH = 32  # the deepest real path (providers[0].kvm.hosts[0].x) is 5 levels
MAX_NUMBER_CHARS = 40
MAX_PROBLEMS = 50  # listed; the rest are counted



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


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else key_step(part)
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
    if not names.is_label(name):
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
        msg = clip(msg, 200)
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

LIMITS = YamlLimits(max_nodes=MAX_NODES, max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS)
WHAT = "the providers file"


def read_bytes(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes: only a regular file, at most `limit` bytes. Never
    blocks on a FIFO or device. Raises ConfigError."""
    try:
        return read_bounded(path, limit, WHAT)
    except FileProblem as exc:
        raise ConfigError(str(path), [str(exc)]) from None


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The file's text: `read_bytes`, strict UTF-8. Raises ConfigError."""
    return decode(read_bytes(path, limit), str(path))


def decode(data: bytes, source: str) -> str:
    try:
        return untrusted.decode(data, WHAT)
    except FileProblem as exc:
        raise ConfigError(source, [str(exc)]) from None


def loads(text: str, source: str = "<providers>") -> Any:
    """The YAML document in `text`, within the bounds above (`fleet.untrusted`). Raises ConfigError."""
    try:
        return load_one(text, LIMITS)
    except YamlProblem as problem:  # a parser's own error without a place reads alone
        alone = not problem.where and problem.why.startswith("not valid YAML")
        raise ConfigError(source, [problem.why if alone else str(problem)]) from None


def load_bytes(data: bytes, source: str) -> ProvidersConfig:
    """The config in `data` (the file's bytes as `read_bytes` gave them). Raises ConfigError."""
    return parse(loads(decode(data, source), source), source)


def load(path: str | Path) -> ProvidersConfig:
    source = str(path)
    return parse(loads(read_text(path), source), source)
