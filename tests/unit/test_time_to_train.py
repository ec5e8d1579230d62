"""Time to train and the input pipeline: convergence data, the MLPerf clock, input-bound steps, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from archsim.cli import main
from archsim.errors import SpecError, UsageError
from archsim.spec.convergence import ConvergenceSpec
from archsim.spec.library import Library, builtin_roots
from archsim.spec.yamlio import validate
from archsim.time_to_train import simulate_training


@pytest.fixture(scope="module")
def library() -> Library:
    return Library()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def resnet_data() -> dict[str, Any]:
    root = next(r for r in builtin_roots() if r.name == "convergence")
    data: dict[str, Any] = yaml.safe_load((root / "resnet50.yaml").read_text())
    return data


# -- convergence data ---------------------------------------------------------------------------


def test_a_published_point_gives_the_mean_of_its_runs(library: Library) -> None:
    spec = library.convergence("resnet50")
    runs = next(p.runs for p in spec.optimizers["lars"] if p.global_batch == 4096)
    epochs, basis = spec.to_target("lars", 4096)
    assert epochs == pytest.approx(sum(runs) / len(runs))
    assert basis == "published point 4096"


def test_between_points_the_mean_is_interpolated_linearly(library: Library) -> None:
    spec = library.convergence("resnet50")
    low, _ = spec.to_target("lars", 3264)
    high, _ = spec.to_target("lars", 4096)
    middle, basis = spec.to_target("lars", (3264 + 4096) // 2)
    assert middle == pytest.approx((low + high) / 2)
    assert basis == "interpolated between 3264 and 4096"


def test_below_the_smallest_batch_the_smallest_point_is_used(library: Library) -> None:
    spec = library.convergence("resnet50")
    assert spec.to_target("lars", 256)[0] == spec.to_target("lars", 1632)[0]


def test_above_the_largest_batch_is_refused_naming_what_has_data(library: Library) -> None:
    with pytest.raises(UsageError, match="at most 64480"):
        library.convergence("resnet50").to_target("lars", 70000)
    with pytest.raises(UsageError, match="known: lars"):
        library.convergence("resnet50").to_target("sgd", 4096)


def test_bert_evaluates_as_the_pcl_log_does(library: Library) -> None:
    # the 256-chip PCL log (global batch 4096) evaluates every 176,128 samples = 43 steps
    assert library.convergence("bert-large").evaluation_interval_samples(4096) == 176128


def test_resnet_evaluates_every_four_epochs(library: Library) -> None:
    assert library.convergence("rn50").evaluation_interval_samples(3200) == 4 * 1281167


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["optimizers"]["lars"].reverse(), "ascending"),
        (lambda d: d["sources"].pop("optimizers.lars"), "no source for optimizers.lars"),
        (lambda d: d.update(default_optimizer="sgd"), "default_optimizer"),
        (lambda d: d["dataset"].pop("decoded_sample_bytes"), "decoded_sample_bytes"),
        (lambda d: d["evaluation"].update(every_samples={"per_batch": 1, "base": 0, "multiple": 1}), "exactly one"),
    ],
)
def test_a_malformed_convergence_file_fails_naming_the_problem(change: Any, problem: str) -> None:
    data = resnet_data()
    change(data)
    with pytest.raises(SpecError, match=problem):
        validate(ConvergenceSpec, data, "convergence/bad.yaml")


# -- the input pipeline ---------------------------------------------------------------------------


def test_host_decoding_makes_a_dgx1_step_wait_for_its_input(library: Library) -> None:
    fed = simulate_training("dgx1", "resnet50", batch=64, time_to_train=False, input_decode="host", library=library)
    pipe = fed.input_pipeline
    assert pipe is not None
    assert pipe.step_bound == "input"
    assert pipe.limit == "host-decode"
    assert pipe.samples_per_s == pytest.approx(40 / 0.010)  # 40 cores, 10 ms per image
    assert fed.throughput == pytest.approx(pipe.samples_per_s)
    assert fed.time_by_bound["input"] == pytest.approx(pipe.wait_s) and pipe.wait_s > 0
    assert fed.step_time_s == pytest.approx(pipe.ops_step_s + pipe.wait_s)
    assert fed.scaling_efficiency is not None and fed.scaling_efficiency <= 1


def test_device_decoding_feeds_the_same_dgx1_fast_enough(library: Library) -> None:
    fed = simulate_training("dgx1", "resnet50", batch=64, time_to_train=False, input_decode="device", library=library)
    plain = simulate_training("dgx1", "resnet50", batch=64, time_to_train=False, library=library)
    pipe = fed.input_pipeline
    assert pipe is not None and plain.input_pipeline is None
    assert pipe.step_bound == "ops"
    assert pipe.wait_s == 0
    assert fed.step_time_s == plain.step_time_s
    assert fed.throughput <= pipe.samples_per_s


def test_the_input_pipeline_never_raises_throughput(library: Library) -> None:
    for batch in (8, 64, 256):
        plain = simulate_training("dgx1", "resnet50", batch=batch, time_to_train=False, library=library)
        fed = simulate_training(
            "dgx1", "resnet50", batch=batch, time_to_train=False, input_decode="host", library=library
        )
        assert fed.throughput <= plain.throughput
        assert fed.throughput <= 4000 * (1 + 1e-12)


def test_waiting_for_input_costs_static_power_and_keeps_per_watt(library: Library) -> None:
    plain = simulate_training("dgx1", "resnet50", batch=64, time_to_train=False, library=library)
    fed = simulate_training("dgx1", "resnet50", batch=64, time_to_train=False, input_decode="host", library=library)
    assert fed.input_pipeline is not None
    waiting_j = plain.static_power_w * fed.input_pipeline.wait_s * fed.num_chips
    assert fed.energy_j == pytest.approx(plain.energy_j + waiting_j)
    assert fed.power_w == pytest.approx(fed.energy_j / fed.num_chips / fed.step_time_s)
    assert plain.static_power_w <= fed.power_w < plain.power_w  # idle time lowers the average
    assert fed.normalized.per_watt == pytest.approx(fed.throughput / fed.num_chips / fed.power_w)
    assert fed.normalized.per_mm2 is not None


# -- time to train ----------------------------------------------------------------------------------


def test_time_to_train_is_steps_plus_evaluations(library: Library) -> None:
    result = simulate_training("dgx1", "resnet50", batch=32, library=library)
    ttt = result.time_to_train
    assert ttt is not None
    assert ttt.global_batch == 256
    assert ttt.epochs == pytest.approx(library.convergence("resnet50").to_target("lars", 1632)[0])
    assert ttt.steps == math.ceil(ttt.samples / 256)
    assert ttt.train_s == pytest.approx(ttt.steps * result.step_time_s)
    assert ttt.evaluations == math.ceil(ttt.epochs / 4)
    assert ttt.eval_each_s > 0
    assert ttt.time_to_train_s == pytest.approx(ttt.initialization_s + ttt.train_s + ttt.evaluations * ttt.eval_each_s)
    # the clock covers training: it can never beat the samples at the step's throughput
    assert ttt.time_to_train_s >= ttt.samples / result.throughput


def test_a_run_with_its_own_schedule_trains_all_of_its_epochs(library: Library) -> None:
    reference = simulate_training("dgx1", "resnet50", batch=32, library=library)
    scheduled = simulate_training("dgx1", "resnet50", batch=32, epochs=38, library=library)
    ref, ttt = reference.time_to_train, scheduled.time_to_train
    assert ref is not None and ttt is not None
    assert ttt.epochs == 38 and ttt.samples == 38 * 1281167
    assert ttt.steps == math.ceil(38 * 1281167 / 256)
    assert ttt.evaluations == math.ceil(38 / 4)
    assert ttt.step_time_s == ref.step_time_s and ttt.eval_each_s == ref.eval_each_s
    assert f"the reference points give {ref.epochs:.1f}" in ttt.convergence_basis
    # more epochs than the reference points' take longer, never shorter
    assert ttt.epochs > ref.epochs and ttt.time_to_train_s > ref.time_to_train_s


def test_a_schedule_in_epochs_is_refused_where_convergence_counts_samples(library: Library) -> None:
    with pytest.raises(UsageError, match="count training samples, not epochs"):
        simulate_training("dgx1", "bert-large", batch=1, seq_len=512, optimizer="lamb", epochs=2, library=library)
    with pytest.raises(UsageError, match="above 0"):
        simulate_training("dgx1", "resnet50", batch=32, epochs=0, library=library)


def test_a_slower_input_lengthens_the_time_to_train(library: Library) -> None:
    plain = simulate_training("dgx1", "resnet50", batch=32, library=library).time_to_train
    fed = simulate_training("dgx1", "resnet50", batch=32, input_decode="host", library=library).time_to_train
    assert plain is not None and fed is not None
    assert fed.time_to_train_s > plain.time_to_train_s


def test_time_to_train_needs_training_and_convergence_data(library: Library) -> None:
    with pytest.raises(UsageError, match="needs --mode train"):
        simulate_training("dgx1", "resnet50", mode="infer", library=library)
    with pytest.raises(Exception, match="unknown convergence"):
        simulate_training("v100", "gemm:64x64x64", library=library)


# -- the CLI --------------------------------------------------------------------------------------


def test_run_json_carries_the_input_pipeline_and_time_to_train(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "run", "dgx1", "resnet50", "--mode", "train", "--batch", "32", "--input-decode", "host",
        "--time-to-train", "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["input_pipeline"]["step_bound"] == "input"
    assert result["time_by_bound"]["input"] > 0
    ttt = result["time_to_train"]
    assert ttt["time_to_train_s"] > 0 and ttt["epochs"] > 0 and ttt["optimizer"] == "lars"
    assert {"train_s", "eval_s", "evaluations", "initialization_s", "steps"} <= set(ttt)


def test_run_summary_shows_the_time_to_train(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "dgx1", "resnet50", "--mode", "train", "--batch", "32", "--time-to-train")
    assert code == 0, err
    assert "time to train" in out and "epochs" in out


def test_run_json_trains_the_schedule_given_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "dgx1", "resnet50", "--mode", "train", "--batch", "32", "--time-to-train", "--json"]
    code, out, err = run_cli(capsys, *argv, "--epochs", "45")
    assert code == 0, err
    ttt = json.loads(out)["time_to_train"]
    assert ttt["epochs"] == 45 and ttt["evaluations"] == 12
    assert ttt["convergence_basis"].startswith("the run's schedule")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["v100", "resnet50", "--mode", "train", "--input-decode", "host"], "needs a system with an input_pipeline"),
        (["dgx1", "bert-large", "--mode", "train", "--batch", "1", "--input-decode", "host"], "not decoded images"),
        (["dgx1", "resnet50", "--batch", "8", "--time-to-train"], "needs --mode train"),
        (["dgx1", "resnet50", "--mode", "train", "--batch", "8", "--optimizer", "lars"], "only applies"),
        (["dgx1", "resnet50", "--mode", "train", "--batch", "8", "--time-to-train", "--optimizer", "sgd"], "known"),
        (["dgx1", "resnet50", "--mode", "train", "--batch", "8", "--epochs", "38"], "only applies"),
        (["dgx1", "resnet50", "--mode", "train", "--batch", "8", "--time-to-train", "--epochs", "-1"], "above 0"),
    ],
)
def test_bad_training_options_fail_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str, tmp_path: Path
) -> None:
    code, out, err = run_cli(capsys, "run", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("archsim: error: ") and message in err


def test_a_system_input_pipeline_needs_a_source() -> None:
    from archsim.spec.system import SystemSpec

    data: dict[str, Any] = {
        "schema_version": 1,
        "kind": "system",
        "name": "test-system",
        "description": "a test",
        "chip": "v100",
        "levels": {"node": {"size": 4, "topology": "switch", "link": "nvswitch", "links": 6}},
        "input_pipeline": {"host_cores": 8, "host_decode_time": "10 ms", "host_link": "pcie3"},
        "sources": {"chip": "x", "levels.node": "y"},
    }
    assert validate(SystemSpec, data, "s.yaml").missing_sources() == ["input_pipeline"]
    data["input_pipeline"]["host_decode_time"] = 10
    with pytest.raises(SpecError, match=r"input_pipeline\.host_decode_time"):
        validate(SystemSpec, data, "s.yaml")


def test_a_sweep_shows_time_to_train_and_the_input_bound(tmp_path: Path) -> None:
    from archsim.sweep import run_sweep

    spec = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "ttt-sweep",
        "description": "time to train per decode path",
        "target": "dgx1",
        "workloads": ["resnet50"],
        "settings": {"mode": "train", "batch": 64},
        "grid": {"run.time_to_train": [True], "run.input_decode": ["host", "device"]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    table = run_sweep(str(path), jobs=1, progress=False).set_index("run.input_decode")
    assert table["error"].isna().all()
    assert table.loc["host", "step_bound"] == "input" and table.loc["device", "step_bound"] == "ops"
    assert table.loc["host", "input_bound_s"] > 0 and table.loc["device", "input_bound_s"] == 0
    assert table.loc["host", "time_to_train_s"] > table.loc["device", "time_to_train_s"] > 0
    assert table.loc["host", "epochs"] == table.loc["device", "epochs"]


def test_a_run_report_shows_the_input_bound_and_time_to_train(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_file = tmp_path / "report.html"
    code, _, err = run_cli(
        capsys, "report", "run", "dgx1", "resnet50", "--mode", "train", "--batch", "32", "--input-decode", "host",
        "--time-to-train", "--out", str(out_file),
    )  # fmt: skip
    assert code == 0, err
    page = out_file.read_text()
    assert "time to train" in page and "step bound" in page and "input-bound" in page


def test_bert_time_to_train_holds_only_at_the_benchmark_sequence_length(library: Library) -> None:
    with pytest.raises(UsageError, match="--seq-len 512"):
        simulate_training("dgx1", "bert-large", batch=1, seq_len=128, library=library)
    ttt = simulate_training("dgx1", "bert-large", batch=1, seq_len=512, library=library).time_to_train
    assert ttt is not None and ttt.epochs is None and ttt.samples > 0
    assert ttt.evaluations == math.ceil(ttt.samples / library.convergence("bert-large").evaluation_interval_samples(8))


def test_a_convergence_file_naming_an_unknown_workload_fails_on_workload(tmp_path: Path) -> None:
    data = resnet_data()
    data.update(name="bad-convergence", aliases=[], workload="resnet5")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="workload"):
        Library([tmp_path], use_env=False).convergence("bad-convergence")


def test_inference_flattens_at_the_input_pipeline_rate(library: Library) -> None:
    rates = [
        simulate_training(
            "dgx1", "resnet50", mode="infer", batch=b, time_to_train=False, input_decode="host", library=library
        ).throughput
        for b in (64, 256)
    ]
    assert rates == [pytest.approx(4000), pytest.approx(4000)]


def test_a_sweep_trains_the_schedule_it_names(tmp_path: Path) -> None:
    from archsim.sweep import run_sweep

    spec = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "schedule-sweep",
        "description": "time to train per schedule",
        "target": "dgx1",
        "workloads": ["resnet50"],
        "settings": {"mode": "train", "batch": 64, "time_to_train": True},
        "grid": {"run.epochs": [38, 45]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    table = run_sweep(str(path), jobs=1, progress=False).set_index("run.epochs")
    assert table["error"].isna().all()
    assert list(table["epochs"]) == [38, 45]
    assert table.loc[45, "time_to_train_s"] > table.loc[38, "time_to_train_s"]
