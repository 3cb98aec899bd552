"""A NoCloud seed ISO (volume label `cidata`), written in pure Python.

cloud-init's NoCloud datasource finds a filesystem labelled `cidata` and
reads `meta-data`, `user-data` and `vendor-data` from its root. This writes
the smallest ISO 9660 image that does that: a primary volume descriptor with
8.3 names (for readers without Joliet) and a Joliet supplementary
descriptor carrying the real names, which Linux's isofs and blkid use. One
root directory, no subdirectories, every file contiguous. It replaces
genisoimage/xorriso on the worker (no extra package, no subprocess, no
scratch files): the image is built in memory and is only as large as the
cloud-init plus a few sectors.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

SECTOR = 2048
LABEL = "cidata"


def _both16(n: int) -> bytes:
    return struct.pack("<H", n) + struct.pack(">H", n)


def _both32(n: int) -> bytes:
    return struct.pack("<I", n) + struct.pack(">I", n)


def _dir_date(t: datetime) -> bytes:
    return bytes([t.year - 1900, t.month, t.day, t.hour, t.minute, t.second, 0])


def _vd_date(t: datetime) -> bytes:
    return t.strftime("%Y%m%d%H%M%S").encode() + b"00" + b"\x00"


def _dir_record(ident: bytes, extent: int, size: int, is_dir: bool, t: datetime) -> bytes:
    length = 33 + len(ident) + (1 - len(ident) % 2)
    rec = (
        bytes([length, 0])
        + _both32(extent)
        + _both32(size)
        + _dir_date(t)
        + bytes([2 if is_dir else 0, 0, 0])
        + _both16(1)
        + bytes([len(ident)])
        + ident
    )
    return rec + b"\x00" * (length - len(rec))


def _path_table(root_extent: int, big_endian: bool) -> bytes:
    fmt = ">IH" if big_endian else "<IH"
    return bytes([1, 0]) + struct.pack(fmt, root_extent, 1) + b"\x00\x00"


def _text(s: str, n: int, joliet: bool) -> bytes:
    if joliet:
        raw = s.encode("utf-16-be")[:n]
        return raw + (b"\x00 " * n)[: n - len(raw)]
    return s.encode("ascii")[:n].ljust(n, b" ")


def _short_name(name: str) -> bytes:
    """An ISO 9660 level-1 name: 8.3, d-characters only, `;1` version."""
    stem = "".join(c for c in name.upper() if c.isalnum())[:8] or "FILE"
    return f"{stem}.;1".encode()


def _volume_descriptor(
    kind: int, joliet: bool, total: int, pt_size: int, l_pt: int, m_pt: int, root: bytes, t: datetime
) -> bytes:
    vd = bytearray(SECTOR)
    vd[0] = kind
    vd[1:6] = b"CD001"
    vd[6] = 1
    vd[8:40] = _text("", 32, joliet)
    vd[40:72] = _text(LABEL, 32, joliet)
    vd[80:88] = _both32(total)
    if joliet:
        vd[88:91] = b"%/E"  # UCS-2 level 3
    vd[120:124] = _both16(1)
    vd[124:128] = _both16(1)
    vd[128:132] = _both16(SECTOR)
    vd[132:140] = _both32(pt_size)
    vd[140:144] = struct.pack("<I", l_pt)
    vd[148:152] = struct.pack(">I", m_pt)
    vd[156:190] = root
    for start, n in ((190, 128), (318, 128), (446, 128), (574, 128), (702, 37), (739, 37), (776, 37)):
        vd[start : start + n] = _text("", n, joliet)[:n]
    vd[813:830] = _vd_date(t)
    vd[830:847] = _vd_date(t)
    vd[847:864] = b"0" * 16 + b"\x00"
    vd[864:881] = b"0" * 16 + b"\x00"
    vd[881] = 1
    return bytes(vd)


def _pad(b: bytes) -> bytes:
    return b + b"\x00" * (-len(b) % SECTOR)


def build(files: dict[str, bytes], now: datetime | None = None) -> bytes:
    """An ISO 9660 + Joliet image with `files` in its root, labelled cidata."""
    t = (now or datetime.now(UTC)).replace(microsecond=0)
    names = sorted(files)
    # fixed layout: 16 system sectors, PVD, SVD, terminator, 4 path tables, 2 root dirs, then data
    l_pt, m_pt, jl_pt, jm_pt, root_p, root_j = 19, 20, 21, 22, 23, 24
    extents: dict[str, int] = {}
    next_free = 25
    for name in names:
        extents[name] = next_free
        next_free += max(1, -(-len(files[name]) // SECTOR))
    total = next_free

    def root_dir(extent: int, joliet: bool) -> bytes:
        out = _dir_record(b"\x00", extent, SECTOR, True, t) + _dir_record(b"\x01", extent, SECTOR, True, t)
        entries = sorted(
            ((name.encode("utf-16-be") if joliet else _short_name(name)), name) for name in names
        )
        for ident, name in entries:
            out += _dir_record(ident, extents[name], len(files[name]), False, t)
        if len(out) > SECTOR:
            raise ValueError("too many files for a one-sector root directory")
        return _pad(out)

    pt_size = len(_path_table(root_p, False))
    root_rec_p = _dir_record(b"\x00", root_p, SECTOR, True, t)
    root_rec_j = _dir_record(b"\x00", root_j, SECTOR, True, t)
    terminator = _pad(b"\xffCD001\x01")
    parts = [
        b"\x00" * (16 * SECTOR),
        _volume_descriptor(1, False, total, pt_size, l_pt, m_pt, root_rec_p, t),
        _volume_descriptor(2, True, total, pt_size, jl_pt, jm_pt, root_rec_j, t),
        terminator,
        _pad(_path_table(root_p, False)),
        _pad(_path_table(root_p, True)),
        _pad(_path_table(root_j, False)),
        _pad(_path_table(root_j, True)),
        root_dir(root_p, False),
        root_dir(root_j, True),
    ]
    for name in names:
        parts.append(_pad(files[name]) if files[name] else b"\x00" * SECTOR)
    image = b"".join(parts)
    assert len(image) == total * SECTOR
    return image


def read_joliet(image: bytes) -> dict[str, bytes]:
    """The root directory of an image's Joliet tree: for tests and triage."""
    for sector in range(16, 32):
        vd = image[sector * SECTOR : (sector + 1) * SECTOR]
        if vd[0] == 2 and vd[1:6] == b"CD001" and vd[88:91] == b"%/E":
            break
        if vd[0] == 255:
            raise ValueError("no Joliet descriptor")
    root = vd[156:190]
    extent, size = struct.unpack("<I", root[2:6])[0], struct.unpack("<I", root[10:14])[0]
    data = image[extent * SECTOR : extent * SECTOR + size]
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos]:
        length = data[pos]
        rec = data[pos : pos + length]
        ident = rec[33 : 33 + rec[32]]
        if not rec[25] & 2:
            fext, fsize = struct.unpack("<I", rec[2:6])[0], struct.unpack("<I", rec[10:14])[0]
            out[ident.decode("utf-16-be")] = image[fext * SECTOR : fext * SECTOR + fsize]
        pos += length
    return out
