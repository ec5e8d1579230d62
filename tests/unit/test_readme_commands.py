"""Every command and code example in README.md runs, so that a first hour with the README has no surprises.

The README's fenced code blocks are parsed (and those of every Markdown file ``docs/figures.yaml``
lists, read as one text with it), so a command added to them is tested without touching this file:

* a concrete ``archsim ...`` line runs (in-process, in a temporary working directory) and must exit 0
  with no traceback; :data:`SMALL` makes the few slow ones small, each with its reason; a ``$ archsim``
  line whose next line shows ``archsim: error: ...`` is a documented refusal: it must exit 2 printing
  exactly that line; the lines shown under any other ``$ archsim`` line must be what it prints, in
  order (``...`` for lines left out; the figures stated in prose are docs/figures.yaml's);
* a synopsis line (with placeholders: ``TARGET``, ``[--batch N]``, ``a|b``, ``...``) names
  subcommands and options: each subcommand's ``--help`` must exist and list every option shown;
* a ``python`` block runs in a fresh interpreter (its zero-argument ``test_*`` functions are called);
* anything else (``pip install``, ``pytest``, the scripts) must be in :data:`NOT_RUN` with its reason,
  and every entry there must still match a README line, so the list stays short and true.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from archsim.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"
DOCUMENTS = [
    README.parent / name for name in yaml.safe_load((README.parent / "docs" / "figures.yaml").read_text())["documents"]
]
"""The Markdown files checked: README.md and each file docs/figures.yaml lists (the one list of them)."""
SHELL = ("", "sh", "bash", "console", "shell")
COMMAND = re.compile(r"^(archsim|pip|pytest|python|jupyter)\b")
PLACEHOLDER = re.compile(r"[\[\]|]|\.\.\.|\b[A-Z][A-Z_-]*\b")
"""What makes a line a synopsis: brackets, alternatives, an ellipsis or an upper-case name (``TARGET``, ``N``)."""

SMALL: list[tuple[str, str, str]] = [
    # (pattern, replacement, why): applied to README text before it runs; each must match something
    (
        r'run_sweep\("systolic-shape-sweep", out=',
        'run_sweep(load_sweep("systolic-shape-sweep").reduced(2), out=',
        "the full sweep is 1,000 runs (scripts/bench.py --sweep times it); 2 values per axis show the same API",
    ),
    (
        r"@settings\(deadline=None\)",
        "@settings(deadline=None, max_examples=5)",
        "the property-test example: five examples show it runs",
    ),
]
NOT_RUN: dict[str, str] = {
    # README lines that are not archsim commands, by prefix, and why this test does not run them
    "pip install": "installs packages; CI's install step (pip install -e '.[test]') is this command",
    "pytest": "the test suite itself",
    "python scripts/bench.py": "a benchmark: minutes of timings, never part of the tests",
}
CANNOT_RUN: dict[str, str] = {
    # archsim command lines the test cannot run yet, by prefix, and why (keep this empty where possible)
}


def _text() -> str:
    """The documents' text, README.md first."""
    return "\n\n".join(path.read_text(encoding="utf-8") for path in dict.fromkeys([README, *DOCUMENTS]))


def _readme() -> str:
    text = _text()
    for pattern, replacement, _ in SMALL:
        text = re.sub(pattern, replacement, text)
    return text


def blocks(text: str, languages: tuple[str, ...]) -> list[str]:
    """The bodies of the fenced code blocks whose language is one of ``languages``."""
    found: list[str] = []
    language: str | None = None  # None: outside a block
    body: list[str] = []
    for line in (raw.strip() if raw.lstrip().startswith("```") else raw for raw in text.splitlines()):
        if line.startswith("```"):
            if language is None:
                language, body = line[3:].strip(), []
            else:
                if language in languages:
                    found.append("\n".join(body) + "\n")
                language = None
        elif language is not None:
            body.append(line)
    return found


def shell_lines(text: str) -> list[str]:
    """The command lines of the README's shell blocks: ``&&`` split, comments cut, continuations joined."""
    return [command for command, _ in _shell_commands(text)]


def _shell_commands(text: str) -> list[tuple[str, str | None]]:
    """Each command line with the ``archsim: error: ...`` line shown right after it, if any."""
    lines: list[tuple[str, str | None]] = []
    for block in blocks(text, SHELL):
        command = False  # whether the line before was a command, which an indented line continues
        for raw in block.splitlines():
            line = re.sub(r"\s+#.*", "", re.sub(r"^\$ ", "", raw)).rstrip()  # a "$ " prompt shows a command
            if command and raw.startswith(" ") and line.strip():
                lines[-1] = (lines[-1][0] + " " + line.strip(), None)
            elif command and raw.startswith("archsim: error: "):  # the refusal the command above shows
                lines[-1] = (lines[-1][0], raw)
                command = False
            elif COMMAND.match(line) and not raw.startswith("archsim:"):
                lines.extend((part.strip(), None) for part in line.split("&&"))
                command = True
            else:
                command = False  # output or prose
    return lines


