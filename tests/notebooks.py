"""Running the notebooks of ``notebooks/`` as the tests do: in a Jupyter kernel, at their small size.

Shared by ``tests/unit/test_notebooks.py`` (each runs without error, showing figures, no stderr) and
``tests/unit/test_report_browser.py`` (each exported to HTML draws its figures in Chromium).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
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
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    if copy is not None:
        partial = copy.with_suffix(f".{os.getpid()}.part")
        nbformat.write(book, partial)
        partial.replace(copy)  # whole or absent: a reader never sees half a notebook
    return book


def _session_copy(path: Path) -> Path | None:
    """Where this pytest-xdist session keeps the executed ``path`` (None outside xdist: no sharing).

    The folder is named by xdist's run id (new every session) and the notebook's own bytes, so a copy
    is never read by another session or for an edited notebook.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"archsim-notebooks-{run}"
    folder.mkdir(exist_ok=True)
    return folder / f"{path.stem}-{digest}.ipynb"


def export_html(book: Any, path: Path) -> Path:
    """An executed notebook as ``jupyter nbconvert --to html`` writes it, saved at ``path``."""
    nbconvert = pytest.importorskip("nbconvert")
    body, _ = nbconvert.HTMLExporter().from_notebook_node(book)
    path.write_text(body, encoding="utf-8")
    return path


def outputs(book: Any) -> list[Any]:
    """Every output of every code cell."""
    return [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
