"""Fuzzing the command line: any argument list exits 0, 1 or 2, and a refusal is one line on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archsim.cli import main

ODD = ["", "-", "--", "0", "-1", "1.5", "1e3", "nan", "x" * 300, "9" * 5000, "\u00b2", "a\tb", "/dev/null", "/", "."]
TARGETS = ["v100", "tpu-v3", "ipu-pod16", "dgx1", "nope", "chips/none.yaml", *ODD]
WORKLOADS = ["gemm:64x64x64", "gemm:2x32x32x32", "conv:1,4,8,8,4,3,3", "gemm:0x1x1", "gemm:1e3x2x2", "resnet99", *ODD]
OPTIONS: dict[str, list[str]] = {
    "--mode": ["train", "infer", "fly", *ODD],
    "--batch": ["1", "2", "99999999999", *ODD],
    "--precision": ["fp16", "bf16", "fp8", *ODD],
    "--seq-len": ["8", "4294967296", *ODD],
    "--nodes": ["1", "2", "99999", *ODD],
    "--pipeline-stages": ["1", "2", "3", *ODD],
    "--microbatches": ["1", "4", *ODD],
    "--schedule": ["1f1b", "gpipe", *ODD],
    "--collective": ["auto", "ring", "torus", *ODD],
    "--bucket-size": ["25MiB", "1 B", "1e30 B", "25", *ODD],
    "--lib": ["/nonexistent", "/dev/null", *ODD],
    "--timeline": ["t.json", "/nonexistent/t.json", *ODD],
    "--rtol": ["1e-6", "-1", "2", *ODD],
    "--max-layers": ["0", "3", *ODD],
}
FLAGS = ["--json", "--no-overlap", "--help-me", "-x"]


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(["run", "run", "baseline", "list", "scalesim", "export", "nothing", ""]))
    argv = [command] if command else []
    if command == "run":
        argv += [draw(st.sampled_from(TARGETS)), draw(st.sampled_from(WORKLOADS))]
    elif command == "baseline":
        action = draw(st.sampled_from(["save", "check", "frob"]))
        argv += [action, draw(st.sampled_from(["b", "b.tsv", "bad name", *ODD]))]
        if action == "save":
            # at least one run: the default set (every chip and system) is tested in test_baseline_cli
            runs = [f"{t}:{w}" for t in TARGETS[:4] for w in WORKLOADS[:3]]
            argv += draw(st.lists(st.sampled_from(runs), min_size=1, max_size=2))
    elif command in ("scalesim", "export"):
        argv += draw(st.lists(st.sampled_from(["scalesim", "gemm:8x8x8", "--out", "o.csv", *ODD]), max_size=4))
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            option = draw(st.sampled_from(sorted(OPTIONS)))
            argv += [option, draw(st.sampled_from(OPTIONS[option]))]
        else:
            argv.append(draw(st.sampled_from(FLAGS)))
    return argv


def test_any_argument_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARCHSIM_PATH", raising=False)
    ran = 0

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(argv=argvs())
    def one(argv: list[str]) -> None:
        nonlocal ran
        ran += 1
        code = main(argv)
        out, err = capsys.readouterr()
        assert code in (0, 1, 2), (argv, code)
        if code == 2:
            assert out == ""
            assert err.startswith("archsim: error: ") and err.count("\n") == 1, (argv, err)
        else:
            assert "Traceback" not in err

    one()
    assert ran >= 300
