"""The smaller defects of issue 20, item 8: each fails in one line, or behaves as documented."""

from __future__ import annotations

import errno
import os
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from archsim.baseline import baseline_path
from archsim.cli import main
from archsim.errors import ArchsimError, LimitError, LookupFailed, SpecError, UsageError
from archsim.limits import MAX_CHAKRA_BYTES, MAX_YAML_NODES
from archsim.spec.library import Library
from archsim.spec.yamlio import read_yaml
from archsim.testing import strategies
from archsim.workloads.chakra import read_chakra
from archsim.workloads.trace import OpKind, Phase

pytest_plugins = ["pytester"]


def test_a_plot_is_byte_identical_run_to_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a.html", "b.html"):
        assert main(["plot", "breakdown", "v100", "gemm:64x64x64", "--out", str(tmp_path / name)]) == 0
    capsys.readouterr()
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


@pytest.mark.parametrize("where", ["--lib", "ARCHSIM_PATH"])
def test_an_unreadable_search_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    real = os.scandir

    def refuse(path: Any = ".") -> Any:  # root ignores permissions, so refuse as a chmod 000 would
        if Path(path) == folder:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", refuse)
    with pytest.raises(LookupFailed, match="cannot read: Permission denied"):
        _ = Library([folder], use_env=False).entries("chip")
    argv = ["list", "chips"]
    if where == "--lib":
        argv += ["--lib", str(folder)]
    else:
        monkeypatch.setenv("ARCHSIM_PATH", str(folder))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"{folder}: search path: cannot read: Permission denied" in err


@pytest.mark.parametrize("version", ["true", "1.0", "'1'"])
def test_schema_version_must_be_the_integer_1(tmp_path: Path, version: str) -> None:
    path = tmp_path / "c.yaml"
    chip = (Path(__file__).resolve().parents[2] / "chips" / "v100-16gb.yaml").read_text(encoding="utf-8")
    path.write_text(chip.replace("schema_version: 1", f"schema_version: {version}", 1), encoding="utf-8")
    with pytest.raises(SpecError, match="unsupported version") as err:
        Library(use_env=False).spec(Library(use_env=False).find(["chip"], str(path)))
    assert err.value.field == "schema_version"


def test_a_baseline_name_message_says_exactly_what_is_allowed() -> None:
    with pytest.raises(UsageError, match="is a letter or digit, then letters") as err:
        baseline_path("..x")
    assert "at most 100 characters" in err.value.problem
    assert baseline_path("x..y").name == "x..y.tsv"


@settings(max_examples=5, deadline=None)
@given(
    softmax=strategies.vector_ops("softmax", "bf16"),
    gemm=strategies.gemm_ops("fp32"),
    conv=strategies.conv_ops("fp16", phases=("bwd_data",)),
    any_op=strategies.ops("fp16", kinds=("matmul", "pool")),
)
def test_strategies_take_strings_as_chips_does(softmax: Any, gemm: Any, conv: Any, any_op: Any) -> None:
    assert softmax.kind is OpKind.SOFTMAX
    assert gemm.reads[0].bytes % 4 == 0
    assert conv.phase is Phase.BACKWARD_DATA
    assert any_op.kind in (OpKind.MATMUL, OpKind.POOL)


def test_the_pytest_plugin_finds_search_path_beside_the_test_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ARCHSIM_PATH", raising=False)
    chips = Path(__file__).resolve().parents[2] / "chips"
    text = chips.joinpath("v100-16gb.yaml").read_text(encoding="utf-8")
    text = text.replace("name: v100-16gb", "name: my-chip").replace("aliases: [v100]", "aliases: []")
    sub = pytester.mkpydir("sub")
    (sub / "my_chips").mkdir()
    (sub / "my_chips" / "my-chip.yaml").write_text(text, encoding="utf-8")
    (sub / "test_mine.py").write_text(
        "def test_mine(archsim_baseline):\n"
        "    archsim_baseline.check(['my-chip:gemm:64x64x64'], search_path=['my_chips'])\n",
        encoding="utf-8",
    )
    from tests.unit.test_pytest_plugin import plugin_args

    pytester.runpytest("--archsim-update", *plugin_args()).assert_outcomes(passed=1)
    assert (sub / "baselines" / "test_mine.test_mine.tsv").exists()


def test_a_description_of_too_many_values_is_refused_before_it_is_built(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("a: [" + ",".join(["1"] * 1_700_000) + "]\n", encoding="utf-8")  # 3.4 MB
    assert path.stat().st_size < 4 * 2**20
    with pytest.raises(SpecError, match=f"more than {MAX_YAML_NODES} values"):
        read_yaml(path)
    assert MAX_YAML_NODES <= 200_000


def test_a_chakra_gzip_bomb_is_refused_while_reading(tmp_path: Path) -> None:
    squeeze = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    zeros = bytes(2**20)
    data = b"".join(squeeze.compress(zeros) for _ in range(MAX_CHAKRA_BYTES // 2**20 + 8)) + squeeze.flush()
    path = tmp_path / "bomb.et"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(LimitError, match=f"decompresses to more than {MAX_CHAKRA_BYTES} bytes"):
            read_chakra(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_CHAKRA_BYTES + 64 * 2**20
    assert issubclass(LimitError, ArchsimError)
