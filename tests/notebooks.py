"""Running the notebooks of ``notebooks/`` as the tests do: in a Jupyter kernel, at their small size.

Shared by ``tests/unit/test_notebooks.py`` (each runs without error, showing figures, no stderr) and
``tests/unit/test_report_browser.py`` (each exported to HTML draws its figures in Chromium).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def execute(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The notebook at ``path`` run top to bottom with ``ARCHSIM_NOTEBOOK_SMALL=1`` (results kept in ``out``).

    Under pytest-xdist both test files that run a notebook may ask for it in the same session: the
    first run is kept, for that session only (:func:`_session_copy`), and the second reads it.
    """
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    copy = _session_copy(path)
    if copy is not None and copy.exists():
        return nbformat.read(copy, as_version=4)
    monkeypatch.setenv("ARCHSIM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("ARCHSIM_NOTEBOOK_OUT", str(out))
    book = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), "saved with outputs"
    client = nbclient.NotebookClient(
        book,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # the kernel is stopped once every cell has run and its outputs are in: a graceful shutdown
        # (the kernel's exit, polled) only waited some 0.4 s more per notebook
        shutdown_kernel="immediate",
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    if copy is not None:
        _keep(copy, nbformat.writes(book))
    return book


SESSION_FOLDER_ENV = "ARCHSIM_TEST_SESSION_DIR"
"""Set by ``tests/conftest.py`` in each pytest-xdist worker: the session's temporary folder, the parent
of every worker's own, which pytest removes with the sessions it no longer keeps (the last 3 stay)."""


def shared_folder(name: str) -> Path | None:
    """The folder ``name`` that the workers of this pytest-xdist session share (None outside xdist)."""
    root = os.environ.get(SESSION_FOLDER_ENV)
    if root is None:
        return None
    folder = Path(root) / name
    folder.mkdir(exist_ok=True)
    return folder


def _session_copy(path: Path) -> Path | None:
    """Where this pytest-xdist session keeps the executed ``path`` (None outside xdist: no sharing).

    The folder is the session's own (:func:`shared_folder`) and the file is named by the notebook's
    bytes, so a copy is never read by another session or for an edited notebook.
    """
    folder = shared_folder("notebooks")
    if folder is None:
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return folder / f"{path.stem}-{digest}.ipynb"


def _keep(copy: Path, text: str) -> None:
    """Write ``copy`` whole or not at all: a reader in another worker never sees half of it."""
    partial = copy.with_suffix(f".{os.getpid()}.part")
    partial.write_text(text, encoding="utf-8")
    partial.replace(copy)


def export_html(book: Any, path: Path) -> Path:
    """An executed notebook as ``jupyter nbconvert --to html`` writes it, saved at ``path``.

    Both test files export the same executed notebook: under pytest-xdist the first export is kept
    for the session, beside the executed copies and named by the notebook's bytes, and the second
    reads it (an export takes about a second).
    """
    nbconvert = pytest.importorskip("nbconvert")
    nbformat = pytest.importorskip("nbformat")
    folder = shared_folder("notebooks")
    copy = None
    if folder is not None:
        copy = folder / f"export-{hashlib.sha256(nbformat.writes(book).encode()).hexdigest()[:16]}.html"
        if copy.exists():
            path.write_text(copy.read_text(encoding="utf-8"), encoding="utf-8")
            return path
    body, _ = nbconvert.HTMLExporter().from_notebook_node(book)
    path.write_text(body, encoding="utf-8")
    if copy is not None:
        _keep(copy, body)
    return path


def outputs(book: Any) -> list[Any]:
    """Every output of every code cell."""
    return [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
