"""Running the notebooks of ``notebooks/`` as the tests do: in a Jupyter kernel, at their small size.

Shared by ``tests/unit/test_notebooks.py`` (each runs without error, showing figures, no stderr) and
``tests/unit/test_report_browser.py`` (each exported to HTML draws its figures in Chromium).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def execute(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The notebook at ``path`` run top to bottom with ``ARCHSIM_NOTEBOOK_SMALL=1`` (results kept in ``out``)."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("ARCHSIM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("ARCHSIM_NOTEBOOK_OUT", str(out))
    book = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), "saved with outputs"
    client = nbclient.NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    return book


def export_html(book: Any, path: Path) -> Path:
    """An executed notebook as ``jupyter nbconvert --to html`` writes it, saved at ``path``."""
    nbconvert = pytest.importorskip("nbconvert")
    body, _ = nbconvert.HTMLExporter().from_notebook_node(book)
    path.write_text(body, encoding="utf-8")
    return path


def outputs(book: Any) -> list[Any]:
    """Every output of every code cell."""
    return [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
