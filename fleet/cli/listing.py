"""What `fleet get` prints, whatever the resource: a `Listing` of `Item`s,
each an object's table row, its `-o name` line, its JSON shape and what
counts as a change of it. A listing is shown once (`show`: a table, `-o
wide` the same with more columns, `-o name`, JSON or YAML), or watched
(`Watch`, `--watch`): read again every 2 s and only what changed printed, as
`kubectl get -w` prints it.

Watching: the first read is printed whole (a table with its header; JSON
and YAML one document per object). After that an object is printed again
when it is new, when it changed, and once more (its last row) when it is
gone, which is what kubectl does; nothing is printed while nothing changed.
What a change is belongs to the resource (`Item.sig`): the ages and "lapses
in" countdowns are left out, or every row would change every second. Later
rows are padded to the first header's widths. A read that fails after the
first (Redis restarting) is said once on stderr and the watch keeps trying
every interval; the first read failing is the command's exit 3, as without
--watch. Ctrl-C ends it (the caller exits 0).

Pure but for the reader, the clock's sleep and the two streams, which the
caller hands in (tests give fakes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

WATCH_INTERVAL = 2.0  # seconds between reads of `--watch`
GAP = "   "  # between columns (kubectl's look; fleet.cli.tables.grid's)

FORMATS = ("table", "wide", "name", "json", "yaml")


@dataclass(frozen=True)
class Item:
    """One object as `fleet get` shows it."""

    key: str  # who it is across reads ("namespace/name")
    row: Sequence[Any]  # its table cells, in the listing's `head` order
    name: str  # its `-o name` line
    obj: Any  # its JSON shape
    sig: str = ""  # what a change of `obj` is (JSON, YAML): another sig is a change ("": obj itself)
    notes: Sequence[str] = ()  # lines shown below the table for it (ph's targets)

    def signature(self, fmt: str, volatile: Sequence[int] = ()) -> str:
        """What must differ for `fmt` to print it again: its row but the `volatile` columns (a table, names), else
        its object's `sig`."""
        if fmt in ("json", "yaml"):
            return self.sig or json.dumps(self.obj, sort_keys=True, default=str)
        return json.dumps([str(c) for i, c in enumerate(self.row) if i not in volatile])


@dataclass
class Listing:
    """The objects of one read, with how the resource prints them whole."""

    head: Sequence[str]
    items: list[Item]
    empty: str  # said on stderr when there is nothing to show (table, wide, name)
    document: Callable[[str], str]  # all of them as "json" or "yaml", the resource's own shape
    indent: int = 2  # one object's JSON (a watch prints each object by itself)
    sort_keys: bool = True
    note: str = ""  # said on stderr once, before the first output (ph: the schedule it judges by)
    volatile: Sequence[int] = ()  # the columns that move by themselves (AGE): no change of the object


