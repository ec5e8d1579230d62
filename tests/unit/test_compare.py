"""archsim compare: factors of a speedup that multiply to it, from counterfactual runs and stated rules."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from archsim.cli import main
from archsim.compare import compare
from archsim.spec.library import Library, builtin_roots

CHIPS = next(r for r in builtin_roots() if r.name == "chips")


def test_factors_multiply_to_the_speedup(library: Library) -> None:
    result = compare("v100", "a100-40gb", "resnet50", "train", 32, library=library)
    assert list(result.factors) == [
        "chip_count",
        "scaling",
        "transistor_budget",
        "process_node",
        "memory_bandwidth",
        "software",
        "architecture",
    ]
    assert math.prod(result.factors.values()) == pytest.approx(result.speedup, rel=1e-12)
    assert result.speedup == pytest.approx(result.throughput_b / result.throughput_a)
    assert result.factors["transistor_budget"] == pytest.approx(54.2 / 21.1)
    assert result.factors["process_node"] == pytest.approx(12 / 7)


def test_a_target_against_itself_is_one_in_every_factor(library: Library) -> None:
    result = compare("v100", "v100", "gemm:2048x2048x2048", library=library)
    assert result.speedup == 1.0
    assert all(ratio == pytest.approx(1.0) for ratio in result.factors.values())


def test_the_seed_example_attributes_chip_count_and_notes_what_is_not_published(library: Library) -> None:
    result = compare("dgx1", "tpu-v4-pod:12x16x16", "resnet50", "train", library=library, nodes_a=80)
    assert (result.chips_a, result.chips_b) == (640, 3072)
    assert result.factors["chip_count"] == pytest.approx(3072 / 640)
    assert "transistor_budget" not in result.factors and "per_chip_peak" in result.factors
    assert result.notes and "tpu-v4" in result.notes[0]
    assert math.prod(result.factors.values()) == pytest.approx(result.speedup, rel=1e-12)


def test_a_chip_that_differs_only_in_bandwidth_owes_its_speedup_to_bandwidth(tmp_path: Path) -> None:
    data = yaml.safe_load((CHIPS / "v100-16gb.yaml").read_text())
    data["name"], data["aliases"] = "v100-wide", []
    data["memory"]["main"] = {"technology": "hbm2", "capacity": "16 GiB", "bandwidth": "1800 GB/s"}
    (tmp_path / "v100-wide.yaml").write_text(yaml.safe_dump(data))
    result = compare("v100", "v100-wide", "resnet50", batch=8, library=Library([tmp_path], use_env=False))
    # the same framework costs the faster chip a larger share of its time: software says so, the rest is bandwidth
    factors = result.factors
    assert result.speedup > 1.05 and factors["memory_bandwidth"] > result.speedup and factors["software"] < 1
    assert factors["memory_bandwidth"] * factors["software"] == pytest.approx(result.speedup, rel=1e-9)
    assert factors["architecture"] == pytest.approx(1.0, rel=1e-9)


def test_cli_prints_the_factors_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "v100", "h100", "gemm:1024x1024x1024", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["factors"]) >= {"chip_count", "memory_bandwidth", "software", "architecture"}
    assert math.prod(result["factors"].values()) == pytest.approx(result["speedup"], rel=1e-12)
    assert main(["compare", "v100", "h100", "gemm:1024x1024x1024"]) == 0
    out = capsys.readouterr().out
    assert "process_node" in out and out.splitlines()[-1].lstrip().startswith("speedup")


def test_cli_refuses_an_unknown_target_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "v100", "nope", "resnet50"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("archsim: error: nope: ")
    assert captured.err.count("\n") == 1


def test_report_compare_writes_the_factors_and_a_waterfall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "compare.html"
    assert main(["report", "compare", "v100", "a100-40gb", "gemm:1024x1024x1024", "--out", str(out)]) == 0
    text = out.read_text()
    values = {
        field: json.loads(html.unescape(value))
        for field, value in re.findall(r'<tr data-field="([^"]+)"><th>[^<]*</th><td[^>]*data-value="([^"]*)"', text)
    }
    factors = {k.removeprefix("factors."): v for k, v in values.items() if k.startswith("factors.")}
    assert set(factors) >= {"chip_count", "transistor_budget", "process_node", "architecture"}
    assert math.prod(factors.values()) == pytest.approx(values["speedup"], rel=1e-12)
    assert 'data-figure="waterfall"' in text and '"type":"waterfall"' in text
    assert capsys.readouterr().out.strip() == str(out)


def test_report_compare_with_a_bad_out_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "missing" / "compare.html"
    assert main(["report", "compare", "v100", "h100", "gemm:256x256x256", "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not out.parent.exists()
