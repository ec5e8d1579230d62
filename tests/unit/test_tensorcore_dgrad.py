"""Where the data-gradient fraction applies: convolutions the tensor cores run (chips/families/tensorcore.yaml)."""

from __future__ import annotations

import pytest

from archsim import simulate
from archsim.models.tensorcore import TensorCoreEfficiency, TensorCoreModel, TensorCoreSection, data_gradient_fraction
from archsim.spec.common import Precision
from archsim.spec.library import Library

CONV = "conv:64,256,14,14,256,3,3"  # a compute-bound 3x3 convolution, the same MACs in every pass


def efficiency(library: Library) -> TensorCoreEfficiency:
    """The family's record as fitted (chips/families/tensorcore.yaml), with no stack's costs."""
    family = library.family("tensorcore").efficiency
    return TensorCoreEfficiency.resolve(
        family.model_copy(update=dict.fromkeys(("op_overhead", "host_overhead", "step_overhead"), 0.0)), "test"
    )


@pytest.mark.parametrize(
    ("chip", "precision", "tensor_cores"),
    [("v100", "fp16", True), ("v100", "fp32", False), ("a100-40gb", "fp16", True), ("p100", "fp16", False)],
)
def test_dgrad_takes_the_data_gradient_fraction_only_on_tensor_cores(
    library: Library, chip: str, precision: str, tensor_cores: bool
) -> None:
    eff = efficiency(library)
    assert eff.data_gradient < eff.compute  # DeepBench's dgrad kernels reach less of the peak
    section = library.chip(chip).section_of(TensorCoreSection)
    expected = eff.data_gradient if tensor_cores else eff.compute
    assert data_gradient_fraction(section, eff, Precision(precision)) == expected
    assert TensorCoreModel(library.chip(chip), eff, Precision(precision)).data_gradient == expected


def test_a_cuda_core_dgrad_runs_as_its_forward_and_a_tensor_core_one_slower(library: Library) -> None:
    def ratio(precision: str) -> float:
        run = simulate("v100", CONV, mode="train", precision=precision, library=library)
        times = {layer.phase: layer.end_s - layer.start_s for layer in run.layers}
        return times["bwd_data"] / times["fwd"]

    eff = efficiency(library)
    assert ratio("fp32") == pytest.approx(1.0, rel=0.05)
    assert ratio("fp16") == pytest.approx(eff.compute / eff.data_gradient, rel=0.15)