def shown_outputs(text: str) -> dict[str, list[str]]:
    """What the README shows a ``$ archsim`` line printing: the lines after it, up to the next ``$ `` line.

    A ``...`` line stands for lines left out; a refusal (``archsim: error: ...``) is in :data:`REFUSALS`.
    """
    shown: dict[str, list[str]] = {}
    for block in blocks(text, SHELL):
        command: str | None = None
        for raw in block.splitlines():
            if raw.startswith("$ "):
                command = raw[2:].strip()
                shown.setdefault(command, [])
            elif command is not None and raw.strip() and not raw.startswith("archsim: error: "):
                shown[command].append(raw)
    return {command: lines for command, lines in shown.items() if lines}


COMMANDS = shell_lines(_readme())
REFUSALS = {command: error for command, error in _shell_commands(_readme()) if error is not None}
"""Commands the README shows refused, with the one line each prints."""
SHOWN = shown_outputs(_readme())
"""Commands the README shows with their output, and the lines it shows."""
ARCHSIM = [c for c in COMMANDS if c.startswith("archsim") and not c.startswith(tuple(CANNOT_RUN))]
CONCRETE = sorted({c for c in ARCHSIM if not PLACEHOLDER.search(c)})
SYNOPSES = sorted({c for c in ARCHSIM if PLACEHOLDER.search(c)})
PYTHON = blocks(_readme(), ("python",))


def test_the_readme_shows_commands() -> None:
    assert len(CONCRETE) >= 5
    assert len(SYNOPSES) >= 10
    assert len(PYTHON) >= 3


def test_every_other_line_is_listed_with_its_reason() -> None:
    others = [c for c in COMMANDS if not c.startswith("archsim")]
    assert [c for c in others if not c.startswith(tuple(NOT_RUN))] == []
    # no stale entries: each still matches a line of the README, each substitution still applies
    for prefix in [*NOT_RUN, *CANNOT_RUN]:
        assert any(c.startswith(prefix) for c in COMMANDS), f"{prefix!r} is no longer in the README"
    text = _text()
    for pattern, _, _ in SMALL:
        assert re.search(pattern, text), f"{pattern!r} is no longer in the README"


@pytest.mark.parametrize("command", CONCRETE)
def test_command_runs(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # a command writing a file writes it here
    try:
        code = main(shlex.split(command)[1:])
    except SystemExit as stop:  # --version and --help exit through argparse
        code = stop.code if isinstance(stop.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if command in REFUSALS:
        assert (code, err.strip()) == (2, REFUSALS[command])
        return
    assert code == 0, err
    assert out.strip() or any(tmp_path.iterdir()), "the command printed and wrote nothing"
    printed = iter(" ".join(line.split()) for line in out.splitlines())
    for line in SHOWN.get(command, []):  # in order, whitespace aside; "..." stands for lines left out
        if line.strip() != "...":
            assert " ".join(line.split()) in printed, f"the README shows {line.strip()!r}, which it no longer prints"


def _subcommands(synopsis: str) -> list[list[str]]:
    """The subcommand paths a synopsis names (``plot breakdown|roofline TARGET`` names two)."""
    paths: list[list[str]] = [[]]
    for word in shlex.split(synopsis)[1:]:
        if not re.fullmatch(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*", word):
            break
        paths = [[*path, choice] for path in paths for choice in word.split("|")]
    return paths


@pytest.mark.parametrize("synopsis", SYNOPSES)
def test_synopsis_matches_the_cli(synopsis: str, capsys: pytest.CaptureFixture[str]) -> None:
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", synopsis))
    for path in _subcommands(synopsis):
        with pytest.raises(SystemExit) as stop:
            main([*path, "--help"])
        assert stop.value.code == 0, path
        shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", capsys.readouterr().out))
        assert options <= shown, f"archsim {' '.join(path)} has no {sorted(options - shown)}"


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-block-{i}" for i in range(len(PYTHON))])
def test_python_example_runs(code: str, tmp_path: Path) -> None:
    calls = (
        "\nimport inspect as _inspect\n"
        "for _name, _function in list(globals().items()):\n"
        "    if _name.startswith('test_') and not _inspect.signature(_function).parameters:\n"
        "        _function()\n"
    )
    path = [str(README.parent), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]  # this checkout first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    done = subprocess.run(
        [sys.executable, "-c", code + calls], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
