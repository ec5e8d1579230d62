"""SCALE-Sim compatibility: its file formats, the CLI forms, the exporter, hand-checked layer numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from archsim.errors import SpecError
from archsim.models.systolic_layer import StallModel, matrix_layer, simulate_layer
from archsim.models.systolic_map import ArrayConfig, MatrixLayer, dram_words, fold_grid, split_stream
from archsim.spec.chip import Dataflow
from archsim.spec.scalesim import TopologyLayer, read_config, read_topology, write_topology
from tests.cli import run_cli

GOLDEN = Path(__file__).parent.parent / "golden" / "scalesim"
CONV_TOPOLOGY = """Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,

L1, 10, 10, 3, 3, 4, 40, 1,
L2, 9, 9, 3, 3, 3, 70, 2,
L3, 56, 56, 1, 1, 64, 64, 1,
"""
# SCALE-Sim 3.0 on CONV_TOPOLOGY with a 32x32 array, 64 kB SRAMs, CALC: Total Cycles, and its
# SRAM ifmap reads, filter reads and ofmap writes (DETAILED_ACCESS_REPORT.csv)
SCALESIM_32X32 = {
    "os": ([391, 266, 24695], (4608, 2880, 2816), (400, 1440)),
    "ws": ([631, 329, 12919], (4608, 1440, 5120), (400, 1440)),
    "is": ([535, 163, 30967], (2304, 2880, 5120), (400, 1440)),
}


def config_text(dataflow: str = "os", mode: str = "CALC", extra: str = "") -> str:
    return f"""[general]
run_name = test
[architecture_presets]
ArrayHeight: 32
ArrayWidth: 32
IfmapSramSzkB: 64
FilterSramSzkB: 64
OfmapSramSzkB: 64
Bandwidth : 10
Dataflow : {dataflow}
{extra}
[run_presets]
InterfaceBandwidth: {mode}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    topology = tmp_path / "topo.csv"
    topology.write_text(CONV_TOPOLOGY)
    return tmp_path, topology


def write_config(directory: Path, dataflow: str = "os", mode: str = "CALC", extra: str = "") -> Path:
    path = directory / f"cfg_{dataflow}.cfg"
    path.write_text(config_text(dataflow, mode, extra))
    return path


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_layers_match_scalesim(files: tuple[Path, Path], dataflow: str) -> None:
    directory, topology = files
    config = read_config(write_config(directory, dataflow))
    layers, gemm = read_topology(topology)
    assert not gemm
    array = ArrayConfig(32, 32, config.dataflow, 65536, 65536, 65536)
    stats = [simulate_layer(layer.name, matrix_layer(layer), array) for layer in layers]
    cycles, sram, dram = SCALESIM_32X32[dataflow]
    assert [s.cycles for s in stats] == cycles
    first = stats[0]
    assert (first.sram_ifmap_reads, first.sram_filter_reads, first.sram_ofmap_writes) == sram
    assert (first.dram_ifmap_reads, first.dram_filter_reads) == dram
    assert all(s.exact and s.stall_cycles == 0 for s in stats)


def test_output_size_follows_scalesim() -> None:
    layer = TopologyLayer("c", 224, 224, 7, 7, 3, 64, 2)
    assert layer.ofmap_h == 110  # ceil((224 - 7 + 2) / 2), not floor((224 - 7) / 2) + 1 = 109
    assert (layer.m, layer.n, layer.k) == (110 * 110, 64, 147)
    assert TopologyLayer.gemm("g", 10, 20, 30).k == 30


def test_config_fields_and_user_bandwidth(tmp_path: Path) -> None:
    extra = "[layout]\nIfmapSRAMBankBandwidth: 8\nFilterSRAMBankBandwidth: 4"
    config = read_config(write_config(tmp_path, "ws", "USER", extra))
    assert (config.array_rows, config.array_cols, config.dataflow) == (32, 32, Dataflow.WEIGHT_STATIONARY)
    assert config.ifmap_sram_words == 64 * 1024
    assert config.user_bandwidth == (8.0, 4.0, 10.0)
    assert read_config(GOLDEN / "archsim_32x32_is.cfg").ofmap_sram_bytes == 64 * 1024


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[general]\nrun_name = x\n", "architecture_presets.Dataflow"),
        (config_text("xs"), "architecture_presets.Dataflow"),
        (config_text(mode="FAST"), "run_presets.InterfaceBandwidth"),
        (config_text().replace("ArrayWidth: 32", "ArrayWidth: 0"), "architecture_presets.ArrayWidth"),
        (config_text(extra="[sparsity]\nSparsitySupport: true"), "sparsity.SparsitySupport"),
        ("not an ini file", ""),
    ],
)
def test_bad_configs_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.cfg"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        read_config(path)
    assert err.value.field == field


