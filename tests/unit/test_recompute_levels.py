"""Recomputation choices (--recompute none|selective|full) against Korthikanti et al. 2022's activation formulas.

Korthikanti et al. (arXiv 2205.05198, Sec. 4.1, Eq. 1 and Sec. 5) count the activations one
transformer layer keeps in 16-bit training as ``34 s b h + 5 a s^2 b`` bytes without recomputation,
``34 s b h`` with selective recomputation (the attention core run again) and ``2 s b h`` with full
recomputation (the layer's input only), before tensor parallelism. archsim stores, per GPT-3 layer,
exactly those bytes plus the LayerNorms' fp32 statistics (mean and reciprocal deviation, 2 x 4 bytes
per token for each of the two norms: ``16 s b``) without or with selective recomputation -- full
recomputation recomputes them too. The stated tolerance against the formula is therefore 0.01%
(16 s b over 34 s b h is 0.004% at h = 12288), and the exact figure is tested as well.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from archsim import simulate
from archsim.cli import main
from archsim.errors import UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library, builtin_roots
from archsim.spec.validation import Row
from archsim.workloads import TraceOptions, build_trace
from archsim.workloads.memory import memory_per_chip
from archsim.workloads.options import Recompute
from archsim.workloads.trace import Mode, Phase, Trace
from archsim.workloads.training import RECOMPUTE

LIBRARY = Library(use_env=False)
SEQ, HIDDEN, HEADS = 2048, 12288, 96  # GPT-3 175B's shape (Brown et al. 2020, Table 2.1)


def gpt3_like(tmp_path: Path, layers: int) -> str:
    root = next(r for r in builtin_roots() if r.name == "workloads")
    data = yaml.safe_load((root / "gpt3-175b.yaml").read_text())
    data["name"] = f"gpt3-shape-{layers}"
    data.pop("aliases", None)
    data["decoder"]["layers"] = layers
    path = tmp_path / f"gpt3-shape-{layers}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def train(workload: str, recompute: Recompute | bool, batch: int = 1, seq: int | None = SEQ) -> Trace:
    return build_trace(workload, LIBRARY, Mode.TRAIN, batch, Precision.FP16, seq, TraceOptions(recompute=recompute))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize(
    ("recompute", "per_layer", "statistics"),
    [
        (Recompute.NONE, lambda s, b, h, a: 34 * s * b * h + 5 * a * s * s * b, True),
        (Recompute.SELECTIVE, lambda s, b, h, a: 34 * s * b * h, True),
        (Recompute.FULL, lambda s, b, h, a: 2 * s * b * h, False),
    ],
)
def test_activations_per_layer_follow_korthikanti(
    tmp_path: Path, batch: int, recompute: Recompute, per_layer: object, statistics: bool
) -> None:
    two, three = (memory_per_chip(train(gpt3_like(tmp_path, n), recompute, batch)) for n in (2, 3))
    stored = three.activations - two.activations  # one more layer; embeddings, head and transients cancel
    assert callable(per_layer)
    formula = per_layer(SEQ, batch, HIDDEN, HEADS)
    assert stored == pytest.approx(formula, rel=1e-4)
    assert stored == formula + (16 * SEQ * batch if statistics else 0)
    # weights, gradients and optimizer state do not depend on what is recomputed
    plain = memory_per_chip(train(gpt3_like(tmp_path, 3), Recompute.NONE, batch))
    assert (three.weights, three.gradients, three.optimizer_state) == (
        plain.weights,
        plain.gradients,
        plain.optimizer_state,
    )


def test_selective_reruns_the_attention_core_and_full_reruns_whole_layers() -> None:
    selective = train("gpt2", Recompute.SELECTIVE, seq=128)
    full = train("gpt2", Recompute.FULL, seq=128)
    plain = train("gpt2", Recompute.NONE, seq=128)
    core = {"attn.scores", "attn.scale_mask", "attn.softmax", "attn.probs_dropout", "attn.context"}
    again = [op.name.removesuffix(RECOMPUTE) for op in selective.ops if op.phase is Phase.RECOMPUTE]
    assert {name.split(".", 2)[2] for name in again} == core
    assert len(again) == 12 * len(core)  # every layer of GPT-2 small
    assert selective.meta["recompute"] == "selective" and full.meta["recompute"] == "true"
    rerun_full = {op.name.removesuffix(RECOMPUTE) for op in full.ops if op.phase is Phase.RECOMPUTE}
    layer_ops = {op.name for op in plain.ops if op.phase is Phase.FORWARD and op.name.startswith("layers.")}
    assert rerun_full == layer_ops  # each layer runs again whole; the embeddings' and head's ops do not
    assert plain.flops < selective.flops < full.flops
    assert memory_per_chip(full).activations < memory_per_chip(selective).activations
    assert memory_per_chip(selective).activations < memory_per_chip(plain).activations


def test_backward_ops_read_the_rebuilt_core_from_its_copies() -> None:
    selective = train("gpt2", Recompute.SELECTIVE, seq=128)
    selective.check()
    rebuilt = {t.name: i for i, op in enumerate(selective.ops) if op.phase is Phase.RECOMPUTE for t in op.writes}
    softmax_bwd = next(i for i, op in enumerate(selective.ops) if op.name == "layers.0.attn.softmax.bwd")
    assert rebuilt["layers.0.attn.softmax.out"] in selective.ops[softmax_bwd].deps
    assert "layers.0.attn.probs_dropout.mask" in rebuilt  # the mask is drawn again, not kept


def test_api_takes_the_choices_and_bools() -> None:
    runs = {
        value: simulate("a100-80gb", "gpt2", mode="train", batch=1, seq_len=256, recompute=value, library=LIBRARY)
        for value in ("none", "selective", "full", True, False)
    }
    activations = {value: r.memory_per_chip.activations for value, r in runs.items() if r.memory_per_chip}
    assert activations[True] == activations["full"] < activations["selective"] < activations["none"]
    assert activations[False] == activations["none"]


def test_selective_needs_an_attention_core_and_bad_values_are_refused() -> None:
    with pytest.raises(UsageError, match="selective recomputation reruns a decoder's attention core"):
        simulate("v100", "resnet50", mode="train", batch=2, recompute="selective", library=LIBRARY)
    with pytest.raises(UsageError, match="--recompute: must be one of none, selective, full"):
        simulate("v100", "gpt2", mode="train", batch=2, recompute="some", library=LIBRARY)


def test_cli_bare_recompute_is_full_and_no_recompute_is_none(capsys: pytest.CaptureFixture[str]) -> None:
    run = ["run", "a100-80gb", "gpt2", "--mode", "train", "--batch", "1"]
    outputs = {}
    for flags in (["--recompute"], ["--recompute", "full"], ["--no-recompute"], ["--recompute", "none"]):
        assert main([*run, "--seq-len", "128", *flags, "--json"]) == 0
        outputs[" ".join(flags)] = json.loads(capsys.readouterr().out)["memory_per_chip"]
    assert outputs["--recompute"] == outputs["--recompute full"]
    assert outputs["--no-recompute"] == outputs["--recompute none"]
    assert outputs["--recompute"]["activations"] < outputs["--no-recompute"]["activations"]
    # a fresh process: exit status 2, one line on stderr, nothing on stdout
    command = [sys.executable, "-m", "archsim.cli", *run, "--recompute", "selective", "--mode", "infer"]
    refused = subprocess.run(command, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--recompute" in refused.stderr


def test_validation_rows_name_the_recomputation_the_published_run_used() -> None:
    row = {
        "id": "a-megatron-row",
        "group": "single_chip",
        "target": "a100-80gb",
        "workload": "gpt3-1.3b",
        "mode": "train",
        "batch": 1,
        "precision": "fp16",
        "recompute": "selective",
        "metric": "throughput",
        "published": 1.0,
        "unit": "seq/s",
        "source": "test",
    }
    assert Row.model_validate(row).recompute == "selective"
    with pytest.raises(ValidationError, match="recompute applies to training rows only"):
        Row.model_validate({**row, "mode": "infer"})
    assert Row.model_validate({**row, "mode": "infer", "recompute": "none"}).recompute == "none"
