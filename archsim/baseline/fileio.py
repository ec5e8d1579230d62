r"""Baseline files: tab-separated text, one line per run and one per layer, meant to be diffed in review.

Layout (``schema_version 1``)::

    # archsim baseline ... (comment lines start with '#')
    schema_version  1
    archsim_version 0.1.0
    set             default            # default: the default set; explicit: runs given by name
    #run    RUN  target  workload  mode  batch  precision  seq_len  num_chips  step_time_s  ...
    #layer  RUN  index  name  kind  phase  unit  bound  time_s  cycles  flops  bytes
    run     v100-16gb:resnet50:mode=infer,batch=2  v100-16gb  resnet50  infer  2  fp16  \N  1  0.0016...
    layer   v100-16gb:resnet50:mode=infer,batch=2  0  conv1  conv2d  fwd  matrix  compute  1.2e-05 ...
    error   v999:resnet50:mode=infer,batch=2  v999: unknown chip; known: ...

Fields are separated by one tab. Each run line is followed by its layer lines, in trace order; runs
keep the order they were given (the default set: chips, then systems, each by name), so saving
the same results twice writes the same bytes. Every layer line repeats its run, so that each line
of a diff says which run it belongs to. Floats are written with ``repr`` (shortest text that reads
back to the same float), ``\N`` is "none", and a tab, newline, carriage return or backslash inside
a field is written ``\t``, ``\n``, ``\r``, ``\\``. Files are written atomically (a temporary
file in the same folder, then a rename) and read with every line checked: a malformed file is a
:class:`~archsim.errors.SpecError` naming the file, the line and the problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from archsim import __version__
from archsim.baseline.runs import LAYER_COLUMNS, RUN_COLUMNS, RunRecord, Value
from archsim.errors import SpecError
from archsim.limits import read_text_file
from archsim.outfile import cannot_write, write_file

SCHEMA_VERSION = 1
NONE = "\\N"
_ESCAPE = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPE = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
HEADER = (
    "# archsim baseline: the results of a set of runs, one line per run and one per layer, tab-separated.\n"
    "# Check: archsim baseline check NAME [--rtol X]   Accept new results: archsim baseline save NAME\n"
)


@dataclass(frozen=True)
class Baseline:
    """The recorded results of a set of runs."""

    runs: tuple[RunRecord, ...]
    default_set: bool = False
    """True when the runs are the default set (a check then also reports targets added since)."""
    archsim_version: str = __version__


def _escape(text: str) -> str:
    if not any(c in text for c in _ESCAPE):
        return text
    return "".join(_ESCAPE.get(c, c) for c in text)


def _unescape(text: str, source: str, line: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        if following not in _UNESCAPE:
            raise SpecError(source, f"line {line}", f"unknown escape '\\{following}'")
        out.append(_UNESCAPE[following])
    return "".join(out)


def _cell(value: Value) -> str:
    if value is None:
        return NONE
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a baseline holds finite numbers only, got {value!r}")
        return repr(value)
    if isinstance(value, int):
        return str(value)
    return _escape(value)


def dump_baseline(baseline: Baseline) -> str:
    """The text of a baseline file (deterministic: the same baseline gives the same bytes)."""
    lines = [
        HEADER.rstrip("\n"),
        f"schema_version\t{SCHEMA_VERSION}",
        f"archsim_version\t{_escape(baseline.archsim_version)}",
        f"set\t{'default' if baseline.default_set else 'explicit'}",
        "\t".join(["#run", "RUN", *(name for name, _ in RUN_COLUMNS)]),
        "\t".join(["#layer", "RUN", *(name for name, _ in LAYER_COLUMNS)]),
        "#error\tRUN\tmessage",
    ]
    for record in baseline.runs:
        run = _escape(record.run)
        if record.error is not None:
            lines.append(f"error\t{run}\t{_escape(record.error)}")
            continue
        lines.append("\t".join(["run", run, *map(_cell, record.values)]))
        lines += ["\t".join(["layer", run, *map(_cell, layer)]) for layer in record.layers]
    return "\n".join(lines) + "\n"


def write_baseline(baseline: Baseline, path: Path) -> None:
    """Write ``baseline`` to ``path`` atomically (creating its folder); failures are UsageErrors."""
    text = dump_baseline(baseline)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise cannot_write(path, "", err) from None
    write_file(path, text, "")


def _value(text: str, kind: type, column: str, source: str, line: int) -> Value:
    where = f"line {line}"
    if text == NONE:
        if column != "seq_len":
            raise SpecError(source, where, f"{column}: missing value")
        return None
    if kind is str:
        return _unescape(text, source, line)
    if kind is int:
        digits = text[1:] if text.startswith("-") else text
        if not (digits.isascii() and digits.isdigit()) or len(text) > 30:
            raise SpecError(source, where, f"{column}: expected an integer, got {text[:40]!r}")
        return int(text)
    try:
        number = float(text)
    except ValueError:
        raise SpecError(source, where, f"{column}: expected a number, got {text[:40]!r}") from None
    if not math.isfinite(number):
        raise SpecError(source, where, f"{column}: expected a finite number, got {text[:40]!r}")
    return number


def _row(fields: list[str], columns: tuple[tuple[str, type], ...], source: str, line: int) -> tuple[Value, ...]:
    if len(fields) != len(columns):
        raise SpecError(
            source, f"line {line}", f"expected {len(columns) + 2} tab-separated fields, got {len(fields) + 2}"
        )
    return tuple(_value(text, kind, name, source, line) for text, (name, kind) in zip(fields, columns, strict=True))


def _read_text(path: Path) -> str:
    return read_text_file(path, str(path), "no such baseline (save one with: archsim baseline save NAME)")


def read_baseline(path: Path) -> Baseline:
    """Read and check a baseline file; every problem is a SpecError naming the file and line."""
    source = str(path)
    header: dict[str, str] = {}
    runs: list[RunRecord] = []
    seen: set[str] = set()
    current: tuple[str, tuple[Value, ...], list[tuple[Value, ...]]] | None = None
    number = 0

    def close(line: int) -> None:
        if current is None:
            return
        run, values, layers = current
        expected = values[-1]
        if expected != len(layers):
            raise SpecError(source, f"line {line}", f"run {run} declares {expected} layers, the file has {len(layers)}")
        runs.append(RunRecord(run, values, tuple(layers)))

    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line or line.startswith("#"):
            continue
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if kind in ("schema_version", "archsim_version", "set"):
            if runs or current is not None or kind in header or len(fields) != 1:
                raise SpecError(source, f"line {number}", f"{kind}: must appear once, before the runs, with one value")
            header[kind] = _unescape(fields[0], source, number)
            if kind == "schema_version" and header[kind] != str(SCHEMA_VERSION):
                raise SpecError(
                    source, "schema_version", f"unsupported version {fields[0][:20]!r}, this archsim reads 1"
                )
            if kind == "set" and header[kind] not in ("default", "explicit"):
                raise SpecError(source, f"line {number}", f"set: expected default or explicit, got {fields[0][:40]!r}")
            continue
        if "schema_version" not in header:
            raise SpecError(source, f"line {number}", "expected 'schema_version<TAB>1' before any run")
        if kind not in ("run", "layer", "error") or len(fields) < 2:
            raise SpecError(source, f"line {number}", f"expected a run, layer or error line, got {line[:40]!r}")
        run = _unescape(fields[0], source, number)
        if kind == "layer":
            if current is None or current[0] != run:
                raise SpecError(source, f"line {number}", f"layer of {run[:80]!r} does not follow its run line")
            row = _row(fields[1:], LAYER_COLUMNS, source, number)
            if row[0] != len(current[2]):
                raise SpecError(source, f"line {number}", f"index: expected {len(current[2])}, got {row[0]}")
            current[2].append(row)
            continue
        close(number)
        current = None
        if run in seen:
            raise SpecError(source, f"line {number}", f"run {run[:80]!r} appears twice")
        seen.add(run)
        if kind == "error":
            if len(fields) != 2:
                raise SpecError(source, f"line {number}", "an error line is: error<TAB>RUN<TAB>message")
            runs.append(RunRecord(run, error=_unescape(fields[1], source, number)))
        else:
            values = _row(fields[1:], RUN_COLUMNS, source, number)
            if not isinstance(values[-1], int) or values[-1] < 0:
                raise SpecError(source, f"line {number}", "layers: expected a non-negative count")
            current = (run, values, [])
    close(number)
    if "schema_version" not in header:
        raise SpecError(source, "schema_version", "missing: not an archsim baseline file")
    return Baseline(tuple(runs), header.get("set") == "default", header.get("archsim_version", ""))
