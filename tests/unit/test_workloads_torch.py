"""from_torch: a small CNN and an MLP exported with torch.export on the CPU become traces with the expected FLOPs.

Skipped without PyTorch, unless ``ARCHSIM_REQUIRE_TORCH=1`` (set by CI), where a missing torch fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from archsim.errors import UsageError
from archsim.workloads import from_torch
from archsim.workloads.trace import Mode, OpKind
from tests.llm_configs import skip_without

if TYPE_CHECKING:
    import torch

skip_without("torch")  # CI installs PyTorch's CPU build (ARCHSIM_REQUIRE_TORCH=1): there it must run, never skip


def cnn() -> torch.nn.Module:
    """Conv, batch norm, ReLU, pooling and a linear layer (torch is imported by the test that runs it)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(16)
            self.fc = torch.nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn(self.conv(x)))
            y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
            return self.fc(y)

    return Net()


def test_cnn_flops_and_parameters() -> None:
    import torch

    trace = from_torch(cnn(), (torch.zeros(4, 3, 8, 8),))
    conv = next(op for op in trace.ops if op.kind is OpKind.CONV)
    assert conv.flops == 2 * 4 * 8 * 8 * 16 * 3 * 9
    fc = [op for op in trace.ops if op.kind is OpKind.MATMUL]
    assert [op.flops for op in fc] == [2 * 4 * 10 * 16]
    assert trace.parameters == 16 * 3 * 9 + 2 * 16 + 16 * 10 + 10
    assert trace.batch == 4


def test_training_trace_has_backward_and_update() -> None:
    import torch

    trace = from_torch(cnn(), (torch.zeros(2, 3, 8, 8),), mode=Mode.TRAIN)
    assert trace.ops[-1].kind is OpKind.OPTIMIZER
    assert any(op.name.endswith(".bwd_weight") for op in trace.ops)
    trace.check()


def test_training_dropout_writes_a_mask_and_inference_drops_it() -> None:
    import torch

    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1))
    trained = from_torch(module, (torch.zeros(2, 8),), mode=Mode.TRAIN)
    (dropout,) = [op for op in trained.ops if op.name == "native_dropout"]
    assert (dropout.flops, [t.bytes for t in dropout.writes]) == (2 * 16, [16 * 2, 16])  # fp16 out, 1-byte mask
    assert [op.kind for op in from_torch(module, (torch.zeros(2, 8),)).ops] == [OpKind.MATMUL]


def test_from_torch_refuses_the_generation_modes() -> None:
    """Prefill and decode are built only for decoder language models (moved here from test_generation.py,
    so that only the pytest-xdist worker that runs the torch files imports PyTorch)."""
    import torch

    with pytest.raises(UsageError, match="decoder language models"):
        from_torch(torch.nn.Linear(4, 4), (torch.zeros(2, 4),), mode="decode")
