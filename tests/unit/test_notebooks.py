"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel, at its small (CI) size."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebooks import NOTEBOOKS, execute, export_html, outputs


def test_the_three_notebooks_are_there() -> None:
    assert [p.name[0] for p in NOTEBOOKS] == ["a", "b", "c"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_error(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = execute(path, tmp_path, monkeypatch)
    shown = outputs(book)
    figures = [o for o in shown if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert figures, "no figure was shown"
    # every figure also has an HTML form (plots.init_notebook), which is what an HTML export keeps
    assert all("text/html" in o["data"] for o in figures)
    # the sweep's progress bar is a widget in a notebook (tqdm.auto), not red blocks on stderr
    assert [o for o in shown if o.get("name") == "stderr"] == []
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in shown)
    page = export_html(book, tmp_path / f"{path.stem}.html").read_text()
    assert page.count("Plotly.newPlot(") == len(figures)
