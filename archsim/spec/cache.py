"""Caches of the description library between runs: the index of its files, and their validated specs.

A run needs a handful of the library's files (its chip, the chip's family, memory and software),
but finding them by name needs every file's ``kind``, ``name`` and ``aliases``. :func:`read_headers`
returns those for a list of files, reading a file only when the cache holds no record of it at its
current modification time and size. :func:`load_spec` and :func:`store_spec` keep each file's
validated spec (a pickled frozen pydantic model), so that a run neither parses the YAML of the files
it uses nor builds their validators; the cross-file checks (a chip's memory technology exists, a
system's links) are the library's and run every time.

The caches live in :func:`cache_dir`: ``$ARCHSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/archsim``, else
``~/.cache/archsim`` (created with mode 0700: it holds pickles). Deleting the folder clears them. A
record is used only while its file's path, modification time (ns) and size are unchanged, and only by
the same archsim version and the same code under ``archsim/spec/`` and ``archsim/models/`` (the
built-in families' sections; a plug-in family's chips are not cached), with ``units.py``, ``limits.py``
and ``errors.py``, whose modification times and sizes are part of the key); a file added or removed
is found by walking the folders on every run. A file modified less than :data:`SETTLE_NS` before it
was read is not recorded (a second change within the clock's granularity could leave both its time
and size as they were: git's "racily clean" files). A cache that cannot be read is ignored; one that
cannot be written is not written. Writes are atomic (:mod:`archsim.outfile`), so concurrent runs see
either the old file or the new.

A file whose YAML or header is bad is recorded with its problem, so the library reports it on every
run, as it does with no cache.

Within one process the headers read are also kept in memory (:data:`_READ`, by cache folder and by
file, under the same rules), so that a library on another search path (a ``--lib`` folder, a
test's temporary folder) parses none of the built-in files again: the cache file is per search path.

:func:`load_entry_points` and :func:`store_entry_points` keep the plug-in entry points of the
installed distributions (:func:`archsim.spec.registry.installed_entry_points`), keyed by the folders on
``sys.path`` and the distributions' metadata folders in them, which change when a distribution is
installed or removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from archsim.errors import ArchsimError, SpecError

CACHE_ENV = "ARCHSIM_CACHE_DIR"
"""Environment variable naming the cache folder (default ``$XDG_CACHE_HOME/archsim``)."""

SETTLE_NS = 2_000_000_000
"""A file modified less than this long (ns) before it is read is not recorded in the cache."""

_FORMAT = 1
"""Version of the cache file's layout."""


class Header(NamedTuple):
    """What the index knows of one description file: ``kind``, ``name``, ``aliases``, one-line description."""

    kind: str
    name: str
    aliases: tuple[str, ...]
    description: str


class Problem(NamedTuple):
    """A file whose header cannot be read: the field and problem of its one-line error."""

    field: str
    problem: str


def header_of(data: dict[str, Any], source: str) -> Header:
    """The header of a description's parsed YAML; a missing ``kind`` or ``name`` or bad ``aliases`` is a SpecError."""
    for key in ("kind", "name"):
        if not isinstance(data.get(key), str):
            raise SpecError(source, key, "missing or not a string")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise SpecError(source, "aliases", "must be a list of names")
    description = data.get("description", "")
    first = description.strip().splitlines()[0] if isinstance(description, str) and description.strip() else ""
    return Header(data["kind"], data["name"], tuple(aliases), first)


def cache_dir() -> Path | None:
    """The cache folder: ``$ARCHSIM_CACHE_DIR``, ``$XDG_CACHE_HOME/archsim`` or ``~/.cache/archsim``.

    None when no home folder is known (nothing is cached then).
    """
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG rule: a relative value is ignored
        return Path(xdg) / "archsim"
    try:
        return Path.home() / ".cache" / "archsim"
    except RuntimeError:
        return None


def _code_stamp() -> list[Any]:
    """What a record depends on besides its file: archsim's version and the code that reads and validates."""
    from archsim import __version__

    spec = Path(__file__).resolve().parent
    # a chip's family section is a class of its family's module (archsim/models/<family>.py)
    families = sorted((spec.parent / "models").glob("*.py"))
    code = (
        sorted(spec.glob("*.py")) + families + [spec.parent / name for name in ("units.py", "limits.py", "errors.py")]
    )
    stamp: list[Any] = [_FORMAT, __version__]
    for path in code:
        info = path.stat()
        stamp += [path.name, info.st_mtime_ns, info.st_size]
    return stamp


