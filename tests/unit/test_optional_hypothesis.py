"""archsim runs without hypothesis: only archsim.testing.strategies needs it, and says so."""

from __future__ import annotations

import subprocess
import sys

BLOCK = """
import importlib.abc, sys

class NoHypothesis(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hypothesis" or name.startswith("hypothesis."):
            raise ImportError("hypothesis is not installed")
        return None

sys.meta_path.insert(0, NoHypothesis())
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=120)


def test_archsim_imports_and_runs_without_hypothesis() -> None:
    result = run(
        "import archsim, archsim.api, archsim.cli, archsim.baseline, archsim.pytest_plugin, archsim.testing\n"
        "from archsim.cli import main\n"
        "assert main(['run', 'v100', 'gemm:256x256x256', '--json']) == 0\n"
        "assert 'hypothesis' not in sys.modules\n"
    )
    assert result.returncode == 0, result.stderr


def test_strategies_say_what_to_install() -> None:
    result = run("import archsim.testing.strategies\n")
    assert result.returncode == 1
    assert "archsim.testing.strategies needs hypothesis: pip install 'archsim[testing]'" in result.stderr
