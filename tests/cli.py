"""Helpers for tests that drive archsim's command line in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from archsim.cli import main
from archsim.spec.library import builtin_roots


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``archsim ARGV``; its exit status, standard output and standard error."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def chip_file(tmp_path: Path, base: str = "v100-16gb", **changes: object) -> str:
    """A copy of chips/``base``.yaml with ``section__field`` paths set (None: removed), in ``tmp_path``."""
    chips = next(r for r in builtin_roots() if r.name == "chips")
    data = yaml.safe_load((chips / f"{base}.yaml").read_text())
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node[part]
        if value is None:
            node.pop(leaf)
        else:
            node[leaf] = value
    path = tmp_path / "chip.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)
