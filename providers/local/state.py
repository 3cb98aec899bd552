"""The state directory: one JSON record per instance, its squid directory,
and the locks that make create and delete safe across threads and processes.

Layout (docs/local-provider.md)::

    <stateDir>/
      <name>.json        the record: written whole (temp file + rename), removed last
      <name>/            squid.conf, squid.pid, cache.log, access.log, squid.out
      .locks/<xx>        flock stripes: one per name hash prefix; .locks/ports (ports and egress addresses)

Records are the truth: `get` and `list_by_tag` read them from disk every
time, never from memory, so any worker (or a restarted one) sees the same
instances. Lock files are never removed (removing one while a caller waits
on it would let two callers in); striping by hash keeps their number bounded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from providers import base, filelock, marks, names
from providers.base import Deadline
from providers.local.errors import BadRequest, Busy, CorruptRecord, DeadlineError, RecordMissing

FORMAT = 1
ID_PREFIX = "local/"
# A DNS-1123 label: what name_from_uid makes, safe as a file name and in squid.conf.
FIELD_TYPES: dict[str, type] = {
    "name": str, "uid": str, "port": int, "bindAddress": str, "service": str, "createdAt": str,
    "namespace": str, "proxyName": str, "pid": int, "startTicks": int, "deleting": bool, "labels": dict, "egressAddress": str,
}


def check_name(name: str) -> str:
    if not isinstance(name, str) or not names.is_label(name):
        raise BadRequest(f"name {name!r} is not a DNS-1123 label (lowercase letters, digits, '-'; at most 63)")
    return name


def provider_id(name: str) -> str:
    return ID_PREFIX + name


def parse_id(pid: str) -> str:
    """`local/<name>` → name; BadRequest for anything else."""
    if not isinstance(pid, str) or not pid.startswith(ID_PREFIX):
        raise BadRequest(f"malformed id {pid!r}, want local/<name>")
    name = pid[len(ID_PREFIX):]
    if not names.is_label(name):
        raise BadRequest(f"malformed id {pid!r}, want local/<name> with a DNS-1123 name")
    return name


@dataclass(frozen=True)
class Record:
    name: str
    uid: str
    port: int
    bindAddress: str
    service: str  # squid's -n service name: its shared-memory segment prefix
    createdAt: str  # RFC 3339, UTC
    namespace: str = ""
    proxyName: str = ""
    pid: int = 0  # 0: not started yet (or the starter died before recording it)
    startTicks: int = 0  # /proc/<pid>/stat starttime: a reused pid never matches
    deleting: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    egressAddress: str = ""  # squid's tcp_outgoing_address from egressRange; "" none (the host's default)

    @property
    def managed(self) -> bool:
        return self.labels.get(base.LABEL_MANAGED) == base.LABEL_MANAGED_YES

    @property
    def installation(self) -> str:
        """The installation mark; "" on a record without one (or a mangled one)."""
        value = self.labels.get(base.LABEL_INSTALLATION, "")
        return value if isinstance(value, str) else ""

    @property
    def namespace_mark(self) -> str:
        """The Proxy's namespace mark; "" on a record without one (or a mangled one)."""
        value = self.labels.get(base.LABEL_NAMESPACE, "")
        return value if isinstance(value, str) else ""

    def created(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.createdAt)
        except (TypeError, ValueError):
            return None

    def with_(self, **changes: Any) -> Record:
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Record:
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            data.pop("format", None)
            rec = cls(**data)
            for key, typ in FIELD_TYPES.items():
                value = getattr(rec, key)
                if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
                    raise TypeError(f"{key} is not a {typ.__name__}")
        except (ValueError, TypeError) as exc:
            raise CorruptRecord(f"unreadable record: {exc}") from exc
        return rec


def new_record(request: base.CreateRequest, bind: str, service: str, egress: str = "") -> Record:
    return Record(
        name=request.name,
        uid=request.uid,
        port=request.port,
        bindAddress=bind,
        service=service,
        createdAt=datetime.now(UTC).isoformat(timespec="seconds"),
        namespace=request.namespace,
        proxyName=request.proxy_name,
        labels=marks.of(request),  # the GC marks
        egressAddress=egress,
    )


class Store:
    def __init__(self, root: str) -> None:
        self.root = root

    def record_path(self, name: str) -> str:
        return os.path.join(self.root, name + ".json")

    def instance_dir(self, name: str) -> str:
        return os.path.join(self.root, name)

    def ensure(self) -> None:
        """The directory and its lock dir. 0755: squid's user must reach its
        instance directory; records hold nothing secret."""
        os.makedirs(self.root, mode=0o755, exist_ok=True)
        os.makedirs(os.path.join(self.root, ".locks"), mode=0o700, exist_ok=True)

    # -- records -------------------------------------------------------------------

    def read(self, name: str) -> Record:
        try:
            with open(self.record_path(name), encoding="utf-8") as f:
                text = f.read(1 << 20)
        except FileNotFoundError as exc:
            raise RecordMissing(f"no record {self.record_path(name)}") from exc
        except UnicodeDecodeError as exc:
            raise CorruptRecord(f"unreadable record: {exc}") from exc
        rec = Record.from_json(text)
        if rec.name != name:
            raise CorruptRecord(f"record {self.record_path(name)} names {rec.name!r}")
        return rec

    def write(self, rec: Record) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{rec.name}.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(rec.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.record_path(rec.name))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.record_path(name))

    def names(self) -> list[str]:
        """Names with a record, sorted. A missing directory holds none; an
        unreadable one raises OSError."""
        try:
            entries = os.listdir(self.root)
        except FileNotFoundError:
            return []
        out = []
        for entry in entries:
            stem, dot, ext = entry.rpartition(".")
            if dot and ext == "json" and names.is_label(stem):
                out.append(stem)
        return sorted(out)

    # -- locks ---------------------------------------------------------------------------

    def name_lock(self, name: str, deadline: Deadline) -> contextlib.AbstractContextManager[None]:
        stripe = hashlib.sha256(name.encode()).hexdigest()[:2]
        return self._lock(os.path.join(self.root, ".locks", stripe), deadline, f"instance {name}")

    def ports_lock(self, deadline: Deadline) -> contextlib.AbstractContextManager[None]:
        """Held while a create picks its port and egress address from the other records."""
        return self._lock(os.path.join(self.root, ".locks", "ports"), deadline, "the port and address table")

    def name_locked(self, name: str) -> bool:
        """Whether a create or delete of `name` holds its lock right now."""
        try:
            with self.name_lock(name, Deadline(0)):
                return False
        except (Busy, DeadlineError):
            return True

    def _lock(self, path: str, deadline: Deadline, what: str) -> contextlib.AbstractContextManager[None]:
        return filelock.held(path, deadline, lambda: Busy(f"another create or delete holds {what}; try again"))