_STAMP: list[Any] = []
""":func:`_code_stamp`, computed once per process."""


def _stamp() -> list[Any]:
    if not _STAMP:
        _STAMP.extend(_code_stamp())
    return _STAMP


def _signature(path: Path) -> list[int] | None:
    """A file's modification time (ns) and size, or None when it cannot be read (its reader says why)."""
    try:
        info = path.stat()
    except (OSError, ValueError):
        return None
    return [info.st_mtime_ns, info.st_size]


def _settled(signature: list[int] | None) -> bool:
    """True when a file with this signature may be recorded: it was last modified :data:`SETTLE_NS` ago."""
    return signature is not None and signature[0] < time.time_ns() - SETTLE_NS


def _cache_file(folder: Path, roots: list[Path]) -> Path:
    """The cache file of one search path (its folders, in order)."""
    key = "\0".join(os.path.abspath(root) for root in roots)
    return folder / f"library-{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:20]}.json"


def _load(path: Path, stamp: list[Any]) -> dict[str, list[Any]]:
    """The records of a cache file written with ``stamp``; empty when absent, unreadable or stale."""
    try:
        with open(path, encoding="utf-8") as file:
            cached = json.load(file)
    except (OSError, ValueError):
        return {}
    if not isinstance(cached, dict) or cached.get("stamp") != stamp or not isinstance(cached.get("files"), dict):
        return {}
    files: dict[str, list[Any]] = cached["files"]
    return files


def _record(header: Header | Problem) -> list[Any]:
    if isinstance(header, Problem):
        return ["problem", header.field, header.problem]
    return ["header", header.kind, header.name, list(header.aliases), header.description]


def _from_record(record: list[Any]) -> Header | Problem | None:
    """A record read back; None for one not of this layout (the file is then read)."""
    try:
        if record[0] == "problem":
            return Problem(str(record[1]), str(record[2]))
        if record[0] == "header":
            return Header(str(record[1]), str(record[2]), tuple(str(a) for a in record[3]), str(record[4]))
    except (IndexError, TypeError):
        pass
    return None


def _read_header(path: Path) -> Header | Problem:
    """Parse one file for its header (:func:`~archsim.spec.yamlio.read_yaml`, then :func:`header_of`)."""
    from archsim.spec.yamlio import read_yaml

    try:
        return header_of(read_yaml(path), str(path))
    except SpecError as err:
        return Problem(err.field, err.problem)


_READ: dict[Path | None, dict[str, tuple[list[int], Header | Problem]]] = {}
"""The headers this process has read or found recorded, by cache folder, then by file with its signature.

Kept by the rules of the cache file (only a settled file's), and looked up only where the search
path's cache file has no record of a file at its current signature. Per folder: a process that points
``ARCHSIM_CACHE_DIR`` at another folder starts from that folder's records, as a new process would.
"""


def read_headers(roots: list[Path], files: list[Path]) -> list[Header | Problem]:
    """The header of each of ``files`` (found under the search path ``roots``), read through the cache."""
    folder = cache_dir()
    stamp = _stamp()
    target = _cache_file(folder, roots) if folder is not None else None
    cached = _load(target, stamp) if target is not None else {}
    read = _READ.setdefault(folder, {})
    kept: dict[str, list[Any]] = {}
    headers: list[Header | Problem] = []
    for path in files:
        key = str(path)
        signature = _signature(path)
        record = cached.get(key)
        known = read.get(key)
        header = _from_record(record[2]) if isinstance(record, list) and len(record) == 3 else None
        if header is None or signature is None or record is None or record[:2] != signature:
            header = known[1] if known is not None and known[0] == signature else _read_header(path)
        headers.append(header)
        if signature is not None and _settled(signature):
            kept[key] = [*signature, _record(header)]
            if known is None or known[0] != signature:
                read[key] = (signature, header)
    if target is not None and kept != cached:
        _save(target, json.dumps({"stamp": stamp, "files": kept}, separators=(",", ":")))
    return headers


def _spec_file(path: Path) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    name = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return folder / "specs" / f"{name}.pickle"


