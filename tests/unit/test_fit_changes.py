"""A decoder training step that does not fit is refused naming the smallest change that fits, checked.

The order (issue 22): full recomputation, a higher ZeRO stage when data parallel, a higher
tensor-parallel degree, more pipeline stages, a smaller micro-batch. Each named change is run here to
show that it does fit, and the change before it in the order to show that it does not.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from archsim import simulate
from archsim.cli import main
from archsim.errors import CapacityError
from archsim.memory_fit import Change, smallest_change
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)


def refusal(*arguments: str) -> str:
    """``archsim run ARGUMENTS --mode train``'s one-line refusal (in-process: the CLI's own error path)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", *arguments, "--mode", "train"])
    assert code == 2 and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue()
    return err.getvalue()


def test_a_chip_names_full_recomputation_and_it_fits() -> None:
    line = refusal("a100-80gb", "gpt3-1.3b", "--batch", "8")
    assert "the largest batch that fits is 5; the smallest change that fits is --recompute full" in line
    assert "on a system, --zero, --tensor-parallel or --pipeline-stages divide its training state" in line
    fitted = simulate("a100-80gb", "gpt3-1.3b", mode="train", batch=8, recompute="full", library=LIBRARY)
    assert fitted.memory_bytes <= fitted.memory_capacity_bytes


def test_a_data_parallel_system_names_the_lowest_zero_stage_that_fits() -> None:
    line = refusal("dgx-a100", "gpt3-13b", "--batch", "1")
    assert line.endswith("the smallest change that fits is --zero 3\n")
    fitted = simulate("dgx-a100", "gpt3-13b", mode="train", batch=1, zero=3, library=LIBRARY)
    assert fitted.memory_bytes <= fitted.memory_capacity_bytes
    before: list[dict[str, object]] = [{"recompute": "full"}, {"zero": 2}]  # earlier in the order: no fit
    for change in before:
        with pytest.raises(CapacityError):
            simulate("dgx-a100", "gpt3-13b", mode="train", batch=1, library=LIBRARY, **change)  # type: ignore[arg-type]


def test_a_pipeline_names_a_tensor_parallel_split_before_more_stages() -> None:
    line = refusal("dgx-a100", "gpt3-13b", "--batch", "8", "--pipeline-stages", "2", "--recompute", "full")
    assert "--microbatches: stage 1" in line
    assert line.endswith("the smallest change that fits is --tensor-parallel 2\n")
    fitted = simulate(
        "dgx-a100", "gpt3-13b", mode="train", batch=8, pipeline_stages=2, tensor_parallel=2, recompute="full",
        library=LIBRARY,
    )  # fmt: skip
    assert fitted.tensor_parallel == 2 and fitted.memory_bytes <= fitted.memory_capacity_bytes


def test_a_pipeline_at_its_widest_split_names_more_stages() -> None:
    line = refusal(
        "dgx-a100", "gpt3-13b", "--batch", "64", "--nodes", "2", "--tensor-parallel", "8", "--recompute", "full"
    )
    assert "--tensor-parallel" not in line.split("; ")[-1]  # 8 is the node's whole NVLink domain
    assert line.endswith("the smallest change that fits is --pipeline-stages 2\n")
    options = {"nodes": 2, "tensor_parallel": 8, "recompute": "full", "library": LIBRARY}
    fitted = simulate("dgx-a100", "gpt3-13b", mode="train", batch=64, pipeline_stages=2, **options)  # type: ignore[arg-type]
    assert fitted.pipeline_stages == 2 and fitted.memory_bytes <= fitted.memory_capacity_bytes


def test_a_data_parallel_system_names_a_tensor_parallel_split() -> None:
    line = refusal("dgx-a100", "gpt3-13b", "--batch", "32", "--recompute", "full")
    assert line.endswith("the smallest change that fits is --tensor-parallel 8\n")
    common = {"mode": "train", "batch": 32, "recompute": "full", "library": LIBRARY}
    fitted = simulate("dgx-a100", "gpt3-13b", tensor_parallel=8, **common)  # type: ignore[arg-type]
    assert fitted.memory_bytes <= fitted.memory_capacity_bytes
    with pytest.raises(CapacityError):  # the split before it in the order does not fit
        simulate("dgx-a100", "gpt3-13b", tensor_parallel=4, **common)  # type: ignore[arg-type]


def test_with_nothing_else_left_a_smaller_batch() -> None:
    line = refusal("dgx-a100", "gpt3-1.3b", "--batch", "256", "--zero", "3", "--recompute", "full")
    assert line.endswith("the largest batch that fits is 64; the smallest change that fits is --batch 64\n")


def test_none_fits_says_what_was_tried() -> None:
    line = refusal("dgx-a100", "gpt3-175b", "--batch", "1")
    tried = "--zero 3, --tensor-parallel 2, --tensor-parallel 4, --tensor-parallel 8, --pipeline-stages 2"
    assert f"none of --recompute full, --zero 1, --zero 2, {tried}" in line
    assert line.endswith("fits alone (archsim plan searches layouts that combine them)\n")


def test_changes_are_checked_in_order_until_one_fits() -> None:
    checked: list[str] = []

    def check(name: str, result: bool) -> Change:
        def fits() -> bool:
            checked.append(name)
            return result

        return Change(name, fits)

    changes = [check("--recompute full", False), check("--tensor-parallel 2", True), check("--zero 1", True)]
    assert smallest_change(changes) == "the smallest change that fits is --tensor-parallel 2"
    assert checked == ["--recompute full", "--tensor-parallel 2"]
    assert smallest_change([]) == "no other change to try"
