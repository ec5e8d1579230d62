"""The results folder of a sweep: rows stored as they arrive, safe to kill at any moment.

``DIR/rows.jsonl`` is append-only: each completed chunk is written as whole lines (one JSON object
per row, ending in a newline), then flushed and fsynced. A process killed during a write leaves at
most one torn last line; :meth:`RowStore.load` ignores it and cuts it off before anything more is
appended, so that no row is half-written and none is lost. A key seen twice (never written so, but
tolerated) keeps its first row. Floats are written with ``repr`` (exact round trip), so a table
rebuilt from the file is bit-for-bit the table of an uninterrupted run.

``DIR/results.parquet`` is the final table, written atomically (temporary file, then rename) when a
sweep finishes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from archsim.errors import UsageError
from archsim.outfile import cannot_write, write_file

ROWS_FILE = "rows.jsonl"
TABLE_FILE = "results.parquet"


class RowStore:
    """The append-only row file of one results folder."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(str(folder), "--out", f"cannot create the folder: {err.strerror}") from None
        self.path = self.folder / ROWS_FILE

    def load(self) -> dict[str, dict[str, Any]]:
        """Every complete row stored so far, by key; a torn last line is dropped from the file."""
        if not self.path.exists():
            return {}
        try:
            data = self.path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):
                with self.path.open("r+b") as handle:
                    handle.truncate(end)
                    handle.flush()
                    os.fsync(handle.fileno())
        except OSError as err:
            raise UsageError(str(self.path), "--out", f"cannot read and repair: {err.strerror or err}") from None
        rows: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(data[:end].splitlines(), start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise UsageError(str(self.path), f"line {number}", "not a stored row (was the file edited?)") from None
            if not isinstance(row, dict) or not isinstance(row.get("key"), str):
                raise UsageError(str(self.path), f"line {number}", "a stored row has no key")
            rows.setdefault(row["key"], row)
        return rows

    def append(self, rows: list[dict[str, Any]]) -> list[str]:
        """Store rows durably: whole lines, fsynced before returning; returns each row's line.

        A failed write (a full disk, a read-only folder) raises UsageError; at most a torn last line
        is left, which :meth:`load` cuts off, so a rerun resumes from the rows stored before it.
        """
        if not rows:
            return []
        lines = [json.dumps(row, separators=(",", ":"), allow_nan=False) for row in rows]
        text = "".join(line + "\n" for line in lines)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                view = memoryview(text.encode())
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as err:
            failed = cannot_write(self.path, "--out", err)
            kept = f"{failed.problem}; the rows stored before are kept"
            raise UsageError(failed.source, failed.field, kept) from None
        return lines


def write_table_atomically(table: Any, path: Path) -> None:
    """Write a DataFrame as Parquet: to a temporary file beside ``path``, then rename over it.

    A failure raises UsageError and leaves the rows file as it was (a rerun writes the table).
    """
    write_file(path, lambda temporary: table.to_parquet(temporary, index=False))