def load_spec(path: Path, kind: str) -> Any | None:
    """The validated spec of the ``kind`` description at ``path`` from the cache, or None when not cached."""
    target = _spec_file(path)
    signature = _signature(path)
    if target is None or signature is None:
        return None
    try:
        with open(target, "rb") as file:
            record = pickle.load(file)  # noqa: S301 - written by store_spec into the user's own 0700 folder
    except Exception:  # a missing, partial or stale pickle (a class since renamed) is a miss
        return None
    if not isinstance(record, tuple) or len(record) != 5:
        return None
    stamp, where, cached_signature, cached_kind, spec = record
    if stamp != _stamp() or where != os.path.abspath(path) or cached_signature != signature or cached_kind != kind:
        return None
    return spec


def store_spec(path: Path, kind: str, spec: Any) -> None:
    """Record the validated ``spec`` of the ``kind`` description at ``path`` (when the file has settled)."""
    section = getattr(spec, "section", None)
    if section is not None and not type(section).__module__.startswith("archsim."):
        return  # a plug-in family's chip: its section class is code the stamp does not cover
    target = _spec_file(path)
    signature = _signature(path)
    if target is None or not _settled(signature):
        return
    record = (_stamp(), os.path.abspath(path), signature, kind, spec)
    _save(target, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))


def _path_signature() -> list[list[Any]]:
    """Each folder (or archive) on ``sys.path`` with what says which distributions it holds.

    A folder gives its ``*.dist-info`` and ``*.egg-info`` entries, each with its modification time in ns
    (installing, upgrading or removing a distribution adds, replaces or removes one; other files
    coming and going, say a run's output in a checkout on the path, change nothing); an archive gives
    its own modification time; a missing entry None.
    """
    signature: list[list[Any]] = []
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as listing:
                infos = sorted(
                    [item.name, item.stat().st_mtime_ns]
                    for item in listing
                    if item.name.endswith((".dist-info", ".egg-info"))
                )
            signature.append([str(entry), infos])
        except NotADirectoryError:  # a zip archive of modules
            signature.append([str(entry), os.stat(entry).st_mtime_ns])
        except (OSError, ValueError, TypeError):  # missing, unreadable, or not a file name at all
            signature.append([str(entry), None])
    return signature


def _signature_times(signature: list[list[Any]]) -> list[int]:
    """The modification times a path signature holds."""
    times: list[int] = []
    for _, stamp in signature:
        if isinstance(stamp, int):
            times.append(stamp)
        elif stamp is not None:
            times.extend(mtime_ns for _, mtime_ns in stamp)
    return times


def _entry_points_file(signature: list[list[Any]]) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = json.dumps([entry for entry, _ in signature]).encode("utf-8", "surrogateescape")
    return folder / f"entry-points-{hashlib.sha256(key).hexdigest()[:20]}.json"


def load_entry_points() -> list[tuple[str, str, str]] | None:
    """The ``(group, name, value)`` of archsim's entry points recorded for the current ``sys.path``.

    None when nothing is recorded for it, or when a folder on it changed since (its modification time).
    """
    signature = _path_signature()
    target = _entry_points_file(signature)
    if target is None:
        return None
    try:
        with open(target, encoding="utf-8") as file:
            cached = json.load(file)
        if cached["format"] != _FORMAT or cached["path"] != signature:
            return None
        return [(str(group), str(name), str(value)) for group, name, value in cached["points"]]
    except (OSError, ValueError, TypeError, KeyError):  # absent, unreadable or not of this layout: a miss
        return None


def store_entry_points(points: list[tuple[str, str, str]]) -> None:
    """Record the entry points found on the current ``sys.path`` (when none of its folders changed lately)."""
    signature = _path_signature()
    target = _entry_points_file(signature)
    if target is None or not all(_settled([mtime_ns]) for mtime_ns in _signature_times(signature)):
        return
    _save(target, json.dumps({"format": _FORMAT, "path": signature, "points": [list(p) for p in points]}))


def _save(target: Path, content: str | bytes) -> None:
    """Write a cache file atomically; a folder that cannot be created or written is left without one."""
    from archsim.outfile import write_file

    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_file(target, content, field=CACHE_ENV, durable=False)  # a lost or empty cache file is a miss
    except (OSError, ArchsimError):
        return