def widths(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[int]:
    table = [tuple(head), *(tuple(r) for r in rows)]
    return [max(len(str(row[i])) for row in table) for i in range(len(head))]


def line(cells: Sequence[Any], sizes: Sequence[int]) -> str:
    """One row padded to `sizes` (a cell wider than its column pushes the rest right)."""
    return GAP.join(str(c).ljust(w) for c, w in zip(cells, sizes, strict=True)).rstrip()


def table(listing: Listing) -> str:
    sizes = widths(listing.head, [i.row for i in listing.items])
    lines = [line(listing.head, sizes), *(line(i.row, sizes) for i in listing.items)]
    lines += [n for i in listing.items for n in i.notes]
    return "\n".join(lines)


def one(listing: Listing, obj: Any, fmt: str) -> str:
    """One object as a JSON or YAML document of its own (a watch's)."""
    if fmt == "json":
        return json.dumps(obj, indent=listing.indent, sort_keys=listing.sort_keys, ensure_ascii=False)
    import yaml

    return "---\n" + yaml.safe_dump(obj, sort_keys=listing.sort_keys, default_flow_style=False,
                                    allow_unicode=True).rstrip()


def show(listing: Listing, fmt: str) -> tuple[str | None, str | None]:
    """(stdout, stderr) of printing the listing once in `fmt`; None: nothing for that stream."""
    if fmt in ("json", "yaml"):
        return listing.document(fmt), None
    if not listing.items:
        return None, listing.empty
    if fmt == "name":
        return "\n".join(i.name for i in listing.items), None
    return table(listing), None


class Watch:
    """`--watch`'s state: what was printed last, by key, and the table's column widths."""

    def __init__(self, fmt: str, out: Callable[[str], None], err: Callable[[str], None]) -> None:
        self.fmt, self.out, self.err = fmt, out, err
        self.seen: dict[str, Item] = {}
        self.sizes: list[int] | None = None  # the header's widths, once printed
        self.failing = ""  # the error of the read failing now ("" : reads succeed)

    def _print(self, listing: Listing, items: Sequence[Item]) -> None:
        if not items:
            return
        if self.fmt == "name":
            self.out("\n".join(i.name for i in items))
        elif self.fmt in ("json", "yaml"):
            self.out("\n".join(one(listing, i.obj, self.fmt) for i in items))
        else:
            lines = []
            if self.sizes is None:
                self.sizes = widths(listing.head, [i.row for i in items])
                lines.append(line(listing.head, self.sizes))
            for i in items:
                lines.append(line(i.row, self.sizes))
                lines += i.notes
            self.out("\n".join(lines))

    def first(self, listing: Listing) -> None:
        if listing.note:
            self.err(listing.note)
        if not listing.items and self.fmt not in ("json", "yaml"):
            self.err(listing.empty)
        self._print(listing, listing.items)
        self.seen = {i.key: i for i in listing.items}

    def changed(self, listing: Listing) -> list[Item]:
        """What to print of a new read: the new and changed objects in the read's order, then the gone ones (their
        last state); `seen` becomes this read."""
        now = {i.key: i for i in listing.items}
        vol = listing.volatile
        out = [i for i in listing.items
               if i.key not in self.seen or self.seen[i.key].signature(self.fmt, vol) != i.signature(self.fmt, vol)]
        out += [i for k, i in self.seen.items() if k not in now]
        self.seen = now
        return out

    def next(self, listing: Listing) -> None:
        if self.failing:
            self.err("fleet get: reading again")
            self.failing = ""
        self._print(listing, self.changed(listing))

    def failed(self, why: str) -> None:
        """A read after the first failed: said once (until one succeeds, or another error comes)."""
        if why != self.failing:
            self.err(f"fleet get: {why} (trying again every {WATCH_INTERVAL:g}s)")
        self.failing = why


def watch(read: Callable[[], Listing], first: Listing, fmt: str, *, out: Callable[[str], None],
          err: Callable[[str], None], sleep: Callable[[float], None], retry: tuple[type[BaseException], ...],
          interval: float = WATCH_INTERVAL, reads: int | None = None) -> None:
    """Print `first` whole, then read every `interval` and print what changed, until interrupted (or after `reads`
    reads: tests). A read raising one of `retry` is said on stderr and tried again."""
    w = Watch(fmt, out, err)
    w.first(first)
    done = 0
    while reads is None or done < reads:
        sleep(interval)
        done += 1
        try:
            listing = read()
        except retry as exc:
            w.failed(str(exc))
            continue
        w.next(listing)


@dataclass
class Source:
    """Where `fleet get` reads a resource: `read` (raises common.Unreachable when the backend does not answer),
    `close` when done, and what to say when a NAME asked for is not there (None: an empty listing is no error)."""

    read: Callable[[], Listing]
    close: Callable[[], None]
    missing: str | None = None


def run(source: Source, fmt: str, name: str | None, watching: bool) -> int:
    """`fleet get`: read once and show (exit 1 when the NAME asked for is not there), or watch until Ctrl-C (exit
    0). The first read's common.Unreachable is the caller's exit 3."""
    import sys
    import time

    from fleet.cli.common import EXIT_NOT_READY, EXIT_OK, Unreachable

    def out(text: str) -> None:
        print(text, flush=True)

    def err(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        first = source.read()
        if name is not None and not first.items and source.missing is not None:
            err(source.missing)
            return EXIT_NOT_READY
        if not watching:
            if first.note:
                err(first.note)
            text, said = show(first, fmt)
            if said is not None:
                err(said)
            if text is not None:
                out(text)
            return EXIT_OK
        try:
            watch(source.read, first, fmt, out=out, err=err, sleep=time.sleep, retry=(Unreachable,))
        except KeyboardInterrupt:  # Ctrl-C is how a watch ends: quietly, exit 0
            return EXIT_OK
        return EXIT_OK
    finally:
        source.close()
