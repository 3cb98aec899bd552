"""Proxy objects in, `fleet.proxies.model.Proxy` out: the one boundary where
raw dicts become values, for both modes.

- Kubernetes mode: `parse_proxy(obj)` on each object the API returns.
- Standalone mode: `load_declared(path)` reads a file or a directory of
  manifests (what a user would `kubectl apply -f`), each Proxy with the
  `file#document` it came from (`load_manifests`: the Proxies alone), and
  `fingerprint(path)` tells a poller cheaply whether to read them again.
  `fleet validate --proxies` runs the same function.

`parse_proxy` validates what the CRD (deploy/crd/crawl.example.com_proxies.yaml)
validates, strictly: apiVersion and kind; metadata.name a DNS-1123 subdomain
(at most 253 characters, as Kubernetes allows for custom objects);
metadata.namespace a DNS-1123 label ("default" when a manifest has none);
spec.provider a DNS-1123 label; spec.placement's four optional strings;
spec.cloudInit exactly one of `inline` or `secretRef` {name, key} (the name a
DNS-1123 subdomain -- stricter than the CRD's length rule, but no Secret is
named otherwise -- the key Kubernetes' Secret key rule, which also refuses
'.', '..' and a leading '..'); spec.port an integer in the CRD's range (its
default when absent; a boolean is no integer). Every length, range, pattern
and default of the spec is the CRD's, taken from its table
(`fleet.proxies.schema`). Unknown keys in the object, spec,
placement, cloudInit and secretRef are errors (their values are never shown:
they may be a misspelt secret). A null optional field counts as absent, as
the API server prunes it. Other metadata (labels, managedFields, ...) is
tolerated. The status is the controller's own and is read leniently: an
ill-typed field falls back to its default, a malformed condition is skipped.

Identity: a manifest carries no uid and no generation; they stay "" and 0 here
(whatever a manifest does set is read and checked). The standalone caller
assigns both (uids in Redis) -- nothing here invents them.

Errors are `ManifestError`s: `<source>#<document>: <field path>: <why>, got
<value> (line N)`, the value shown through `providers.text.show` so no value floods a
message. A document's every problem is reported at once, in the file's order
(a missing field at its enclosing mapping's line); `parse_proxy` raises the first.
Documents are counted from 1 in a file. Cloud-init text never appears
in a message or a repr, only its length.

The files are hostile input, read through `fleet.untrusted` (the reader
the providers file uses too): each only if it is a regular file of at most
`MAX_FILE_BYTES`, strict UTF-8; YAML through the safe constructor only, each
document bounded before it is built: at most `MAX_DEPTH` levels, at most
`MAX_NODES` values per file counted as aliases expand (so an alias bomb
stops early), numbers of at most 40 characters, no alias to a node
containing it, no duplicate keys.
A bad document is reported and the next one is read; a YAML syntax error ends
its file (the parser cannot resynchronise), never the other files. In a
directory, every entry with a manifest's suffix is read: one that is no
regular file or cannot be opened (a symlink loop, no permission, a
dangling link) is one problem, never a reason to skip the directory.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, TypeVar

from fleet.proxies import schema
from fleet.proxies.model import (
    API_VERSION,
    KIND,
    LABEL_POOL,
    CloudInit,
    Condition,
    Proxy,
    ProxySpec,
    ProxyStatus,
    SecretRef,
)
from fleet.untrusted import FileProblem, Located, YamlLimits, YamlProblem, decode, key_step, located_documents, read_bounded
from providers import names
from providers.base import Placement
from providers.text import show

LIST_KINDS = ("List", "ProxyList")  # `kubectl get -o yaml` writes List; the API's list is ProxyList
OTHER_KINDS = ("ProxyPool",)  # documents of the same files another feature reads (fleet.pools.standalone): not Proxies
DEFAULT_NAMESPACE = "default"
SUFFIXES = (".yaml", ".yml", ".json")

# The spec's limits are the CRD's, from its table (fleet.proxies.schema).
MAX_NAME = schema.MAX_SUBDOMAIN  # metadata.name: a DNS-1123 subdomain
MAX_LABEL = schema.MAX_LABEL  # namespace: a DNS-1123 label
MAX_PROVIDER = schema.PROVIDER.bound("max_length")  # spec.provider: a DNS-1123 label
MAX_STRING = 253  # uid, resourceVersion, finalizers
MAX_PLACEMENT = {key: field.bound("max_length") for key, field in (schema.PLACEMENT.properties or {}).items()}
MAX_INLINE = schema.CLOUD_INIT["inline"].bound("max_length")  # in characters
MAX_SECRET_NAME = schema.SECRET_REF["name"].bound("max_length")
MAX_SECRET_KEY = schema.SECRET_REF["key"].bound("max_length")
MIN_PORT, MAX_PORT = schema.PORT.bound("minimum"), schema.PORT.bound("maximum")
DEFAULT_PORT = schema.PORT.bound("default")
MAX_FILE_BYTES = 1 << 20  # per file
MAX_DOCUMENTS = 10_000  # per file, List items included
MAX_FILES = 1_000  # per directory
MAX_NODES = 250_000  # per file, aliases counted as they expand; a full 1 MiB List is below this
MAX_DEPTH = 32  # the deepest real path, items[0].status.conditions[0].type, is 6 levels

_LABEL = re.compile(names.LABEL, re.ASCII)
_PROVIDER = re.compile(schema.PROVIDER.pattern or "", re.ASCII)
_SUBDOMAIN = re.compile(names.SUBDOMAIN, re.ASCII)
_SECRET_KEY = re.compile(schema.SECRET_REF["key"].pattern or "", re.ASCII)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)", re.ASCII)

_TOP = schema.CRD.schema.names()
_SPEC = schema.SPEC.names()
_PLACEMENT = {key: re.sub("([A-Z])", lambda m: "_" + m[1].lower(), key) for key in schema.PLACEMENT.names()}  # -> Placement
_CLOUD_INIT = schema.CLOUD_INIT.names()
_SECRET_REF = schema.SECRET_REF.names()

T = TypeVar("T")


class ManifestError(ValueError):
    """One problem of a Proxy object or document: where (`source`, e.g.
    `proxies.yaml#2`, the field `path`, and the file's `line` when known) and why (`message`)."""

    def __init__(self, path: str, message: str, *, source: str = "", line: int | None = None) -> None:
        self.path = path
        self.message = message
        self.source = source
        self.line = line
        super().__init__(path, message)

    def __str__(self) -> str:
        text = ": ".join(part for part in (self.source, self.path, self.message) if part)
        return f"{text} (line {self.line})" if self.line is not None else text

    def __repr__(self) -> str:
        return f"ManifestError({str(self)!r})"

    def moved(self, source: str, prefix: str = "", *, located: Located | None = None) -> ManifestError:
        """The same error placed in `source`, its path under `prefix` (a List item), its line
        looked up in the document it was read from (`located`)."""
        path = f"{prefix}.{self.path}" if prefix and self.path else prefix or self.path
        line = located.line(path) if located is not None else self.line
        return ManifestError(path, self.message, source=source, line=line)


def _take(problems: list[ManifestError], parse: Callable[..., T], *args: Any, default: T) -> T:
    """`parse(*args)`, or `default` with its problem added to `problems`: a document's every problem is
    reported at once, not one per edit."""
    try:
        return parse(*args)
    except ManifestError as exc:
        problems.append(exc)
        return default


# --- one object -------------------------------------------------------------------


def parse_proxy(obj: Mapping[str, Any], *, source: str = "") -> Proxy:
    """One Proxy object (from the API, or a manifest document) as a `Proxy`.
    Raises `ManifestError` naming `source`, the field and its value (the first problem; `proxy_problems`
    has them all)."""
    problems: list[ManifestError] = []
    proxy = _proxy(obj, problems)
    if proxy is None:
        raise problems[0].moved(source)
    return proxy


def _proxy(obj: Any, problems: list[ManifestError]) -> Proxy | None:
    """The Proxy, or None with every problem found added to `problems`."""
    if not isinstance(obj, Mapping):
        problems.append(ManifestError("", f"a Proxy must be a mapping, got {show(obj)}"))
        return None
    found = len(problems)
    _no_unknown("", obj, _TOP, problems)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version != API_VERSION:
        problems.append(ManifestError("apiVersion", f"must be {API_VERSION!r}, got {show(api_version)}"))
    if kind != KIND:
        problems.append(ManifestError("kind", f"must be {KIND!r}, got {show(kind)}"))
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        problems.append(ManifestError("metadata", f"is required and must be a mapping, got {show(meta)}"))
        meta = {}
    name = _take(problems, _name, meta.get("name"), "metadata.name", _SUBDOMAIN, MAX_NAME, "subdomain", default="")
    namespace = meta.get("namespace")
    namespace = DEFAULT_NAMESPACE if namespace is None else _take(
        problems, _name, namespace, "metadata.namespace", _LABEL, MAX_LABEL, "label", default="")
    uid = _take(problems, _string, meta.get("uid"), "metadata.uid", default="")
    generation = _take(problems, _generation, meta.get("generation"), default=0)
    spec = _spec(obj.get("spec"), problems)
    deletion = _take(problems, _timestamp, meta.get("deletionTimestamp"), "metadata.deletionTimestamp", default="")
    finalizers: tuple[str, ...] = _take(problems, _finalizers, meta.get("finalizers"), default=())
    annotations: dict[str, str] = _take(problems, _annotations, meta.get("annotations"), default={})
    version = _take(problems, _string, meta.get("resourceVersion"), "metadata.resourceVersion", default="")
    created = _take(problems, _timestamp, meta.get("creationTimestamp"), "metadata.creationTimestamp", default="")
    if len(problems) > found or spec is None:
        return None
    return Proxy(
        namespace=namespace,
        name=name,
        uid=uid,
        generation=generation,
        spec=spec,
        status=_status(obj.get("status")),
        deleting=meta.get("deletionTimestamp") is not None,
        deletion_timestamp=deletion,
        finalizers=finalizers,
        annotations=annotations,
        resource_version=version,
        created_at=created,
        pool=_pool(meta.get("labels")),
    )


def _pool(labels: Any) -> str:
    """The pool label's value when it can be a ProxyPool's name (a DNS-1123 label), else "": labels are
    free metadata (the API server validated them), so one that names no possible pool makes no member."""
    value = labels.get(LABEL_POOL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and len(value) <= MAX_LABEL and _LABEL.fullmatch(value) else ""


def _spec(spec: Any, problems: list[ManifestError]) -> ProxySpec | None:
    if not isinstance(spec, Mapping):
        problems.append(ManifestError("spec", f"is required and must be a mapping, got {show(spec)}"))
        return None
    found = len(problems)
    _no_unknown("spec", spec, _SPEC, problems)
    provider = _take(problems, _name, spec.get("provider"), "spec.provider", _PROVIDER, MAX_PROVIDER, "label", default="")
    placement = _placement(spec.get("placement"), problems)
    cloud_init = _take(problems, _cloud_init, spec.get("cloudInit"), default=CloudInit())
    port = _take(problems, _port, spec.get("port"), default=DEFAULT_PORT)
    if len(problems) > found:
        return None
    return ProxySpec(provider=provider, placement=placement, cloud_init=cloud_init, port=port)


def _placement(value: Any, problems: list[ManifestError]) -> Placement:
    if value is None:
        return Placement()
    if not isinstance(value, Mapping):
        problems.append(ManifestError("spec.placement", f"must be a mapping of {', '.join(_PLACEMENT)}, got {show(value)}"))
        return Placement()
    _no_unknown("spec.placement", value, tuple(_PLACEMENT), problems)
    return Placement(**{
        attr: _take(problems, _string, value.get(key), f"spec.placement.{key}", MAX_PLACEMENT[key], default="")
        for key, attr in _PLACEMENT.items()
    })


def _cloud_init(value: Any) -> CloudInit:
    """Never shows a value here but a secretRef's name and key: the text, or
    whatever was put where it belongs, may hold secrets."""
    at = "spec.cloudInit"
    if value is None:
        return CloudInit()
    if not isinstance(value, Mapping):
        raise ManifestError(at, f"must be a mapping with inline or secretRef, got {_type_of(value)} (not shown)")
    _first(_no_unknown, at, value, _CLOUD_INIT)
    inline, ref = value.get("inline"), value.get("secretRef")
    if (inline is None) == (ref is None):
        raise ManifestError(at, f"must set exactly one of inline or secretRef, {'both are' if inline is not None else 'neither is'} set")
    if inline is not None:
        if not isinstance(inline, str):
            raise ManifestError(f"{at}.inline", f"must be a string, got {_type_of(inline)} (not shown)")
        if len(inline) > MAX_INLINE:
            raise ManifestError(f"{at}.inline", f"must be at most {MAX_INLINE} characters, has {len(inline)} (the text is not shown)")
        return CloudInit(inline=inline)
    if not isinstance(ref, Mapping):
        raise ManifestError(f"{at}.secretRef", f"must be a mapping with name and key, got {_type_of(ref)} (not shown)")
    _first(_no_unknown, f"{at}.secretRef", ref, _SECRET_REF)
    name = _name(ref.get("name"), f"{at}.secretRef.name", _SUBDOMAIN, MAX_SECRET_NAME, "subdomain")
    key = ref.get("key")
    if not isinstance(key, str) or not key:
        raise ManifestError(f"{at}.secretRef.key", f"is required and must be a string, got {show(key)}")
    if len(key) > MAX_SECRET_KEY or not _SECRET_KEY.fullmatch(key) or key in (".", "..") or key.startswith(".."):
        raise ManifestError(
            f"{at}.secretRef.key",
            f"must be a Secret key: at most {MAX_SECRET_KEY} letters, digits, '-', '_' or '.', not '.', '..' or "
            f"starting with '..' (as Kubernetes requires), got {show(key)}",
        )
    return CloudInit(secret=SecretRef(name=name, key=key))


def _port(value: Any) -> int:
    if value is None:
        return DEFAULT_PORT
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PORT <= value <= MAX_PORT:
        raise ManifestError("spec.port", f"must be an integer from {MIN_PORT} to {MAX_PORT}, got {show(value)}")
    return value


def _generation(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError("metadata.generation", f"must be an integer of at least 0, got {show(value)}")
    return value


def _name(value: Any, at: str, pattern: re.Pattern[str], limit: int, kind: str) -> str:
    if value is None or value == "":
        raise ManifestError(at, f"is required, got {show(value)}")
    if not isinstance(value, str):
        raise ManifestError(at, f"must be a string, got {show(value)}")
    if len(value) > limit:
        raise ManifestError(at, f"must be at most {limit} characters, got {show(value)}")
    if not pattern.fullmatch(value):
        what = "lowercase letters, digits and '-'" + (" in '.'-separated parts" if kind == "subdomain" else "")
        raise ManifestError(
            at, f"must be a DNS-1123 {kind} ({what}, starting and ending with a letter or digit), got {show(value)}"
        )
    return value


def _string(value: Any, at: str, limit: int = MAX_STRING) -> str:
    """An optional short string: absent or null is ""."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ManifestError(at, f"must be a string, got {show(value)}")
    if len(value) > limit:
        raise ManifestError(at, f"must be at most {limit} characters, got {show(value)}")
    return value


def _finalizers(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ManifestError("metadata.finalizers", f"must be a list of strings, got {show(value)}")
    return tuple(_string(item, f"metadata.finalizers[{i}]") for i, item in enumerate(value))


def _annotations(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError("metadata.annotations", f"must be a mapping of strings to strings, got {show(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ManifestError(f"metadata.annotations{key_step(key)}", "keys must be strings")
        if not isinstance(item, str):  # `true` unquoted is a boolean: kubectl refuses it too
            raise ManifestError(f"metadata.annotations{key_step(key)}", f"must be a string, got {show(item)}")
        out[key] = item
    return out


def _timestamp(value: Any, at: str) -> str:
    """An RFC 3339 time as text; YAML turns an unquoted one into a datetime."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, str) and _RFC3339.fullmatch(value):
        try:
            datetime.fromisoformat(value.upper())  # the regex has the form; this, the ranges (month 13)
        except ValueError:
            pass
        else:
            return value
    shown = repr(value.isoformat()) if isinstance(value, date) else show(value)
    raise ManifestError(at, f"must be an RFC 3339 time such as 2024-05-01T12:00:00Z, got {shown}")


# --- status: ours, read leniently -----------------------------------------------------


def _status(value: Any) -> ProxyStatus:
    if not isinstance(value, Mapping):
        return ProxyStatus()
    return ProxyStatus(
        phase=_lenient_str(value.get("phase")),
        provider_id=_lenient_str(value.get("providerID")),
        ip=_lenient_str(value.get("ip")),
        port=_lenient_int(value.get("port")),
        spec_hash=_lenient_str(value.get("specHash")),
        observed_generation=_lenient_int(value.get("observedGeneration")),
        message=_lenient_str(value.get("message")),
        conditions=_conditions(value.get("conditions")),
        egress_ip=_lenient_str(value.get("egressIP")),
        member=_lenient_str(value.get("member")),
    )


def _conditions(value: Any) -> tuple[Condition, ...]:
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if not isinstance(item, Mapping):
            continue
        type_, status = item.get("type"), item.get("status")
        if not isinstance(type_, str) or not type_ or not isinstance(status, str):
            continue
        when = item.get("lastTransitionTime")
        if isinstance(when, datetime):
            when = _timestamp(when, "")
        out.append(Condition(
            type=type_, status=status, reason=_lenient_str(item.get("reason")), message=_lenient_str(item.get("message")),
            observed_generation=_lenient_int(item.get("observedGeneration")), last_transition_time=_lenient_str(when),
        ))
    return tuple(out)


def _lenient_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _lenient_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# --- shared helpers ---------------------------------------------------------------


def _type_of(value: Any) -> str:
    """What a value is, without showing it."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return {bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "a mapping"}.get(
        type(value), f"a {type(value).__name__}")


def _no_unknown(at: str, obj: Mapping[Any, Any], known: tuple[str, ...], problems: list[ManifestError]) -> None:
    for key in obj:
        if key in known:
            continue
        hint = ""
        if isinstance(key, str) and len(key) <= 64:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
        path = f"{at}{key_step(key)}".lstrip(".")
        problems.append(ManifestError(path, f"unknown key{hint} (its value, {_type_of(obj[key])}, is not shown)"))


def _first(check: Callable[..., None], *args: Any) -> None:
    """`check(*args, problems)` raising its first problem: a field parsed as one value (cloudInit)."""
    problems: list[ManifestError] = []
    check(*args, problems)
    if problems:
        raise problems[0]


# --- files --------------------------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """A Proxy read from `source` (`<file>#<document>`; a List item has its
    `prefix`, e.g. `items[2]`): where an error about it points."""

    proxy: Proxy
    source: str
    prefix: str = ""

    @property
    def file(self) -> str:
        return self.source.rpartition("#")[0] or self.source

    def error(self, path: str, message: str) -> ManifestError:
        """An error about this Proxy's field `path`, placed at its document (and List item)."""
        return ManifestError(path, message, source=self.source).moved(self.source, self.prefix)


@dataclass(frozen=True)
class Other:
    """A document of one of OTHER_KINDS (a ProxyPool), unparsed, with where it was read: its feature reads it."""

    obj: Mapping[str, Any]
    source: str
    prefix: str = ""

    @property
    def file(self) -> str:
        return self.source.rpartition("#")[0] or self.source


def load_manifests(path: str) -> tuple[list[Proxy], list[ManifestError]]:
    """Every Proxy in `path` and every problem (`load_declared` without the places)."""
    declared, errors = load_declared(path)
    return [d.proxy for d in declared], errors


def load_declared(path: str) -> tuple[list[Declared], list[ManifestError]]:
    """Every Proxy in `path` (a file, or a directory's *.yaml, *.yml and
    *.json entries, sorted, not recursive) with where it was read, and every
    problem, each naming its file, document and field. A bad document or file
    never stops the others -- nor does a directory entry that cannot be read
    (a symlink loop, no permission, a directory or FIFO with a manifest's
    name): it is one problem. A namespace/name seen before is an error for
    the later one. Documents of OTHER_KINDS (ProxyPools) are skipped here (`load_all` returns them)."""
    declared, _, errors = load_all(path)
    return declared, errors


def load_all(path: str) -> tuple[list[Declared], list[Other], list[ManifestError]]:
    """`load_declared`, plus the documents of OTHER_KINDS as they are (their feature checks them)."""
    files, errors = _files(path)
    found: list[Declared] = []
    others: list[Other] = []
    first: dict[tuple[str, str], str] = {}
    for file in files:
        for item in _read(file):
            if isinstance(item, ManifestError):
                errors.append(item)
                continue
            if isinstance(item, Other):
                others.append(item)
                continue
            proxy = item.proxy
            where = f"{item.source} {item.prefix}" if item.prefix else item.source
            seen = first.get((proxy.namespace, proxy.name))
            if seen is not None:
                errors.append(item.error("metadata.name", f"duplicate of {proxy.key} in {seen}"))
                continue
            first[(proxy.namespace, proxy.name)] = where
            found.append(item)
    return found, others, errors


def fingerprint(path: str) -> str:
    """Changes when `load_manifests(path)` may read something different: a
    hash of the manifest files' names, inodes, sizes and mtimes (ns), no
    content read. A file rewritten in place within one mtime tick at the same
    size goes unnoticed; an atomic rename or a ConfigMap update does not."""
    entries: list[tuple[str, int, int, int]] = []
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        return f"missing:{type(exc).__name__}:{getattr(exc, 'errno', '')}"
    try:
        names = _names(path) if stat.S_ISDIR(st.st_mode) else [""]
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    for name in names:
        try:
            s = os.stat(os.path.join(path, name)) if name else st
        except OSError:
            entries.append((name, -1, -1, -1))
        else:
            entries.append((name, s.st_ino, s.st_size, s.st_mtime_ns))
    return hashlib.sha256(repr(entries).encode()).hexdigest()[:32]


def _names(directory: str) -> list[str]:
    """The entries of `directory` with a manifest's name, sorted. Nothing is
    stat'ed here: an entry that is no regular file, or cannot be read, is
    reported when it is read (`_text`), never a reason to skip the others."""
    with os.scandir(directory) as it:
        return sorted(e.name for e in it if e.name.endswith(SUFFIXES))


def _files(path: str) -> tuple[list[str], list[ManifestError]]:
    try:
        if not os.path.isdir(path):
            return [path], []
        names = _names(path)
    except (OSError, ValueError) as exc:
        return [], [ManifestError("", f"cannot read the directory: {getattr(exc, 'strerror', None) or exc}", source=path)]
    errors = []
    if len(names) > MAX_FILES:
        errors.append(ManifestError("", f"has {len(names)} manifest files; only the first {MAX_FILES} (sorted) are read",
                                    source=path))
    return [os.path.join(path, n) for n in names[:MAX_FILES]], errors


def _read(file: str) -> Iterator[Declared | Other | ManifestError]:
    try:
        text = _text(file)
    except ManifestError as exc:
        yield exc
        return
    count = 0
    for index, doc, located in _documents(text, file):
        source = f"{file}#{index}"
        entries: list[tuple[Any, str]] = []
        if isinstance(doc, Mapping) and doc.get("kind") in LIST_KINDS:
            items = doc.get("items")
            if isinstance(items, list):
                entries = [(item, f"items[{i}]") for i, item in enumerate(items)]
            elif items is not None:
                doc = ManifestError("items", f"must be a list, got {show(items)}", source=source,
                                    line=located.line("items") if located else None)
        elif doc is not None:
            entries = [(doc, "")]
        count += max(1, len(entries))
        if count > MAX_DOCUMENTS:
            yield ManifestError("", f"more than {MAX_DOCUMENTS} documents or List items; the rest of the file is not read",
                                source=source)
            return
        if isinstance(doc, ManifestError):
            yield doc
            continue
        for obj, prefix in entries:
            if isinstance(obj, Mapping) and obj.get("kind") in OTHER_KINDS:
                yield Other(obj, source, prefix)
                continue
            problems: list[ManifestError] = []
            proxy = _proxy(obj, problems)
            if proxy is not None:
                yield Declared(proxy, source, prefix)
            placed = [problem.moved(source, prefix, located=located) for problem in problems]
            yield from sorted(placed, key=lambda p: p.line or 0)  # in the file's order


def _text(file: str) -> str:
    """The file's text: only a regular file, at most MAX_FILE_BYTES, strict
    UTF-8 (`fleet.untrusted`). Never blocks on a FIFO or a device."""
    try:
        return decode(read_bounded(file, MAX_FILE_BYTES))
    except FileProblem as exc:
        raise ManifestError("", str(exc), source=file) from None


def _documents(text: str, file: str) -> Iterator[tuple[int, Any, Located | None]]:
    """(index from 1, the document's data or a ManifestError, where its fields are) for each
    document, bounded by `fleet.untrusted.located_documents`."""
    limits = YamlLimits(max_nodes=MAX_NODES, max_depth=MAX_DEPTH)
    for index, doc in enumerate(located_documents(text, limits), 1):
        if isinstance(doc, YamlProblem):
            rest = "; the rest of the file is not read" if doc.fatal else ""
            yield index, ManifestError(doc.where, doc.why + rest, source=f"{file}#{index}"), None
        else:
            yield index, doc.data, doc
