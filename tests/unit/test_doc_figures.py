"""The figures the documentation states are what their commands print today (issue 35, item 25).

``docs/figures.yaml`` is the one list: for each Markdown file it names (the README now, the docs
pages later), each figure the file states in prose or in a table, with the command that prints it.
An entry's ``says`` is a phrase of the file with its figures in braces (``the step from {19.61} s``),
``run`` the ``archsim`` command (or a list of them), and the figures are read from what it prints:
``prints``, a regular expression (or one per figure) whose first group is the figure in the
command's standard output, or ``value``, a Python expression (or one per figure) over the fields of
its JSON output (over ``runs``, the outputs in order, when ``run`` is a list). A figure as written is
the printed value rounded to the figure's digits (``1,540.1``: one decimal; ``98,000``: two
significant digits). So:

* every phrase must be in its file, whitespace aside: a sentence rewritten takes its entry with it;
* every figure is checked against its command, run in-process in a temporary folder, each command
  once;
* a command that takes more than about half a second carries ``slow: REASON``: the default suite
  skips it with that reason, and CI checks it (``.ci/run`` sets ``ARCHSIM_SLOW_FIGURES=1``, which a
  test here holds), so every figure listed is checked by something.

Output shown under a ``$ archsim`` line is checked line by line where the command runs, in
tests/unit/test_readme_commands.py. Timings are not listed here: they are benchmark medians, dated
with the machine they ran on (``scripts/bench.py``), never test assertions.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from archsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures.yaml"
SLOW = "ARCHSIM_SLOW_FIGURES"
FIGURE = re.compile(r"\{([^{}]*)\}")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
KEYS = {"says", "run", "prints", "value", "slow"}


@dataclass(frozen=True)
class Entry:
    """One phrase of a document and the command(s) whose output gives its figures."""

    document: str
    index: int
    says: str
    runs: tuple[str, ...]
    readers: tuple[str, ...]
    """One regular expression (``prints``) or expression (``value``) per figure, in order."""
    json: bool
    slow: str | None

    @property
    def figures(self) -> list[str]:
        """The figures as the document writes them."""
        return FIGURE.findall(self.says)

    @property
    def phrase(self) -> str:
        """The phrase as the document has it, whitespace runs made one space."""
        return " ".join(FIGURE.sub(r"\1", self.says).split())


def _entries() -> list[Entry]:
    data = yaml.safe_load(FIGURES.read_text(encoding="utf-8"))
    assert set(data) == {"schema_version", "documents"} and data["schema_version"] == 1
    found = []
    for document, listed in data["documents"].items():
        for index, raw in enumerate(listed):
            assert set(raw) <= KEYS and {"says", "run"} <= set(raw), f"{document}[{index}]: keys {sorted(raw)}"
            assert ("prints" in raw) != ("value" in raw), f"{document}[{index}]: give prints or value"
            readers = raw.get("prints", raw.get("value"))
            runs = raw["run"] if isinstance(raw["run"], list) else [raw["run"]]
            entry = Entry(
                document,
                index,
                raw["says"],
                tuple(runs),
                tuple(readers if isinstance(readers, list) else [readers]),
                "value" in raw,
                raw.get("slow"),
            )
            assert len(entry.figures) == len(entry.readers) >= 1, f"{document}[{index}]: one reader per figure"
            assert all(NUMBER.fullmatch(f) for f in entry.figures), f"{document}[{index}]: {entry.figures}"
            assert entry.slow is None or (isinstance(entry.slow, str) and entry.slow.strip())
            found.append(entry)
    return found


ENTRIES = _entries()


def _label(entry: Entry) -> str:
    return f"{entry.document}:{entry.index}:{','.join(entry.figures)}"


@functools.cache
def _output(command: str) -> str:
    """What ``command`` prints on standard output, run once, in-process, in a temporary folder."""
    words = shlex.split(command)
    assert words[0] == "archsim", command
    out, err = io.StringIO(), io.StringIO()
    with (
        tempfile.TemporaryDirectory() as folder,
        contextlib.chdir(folder),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(words[1:])
    assert code == 0, f"{command}: exit {code}: {err.getvalue()[-500:]}"
    return out.getvalue()


def _read(entry: Entry) -> list[float]:
    """The figures' values as the command(s) print them, unrounded."""
    outputs = [_output(command) for command in entry.runs]
    if entry.json:
        runs = [json.loads(text) for text in outputs]
        names = {"__builtins__": {}, "runs": runs, "len": len, "sum": sum, "max": max, "min": min, "abs": abs}
        names.update(runs[0] if len(runs) == 1 else {})  # one run: its fields by name
        return [float(eval(expression, names)) for expression in entry.readers]  # noqa: S307 (this file's own expressions)
    text = "\n".join(outputs)
    values = []
    for pattern in entry.readers:
        match = re.search(pattern, text)
        assert match is not None, f"{pattern!r} is not in what {entry.runs} prints:\n{text[:2000]}"
        values.append(float(match.group(1).replace(",", "")))
    return values


def rounded_as(figure: str, value: float) -> str:
    """``value`` written with the precision of ``figure``.

    A figure with decimals keeps them; a whole one is exact, but for the zeros ending one written in
    thousands (``98,000``: two significant digits, as "about 98,000" means).
    """
    written = figure.replace(",", "").lstrip("+")
    if "." in written:
        return f"{value:.{len(written.split('.')[1])}f}"
    zeros = len(written) - len(written.rstrip("0")) if "," in figure and written.strip("-0") else 0
    return str(int(round(value, -zeros)))


def _as_written(figure: str) -> str:
    return rounded_as(figure, float(figure.replace(",", "")))


def test_the_list_names_documents_that_exist() -> None:
    assert ENTRIES
    assert all((ROOT / entry.document).is_file() for entry in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=_label)
def test_issue35_25_every_phrase_is_in_its_document(entry: Entry) -> None:
    text = " ".join((ROOT / entry.document).read_text(encoding="utf-8").split())
    assert entry.phrase in text, f"{entry.document} no longer says {entry.phrase!r}: move or drop its entry"


@pytest.mark.parametrize("entry", ENTRIES, ids=_label)
def test_issue35_25_the_figure_is_what_its_command_prints(entry: Entry) -> None:
    if entry.slow and os.environ.get(SLOW) != "1":
        pytest.skip(f"slow: {entry.slow} ({SLOW}=1 checks it; CI does)")
    printed = [rounded_as(figure, value) for figure, value in zip(entry.figures, _read(entry), strict=True)]
    written = [_as_written(figure) for figure in entry.figures]
    moved = [
        f"{figure} is now {now}" for figure, was, now in zip(entry.figures, written, printed, strict=True) if was != now
    ]
    assert not moved, f"{entry.document}: {'; '.join(moved)} ({entry.phrase[:80]!r}...; {entry.runs[0]})"


def test_ci_checks_the_slow_figures() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"^export {SLOW}=1$", ci, re.MULTILINE), f".ci/run must export {SLOW}=1"


@pytest.mark.parametrize(
    ("figure", "value", "written"),
    [
        ("19.61", 19.61431865929354, "19.61"),
        ("1,540.1", 1540.08, "1540.1"),
        ("98,000", 97573, "98000"),
        ("62", 62.2, "62"),
        ("100", 93.0, "93"),
        ("0.919", 0.9191071925454576, "0.919"),
        ("-5.5", -5.46, "-5.5"),
    ],
)
def test_a_figure_is_compared_at_its_own_precision(figure: str, value: float, written: str) -> None:
    assert rounded_as(figure, value) == written
    assert not math.isnan(float(written))
