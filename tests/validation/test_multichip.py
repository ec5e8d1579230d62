"""Multi-chip validation against published measurements (shared/data/calibration.csv, group B).

DGX-1 V100 16 GB, ResNet-50 v1.5 training, MXNet 20.12, fp16, batch 192 per GPU (source:
github NVIDIA/DeepLearningExamples MxNet/Classification/RN50v1.5/README.md @1bd98ac3):
1 GPU 1376 img/s, 8 GPUs 10723 img/s, so 8-GPU scaling efficiency 10723 / (8 x 1376) = 97.4 %.

Nothing here is fitted: the NVLink numbers come from their sources (interconnect/), the GPU from the
single-chip model. The runs use the published runs' kernel fusion (MXNet fp16 runs fuse batch-norm
with ReLU and with add + ReLU: runner@1bd98ac3 passes --fuse-bn-relu 1 --fuse-bn-add-relu 1).
Bounds: the 8-GPU throughput within 15 % (it inherits the single-GPU model's error); the scaling
efficiency -- which only the interconnect model decides -- within 5 points.
"""

from __future__ import annotations

import pytest

from archsim import simulate
from archsim.results.records import RunResult
from archsim.spec.library import Library

PUBLISHED_1_GPU = 1376.0
PUBLISHED_8_GPU = 10723.0
PUBLISHED_EFFICIENCY = PUBLISHED_8_GPU / (8 * PUBLISHED_1_GPU)


@pytest.fixture(scope="module")
def dgx1_resnet50(library: Library) -> RunResult:
    return simulate("dgx1", "resnet50", mode="train", batch=192, precision="fp16", library=library, fusion="norm-act")


def test_dgx1_eight_gpu_throughput_within_15_percent(dgx1_resnet50: RunResult) -> None:
    throughput = dgx1_resnet50.throughput
    assert throughput == pytest.approx(PUBLISHED_8_GPU, rel=0.15)


def test_dgx1_scaling_efficiency_within_5_points(dgx1_resnet50: RunResult) -> None:
    efficiency = dgx1_resnet50.scaling_efficiency
    assert abs(efficiency - PUBLISHED_EFFICIENCY) <= 0.05
    assert efficiency <= 1.0
