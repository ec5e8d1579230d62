"""The pytest plugin: ``archsim_baseline`` records with ``--archsim-update``, then fails with the diff."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from archsim import pytest_plugin
from archsim.baseline.compare import DEFAULT_MAX_LAYERS, DEFAULT_RTOL
from archsim.spec.library import builtin_roots

pytest_plugins = ["pytester"]

TEST_FILE = """
def test_v100(archsim_baseline):
    archsim_baseline.check(["v100:resnet50:batch=2", "tpu-v3:gemm:1024x1024x1024"])


def test_named(archsim_baseline):
    archsim_baseline.check(["a100:gemm:512x512x512"], name="small gemm")
"""


def plugin_args() -> list[str]:
    """Load the plugin explicitly only where its entry point is not installed."""
    installed = any(p.value == "archsim.pytest_plugin" for p in entry_points(group="pytest11"))
    return [] if installed else ["-p", "archsim.pytest_plugin"]


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("ARCHSIM_PATH", raising=False)
    pytester.makepyfile(test_models=TEST_FILE)
    return pytester


def test_missing_baseline_fails_and_says_how_to_record(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*plugin_args())
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*no archsim baseline at *test_models.test_v100.tsv; run pytest with --archsim-update*"]
    )


def test_update_records_then_unchanged_passes(suite: pytest.Pytester) -> None:
    suite.runpytest("--archsim-update", *plugin_args()).assert_outcomes(passed=2)
    folder = suite.path / "baselines"
    assert sorted(p.name for p in folder.iterdir()) == [
        "test_models.test_named.small_gemm.tsv",
        "test_models.test_v100.tsv",
    ]
    suite.runpytest(*plugin_args()).assert_outcomes(passed=2)


def test_changed_cost_model_fails_with_the_diff(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    suite.runpytest("--archsim-update", *plugin_args()).assert_outcomes(passed=2)
    families = next(r for r in builtin_roots() if r.name == "chips") / "families"
    data = yaml.safe_load((families / "tensorcore.yaml").read_text())
    data["efficiency"]["memory_bandwidth"] = round(data["efficiency"]["memory_bandwidth"] / 2, 6)
    lib = suite.mkdir("lib")
    Path(lib, "tensorcore.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("ARCHSIM_PATH", str(lib))
    result = suite.runpytest(*plugin_args())
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*changed  v100:resnet50:mode=infer,batch=2*",
            "*layers changed: *",
            "*test_models.test_v100.tsv: 1 of 2 runs differ beyond rtol 1e-09*",
            "*rerun pytest with --archsim-update*",
        ]
    )
    assert "tpu-v3:gemm" not in result.stdout.str()
    # accepting the change makes the suite pass again
    suite.runpytest("--archsim-update", *plugin_args()).assert_outcomes(passed=2)
    suite.runpytest(*plugin_args()).assert_outcomes(passed=2)


def test_changed_run_set_fails(suite: pytest.Pytester) -> None:
    suite.runpytest("--archsim-update", *plugin_args()).assert_outcomes(passed=2)
    suite.makepyfile(test_models=TEST_FILE.replace("batch=2", "batch=4"))
    result = suite.runpytest(*plugin_args())
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        ["*added    v100:resnet50:mode=infer,batch=4*", "*removed  v100:resnet50:mode=infer,batch=2*"]
    )


def test_flag_is_in_help(suite: pytest.Pytester) -> None:
    suite.runpytest("--help", *plugin_args()).stdout.fnmatch_lines(["*--archsim-update*"])


def test_plugin_defaults_match_the_cli() -> None:
    assert pytest_plugin.DEFAULT_RTOL == DEFAULT_RTOL
    assert pytest_plugin.DEFAULT_MAX_LAYERS == DEFAULT_MAX_LAYERS
