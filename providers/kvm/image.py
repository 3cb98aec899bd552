"""Getting bytes into a volume: the base image download and the seed upload.

The download is streamed from the URL straight into a libvirt stream
upload in fixed-size chunks, hashing as it goes; it is never held whole in
memory and never touches local disk. A sha256 mismatch aborts the upload
and deletes the volume. `Uploader` is the seam the tests replace: libvirt's
test driver (the lab's daemon) has no virStorageVolUpload.
"""

from __future__ import annotations

import hashlib
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from providers.base import Deadline

CHUNK = 1 << 20

# (conn, volume, chunks, length) → None; raises on failure
Uploader = Callable[[Any, Any, Iterable[bytes], int], None]


class ImageError(Exception):
    """The image could not be fetched or did not match its sha256."""


def stream_upload(conn: Any, vol: Any, chunks: Iterable[bytes], length: int) -> None:
    """virStorageVolUpload over a blocking libvirt stream."""
    stream = conn.newStream(0)
    vol.upload(stream, 0, length, 0)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                sent = stream.send(bytes(view))
                if sent < 0:
                    raise ImageError("libvirt stream refused data")
                view = view[sent:]
    except BaseException:
        try:
            stream.abort()
        finally:
            raise
    stream.finish()


def open_image(url: str, deadline: Deadline) -> tuple[Any, int]:
    """The HTTP response and its length; the length is needed up front to size the volume."""
    try:
        resp = urllib.request.urlopen(url, timeout=max(deadline.remaining(), 0.001))
    except OSError as exc:
        raise ImageError(f"download {url}: {exc}") from exc
    length = resp.headers.get("Content-Length")
    if not length or not length.isdigit():
        resp.close()
        raise ImageError(f"download {url}: the server sent no Content-Length")
    return resp, int(length)


def checked_chunks(resp: Any, url: str, length: int, sha256: str, deadline: Deadline) -> Iterator[bytes]:
    """The body in chunks; raises ImageError on a short body, a passed
    deadline, or (before the last chunk is handed on) a sha256 mismatch."""
    digest = hashlib.sha256()
    got = 0
    pending: bytes | None = None
    while True:
        if deadline.expired:
            raise ImageError(f"download {url}: deadline passed after {got} of {length} bytes")
        chunk = resp.read(CHUNK)
        if not chunk:
            break
        got += len(chunk)
        digest.update(chunk)
        if pending is not None:
            yield pending
        pending = chunk
    if got != length:
        raise ImageError(f"download {url}: got {got} of {length} bytes")
    if sha256 and digest.hexdigest() != sha256:
        raise ImageError(f"download {url}: sha256 {digest.hexdigest()} does not match the configured {sha256}")
    if pending is not None:
        yield pending
