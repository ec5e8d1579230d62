"""archsim: a cycle-approximate accelerator architecture simulator.

Describe chips, memories and links in YAML, replay ResNet-50 and BERT traces (or your own) through
per-family cost models on a SimPy discrete-event engine, and read time, throughput, utilization and
what bounded each op. The public API:

* :func:`simulate` -- run a workload on a target, returning a :class:`RunResult`;
* :func:`simulate_training` -- the same, fed by the system's input pipeline and with its time to train;
* :func:`collective` -- time one collective on a system per size, as nccl-tests reports it;
* :class:`Library` -- the search path of YAML descriptions;
* :func:`build_trace` -- the op-by-op trace of a workload.

Names are imported on first use, so ``import archsim.units`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "simulate": "archsim.api",
    "simulate_training": "archsim.time_to_train",
    "collective": "archsim.collective_run",
    "CollectiveResult": "archsim.collective_run",
    "ArchsimError": "archsim.errors",
    "RunResult": "archsim.results.records",
    "Library": "archsim.spec.library",
    "build_trace": "archsim.workloads",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'archsim' has no attribute {name!r}")
