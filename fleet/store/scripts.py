"""Fleet's Lua scripts: the files under fleet/store/lua/ (package data), read once
when the module that runs them is imported (`fleet.store.leases`, `.proxies`,
`.statuses`), and the one layout of each script's ARGV.

A script's text as Redis runs it is its module's constants (Lua locals), then
its module's shared files (Lua functions several scripts call), then its own
file. Each file reads its ARGV into locals at its top, in the order of its
layout; the Python side names its values and `Scripts.argv` puts them in that
order, so neither side counts positions (tests/fleet/test_store_lua.py holds
the two together for every script).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

Constant = str | int | float
REST = "..."  # a layout's last name ending in it takes the rest of ARGV (a list; in Lua `{unpack(ARGV, n)}`)


def read(name: str) -> str:
    """The text of fleet/store/lua/<name>.lua (`name` may hold a folder: 'proxies/begin')."""
    return resources.files("fleet.store").joinpath("lua", *f"{name}.lua".split("/")).read_text(encoding="utf-8")


def lua_literal(value: Constant) -> str:
    """A constant as Lua source (plain ASCII strings only: nothing to escape)."""
    if isinstance(value, str):
        if not value.isascii() or "'" in value or "\\" in value:
            raise ValueError(f"not a plain Lua string: {value!r}")
        return f"'{value}'"
    return repr(value)


@dataclass(frozen=True)
class Scripts:
    """One module's scripts: each one's ARGV layout (names, in order) and its text as Redis runs it."""

    folder: str  # under fleet/store/lua/ ('' the folder itself)
    layouts: Mapping[str, tuple[str, ...]]
    constants: Mapping[str, Constant] = field(default_factory=dict)
    shared: tuple[str, ...] = ()  # files (in `folder`) in front of every script, in this order
    texts: Mapping[str, str] = field(default_factory=dict)

    def path(self, name: str) -> str:
        """A script's or shared file's name for `read`."""
        return f"{self.folder}/{name}" if self.folder else name

    def argv(self, script: str, /, **values: Any) -> list[Any]:
        """`values` in the order of the script's layout: every name once, no other (a name gone from one side
        fails here)."""
        layout = self.layouts[script]
        if len(values) != len(layout):
            raise TypeError(f"{self.path(script)}: ARGV {sorted(values)} is not {sorted(layout)}")
        out = [values[name] for name in layout if not name.endswith(REST)]
        if layout and layout[-1].endswith(REST):  # the rest of ARGV: a list
            out.extend(values[layout[-1].removesuffix(REST)])
        return out

    def register(self, client: Any, *names: str) -> list[Any]:
        """The named scripts on `client` (a redis-py client, synchronous or asyncio), in that order: each runs
        by EVALSHA, its text sent again only when the server answers NOSCRIPT."""
        return [client.register_script(self.texts[name]) for name in names]


def load(layouts: Mapping[str, Sequence[str]], *, folder: str = "", constants: Mapping[str, Constant] | None = None,
         shared: Sequence[str] = ()) -> Scripts:
    """Read a module's scripts once (at its import, not per call or per client): every script named in `layouts`,
    each behind the constants and the shared files."""
    spec = Scripts(folder, {k: tuple(v) for k, v in layouts.items()}, dict(constants or {}), tuple(shared))
    head = "".join(f"local {k} = {lua_literal(v)}\n" for k, v in spec.constants.items())
    head += "".join(read(spec.path(name)) for name in spec.shared)
    return replace(spec, texts={name: head + read(spec.path(name)) for name in spec.layouts})
