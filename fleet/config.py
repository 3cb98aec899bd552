"""Loading and validating the providers file, before anything starts.

The file is `providers: [{name, type, <type>: {...}}]`. Every problem is
collected (not just the first) and names its field path and the bad value,
e.g. `providers[1].kvm.hosts[0].address: ... (got 'nas1')`. The type
allow-list and the blocks come from `providers.registry.TYPES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from providers import registry

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 63


class ConfigError(Exception):
    """The providers file is unusable; `problems` lists every reason."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))

    def report(self) -> str:
        lines = [f"{self.source}: {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
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


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_name(name: Any) -> str | None:
    """Why `name` is not a DNS-1123 label, or None."""
    if not isinstance(name, str) or not name:
        return "is required and must be a string"
    if len(name) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters, has {len(name)}"
    if not DNS1123_LABEL.match(name):
        return "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"
    return None


def parse(data: Any, source: str = "<providers>") -> ProvidersConfig:
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the file must be a mapping with a 'providers' list (got {_show(data)})"])
    for key in data:
        if key != "providers":
            problems.append(f"{key}: unknown key (got {_show(data[key])}); the only top-level key is 'providers'")
    entries = data.get("providers")
    if not isinstance(entries, list):
        raise ConfigError(source, problems + [f"providers: must be a list (got {_show(entries)})"])

    types = sorted(registry.TYPES)
    out: list[ProviderConfig] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        at = f"providers[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{at}: must be a mapping with name and type (got {_show(entry)})")
            continue
        name, type_name = entry.get("name"), entry.get("type")
        why = validate_name(name)
        if why:
            problems.append(f"{at}.name: {why} (got {_show(name)})")
        elif name in seen:
            problems.append(f"{at}.name: duplicate of providers[{seen[name]}].name (got {_show(name)})")
        else:
            seen[name] = i
        for key in entry:
            if key not in ("name", "type") and key not in registry.TYPES:
                problems.append(f"{at}.{key}: unknown key (got {_show(entry[key])})")
        if type_name not in registry.TYPES:
            problems.append(f"{at}.type: must be one of {', '.join(types)} (got {_show(type_name)})")
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
            for err in exc.errors():
                where = _path(f"{at}.{type_name}", tuple(err["loc"]))
                problems.append(f"{where}: {err['msg']} (got {_show(err.get('input'))})")
            continue
        if not why:
            out.append(ProviderConfig(name=name, type=type_name, block=block))
    if problems:
        raise ConfigError(source, problems)
    return ProvidersConfig(tuple(out))


def load(path: str | Path) -> ProvidersConfig:
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the providers file: {exc.strerror or exc}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from exc
    return parse(data, source)
