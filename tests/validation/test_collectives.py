"""Collective bandwidth against published nccl-tests rows (shared/data/calibration.csv, group C).

DGX A100 (8x A100, NVLink3 through NVSwitch), ``all_reduce_perf``, fp32 (source:
stas00/ml-engineering:network/README.md@744d01e1, 'Real network throughput'): 1,048,576 bytes at
18.00 GB/s busbw and 1,073,741,824 bytes at 229.04 GB/s busbw.

Both rows were fitted (software/nccl.yaml: ``launch_latency`` to the first, ``wire_efficiency`` to the
second; scripts/fit_collectives.py), two parameters for two rows, so this checks the fit is what the
library file holds and the engine reproduces it; the bound is the issue's 10 %. Sizes in between are
not fitted: their bus bandwidth must lie between the two and never above the wire.
"""

from __future__ import annotations

import pytest

import archsim

PUBLISHED_BUSBW = {2**20: 18.00e9, 2**30: 229.04e9}
NVLINK3_BYTES_PER_S = 300e9
"""12 NVLink3 ports of 25 GB/s per GPU, one direction (interconnect/nvswitch2.yaml)."""

pytestmark = pytest.mark.validation


@pytest.mark.parametrize(("size", "busbw"), sorted(PUBLISHED_BUSBW.items()))
def test_dgx_a100_all_reduce_within_10_percent(size: int, busbw: float) -> None:
    (result,) = archsim.collective("dgx-a100", "all-reduce", [size])
    assert result.busbw_bytes_per_s == pytest.approx(busbw, rel=0.10)


def test_dgx_a100_all_reduce_between_the_rows_and_under_the_wire() -> None:
    sizes = [2**k for k in range(20, 31, 2)]
    results = archsim.collective("dgx-a100", "all-reduce", sizes)
    busbw = [r.busbw_bytes_per_s for r in results]
    assert busbw == sorted(busbw)
    assert all(0.9 * PUBLISHED_BUSBW[2**20] <= b <= NVLINK3_BYTES_PER_S for b in busbw)


def test_tpu_v4_pod_all_reduce_bandwidth_within_10_percent() -> None:
    """Google's TPU v4 pod specification: all-reduce bandwidth per pod 1.1 PB/s (4,096 chips).

    Source: https://cloud.google.com/tpu/docs/v4 (key specifications). Not fitted: the ICI links'
    bandwidth comes from the pod's bisection bandwidth (interconnect/tpu-ici-v4.yaml) and tpu-ici
    charges the bare links. Compared: every chip's bus bandwidth of a 1 GiB all-reduce, over the pod.
    """
    (result,) = archsim.collective("tpu-v4-pod", "all-reduce", [2**30])
    assert result.chips * result.busbw_bytes_per_s == pytest.approx(1.1e15, rel=0.10)