def test_gemm_topology_and_depthwise_layers(tmp_path: Path) -> None:
    gemm = tmp_path / "mnk.csv"
    gemm.write_text("Layer,M,N,K,\nQKT,1024,1024,64,\nlast, 5, 6, 7\n")
    layers, is_gemm = read_topology(gemm)
    assert is_gemm
    assert [(la.m, la.n, la.k) for la in layers] == [(1024, 1024, 64), (5, 6, 7)]
    depthwise = tmp_path / "dw.csv"
    depthwise.write_text(CONV_TOPOLOGY.splitlines()[0] + "\nDP1, 8, 8, 3, 3, 3, 1, 1,\n")
    layers, _ = read_topology(depthwise)
    assert [la.name for la in layers] == ["DP1Channel_0", "DP1Channel_1", "DP1Channel_2"]
    assert all(la.channels == 1 for la in layers)


@pytest.mark.parametrize(
    ("body", "where"),
    [("L, 1, 2, 3,", "line 2"), ("L, 4, 4, 5, 5, 1, 1, 1,", "line 2"), ("L, 4, 4, x, 1, 1, 1, 1,", "line 2: Filter")],
)
def test_bad_topologies_name_the_line(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(CONV_TOPOLOGY.splitlines()[0] + "\n" + body + "\n")
    with pytest.raises(SpecError) as err:
        read_topology(path)
    assert err.value.field.startswith(where)


def test_topology_round_trip(tmp_path: Path, files: tuple[Path, Path]) -> None:
    layers, _ = read_topology(files[1])
    path = tmp_path / "again.csv"
    write_topology(layers, path)
    assert read_topology(path) == (layers, False)
    gemm = [TopologyLayer.gemm("a", 3, 4, 5)]
    write_topology(gemm, path, gemm=True)
    assert read_topology(path) == (gemm, True)


def test_stationary_split_and_partial_sums() -> None:
    layer = MatrixLayer.gemm(3136, 64, 576)
    array = ArrayConfig(32, 32, Dataflow.WEIGHT_STATIONARY, 65536, 65536, 65536)
    whole = dram_words(layer, array)
    # 3136 x 32 partial sums exceed the 32 Ki-word working half: every fold spills and reads back
    assert whole.ofmap_writes == 18 * 3136 * 64
    assert whole.ofmap_reads == 17 * 3136 * 64
    piece = split_stream(layer, Dataflow.WEIGHT_STATIONARY, 4)
    assert (piece.m, piece.n, piece.k) == (784, 64, 576)
    assert dram_words(piece, array).ofmap_reads == 0
    assert split_stream(layer, Dataflow.OUTPUT_STATIONARY, 4) is layer
    assert fold_grid(piece, 32, 32, Dataflow.WEIGHT_STATIONARY).fold_cycles == 784 + 2 * 32 + 32 - 2


def test_archsim_model_counts_cycles_and_stalls_on_user_bandwidth() -> None:
    layer = MatrixLayer.gemm(256, 256, 256)
    array = ArrayConfig(32, 32, Dataflow.OUTPUT_STATIONARY, 8192, 8192, 8192)
    calc = simulate_layer("g", layer, array, None, StallModel.ARCHSIM)
    assert calc.cycles == 64 * (256 + 62) and not calc.exact
    slow = simulate_layer("g", layer, array, (1.0, 1.0, 1.0), StallModel.ARCHSIM)
    assert slow.stall_cycles > 0
    assert slow.cycles == calc.cycles + slow.stall_cycles


def test_run_with_scalesim_files_prints_json(capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]) -> None:
    directory, topology = files
    config = write_config(directory, "is")
    code, out, err = run_cli(capsys, "run", str(config), str(topology), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert [layer["cycles"] for layer in result["layers"]] == SCALESIM_32X32["is"][0]
    assert result["exact"] and result["model"] == "scalesim"
    for key in ("stall_cycles", "mapping_efficiency", "compute_utilization", "sram", "dram"):
        assert key in result["layers"][0]
    code, out, _ = run_cli(capsys, "scalesim", str(config), str(topology), "--model", "archsim")
    assert code == 0
    assert "model archsim" in out


def test_run_with_scalesim_files_rejects_workload_options(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    directory, topology = files
    code, out, err = run_cli(capsys, "run", str(write_config(directory)), str(topology), "--batch", "2")
    assert code == 2 and not out
    assert err.startswith("archsim: error:") and err.count("\n") == 1


def test_export_resnet50_matches_the_committed_topology(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_path = tmp_path / "r50.csv"
    code, out, _ = run_cli(capsys, "export", "scalesim", "resnet50", "--out", str(out_path))
    assert code == 0
    assert "54 layers" in out
    assert out_path.read_text() == (GOLDEN / "resnet50.csv").read_text()
    layers, gemm = read_topology(out_path)
    assert not gemm and layers[0].m == 112 * 112  # padding folded into the effective input size
    assert sum(la.m * la.n * la.k for la in layers) == 4_089_184_256


def test_export_uses_gemm_format_for_batches_and_training(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_path = tmp_path / "bert.csv"
    code, _, _ = run_cli(capsys, "export", "scalesim", "gemm:2x8x16x32", "--out", str(out_path))
    assert code == 0
    layers, gemm = read_topology(out_path)
    assert gemm and [(la.name, la.m, la.n, la.k) for la in layers] == [("gemm#0", 8, 16, 32), ("gemm#1", 8, 16, 32)]
    code, _, err = run_cli(
        capsys, "export", "scalesim", "resnet50", "--mode", "train", "--format", "conv", "--out", str(out_path)
    )
    assert code == 2 and "--format" in err


def test_gpu_and_calc_paths_never_import_numba(tmp_path: Path) -> None:
    """numba costs ~1 s to import and start: only USER-bandwidth SCALE-Sim runs load it."""
    code = (
        "import sys, contextlib, io\n"
        "from archsim.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['run', 'v100', 'resnet50', '--json']) == 0\n"
        "    assert main(['run', 'tpu-v3', 'resnet50', '--json']) == 0\n"
        f"    assert main(['run', {str(GOLDEN / 'archsim_32x32_os.cfg')!r}, {str(GOLDEN / 'resnet50.csv')!r}]) == 0\n"
        "print('numba' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_user_bandwidth_runs_are_flagged_not_exact(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    directory, topology = files
    config = write_config(directory, "os", "USER")
    code, out, _ = run_cli(capsys, "scalesim", str(config), str(topology), "--json")
    assert code == 0
    result = json.loads(out)
    assert not result["exact"]
    assert result["interface_bandwidth_words_per_cycle"] == {"ifmap": 10, "filter": 10, "ofmap": 10}
    # the 1x1 layer streams 401,408 ifmap words through a 10-word port: at least 40,141 cycles
    assert result["layers"][2]["cycles"] >= 401_408 / 10
    assert result["layers"][2]["stall_cycles"] > 0


@pytest.mark.parametrize(
    ("run_name", "printed"),
    [
        ("100%", "'%' must be followed by '%' or '(', found: '%' (a percent sign is written %%)"),
        ("%(nope)s", "%(nope)s names no key of its section (a percent sign is written %%)"),
        ("100%%", None),  # read as SCALE-Sim's configparser reads it: 100%
    ],
)
def test_issue35_16_percent_in_a_cfg_is_read_as_scalesim_does(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path], run_name: str, printed: str | None
) -> None:
    directory, topology = files
    config = directory / "percent.cfg"
    config.write_text(config_text().replace("run_name = test", f"run_name = {run_name}"))
    code, out, err = run_cli(capsys, "scalesim", str(config), str(topology))
    if printed is None:
        assert code == 0 and out.startswith("100%: 32x32 os"), err
    else:
        assert (code, out, err) == (2, "", f"archsim: error: {config}: general.run_name: {printed}\n")
