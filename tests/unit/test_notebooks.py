"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel, at its small (CI) size."""

from __future__ import annotations

from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_are_there() -> None:
    assert [p.name[0] for p in NOTEBOOKS] == ["a", "b", "c"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_error(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARCHSIM_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("ARCHSIM_NOTEBOOK_OUT", str(tmp_path))
    book = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), "saved with outputs"
    client = nbclient.NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    shown = [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in shown), "no figure was shown"
