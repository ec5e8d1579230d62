"""Software stacks (``software/NAME.yaml``, ``kind: software``): what runs the graph on a chip.

A stack is a framework, a compiler or a bare kernel library (MXNet, PyTorch, TensorRT, cuBLAS, Poplar,
MindSpore, XLA). It decides three things the chip does not:

* **Dispatch** (:class:`Dispatch`): what each op and each step costs beyond the op's own work, by the
  family's mechanism (:class:`Mechanism`): a GPU launches one kernel per op (``per_op``, the gap
  between back-to-back kernels) and an eager framework adds its dispatch (``framework``) and host
  issue cost (``host``); an IPU program pays program control per compute set (``per_op``) on top of
  the chip's hardware sync; XLA on a TPU runs one compiled program per step (``per_step``) whose ops
  are sequenced on the chip (``per_op``); the Ascend runtime dispatches one task per op
  (``per_op``). These map onto :class:`~archsim.spec.efficiency.Efficiency`'s ``op_overhead``,
  ``framework_overhead``, ``host_overhead`` and ``step_overhead`` (see :data:`DISPATCH_FIELDS`).
* **Graph rewrites** (:class:`Rewrite`), applied as trace transforms when a workload is built.
* **Kernel choice** where it changes efficiency (:class:`Kernels`): e.g. the fraction of the INT8
  peak a stack's convolution kernels reach.

It also may cap the step by its input pipeline (``input_pipeline``, samples per second) and names
its collective library (``collective_library``, a ``kind: collective-library`` name, stored here as a
string). Every number cites its source in ``sources``, keyed by its YAML path.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from archsim.spec.chip import FamilyName
from archsim.spec.common import Duration, Fraction, Name, Precision, Spec
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import Mechanism, family_definition


def mechanism(family: str) -> Mechanism:
    """The dispatch mechanism of ``family``'s software (its registered ``dispatch``)."""
    return family_definition(family).dispatch


class Rewrite(enum.StrEnum):
    """Graph rewrites a stack applies when it builds a workload (:mod:`archsim.workloads.rewrites`)."""

    NORM_ACT = "norm-act"
    """Element-wise ops after a normalization become its epilogue (``--fusion norm-act``)."""
    FOLD_BATCHNORM = "fold-batchnorm"
    """Inference: a batch-norm after a convolution is folded into the convolution's weights and bias."""
    FUSE_ELEMENTWISE = "fuse-elementwise"
    """Element-wise ops join the op that produced their input (as its epilogue)."""
    FUSE_ATTENTION = "fuse-attention"
    """Inference: score product, softmax and context product of attention run as one kernel."""
    RECOMPUTE = "recompute"
    """Training: activations are recomputed in the backward pass (``--recompute``)."""
    REMOVE_PADDING = "remove-padding"
    """Training on variable-length sequences: each sequence is computed at its real length, priced at
    the data set's mean (``dataset.mean_tokens`` of the workload's convergence data, at its sequence
    length; :mod:`archsim.workloads.padding`)."""
    CHANNELS_FIRST = "channels-first"
    """Convolutions on channels-first (NCHW) activations run on tensor cores, which read channels-last
    (NHWC): cuDNN transposes each convolution's activation input before it and its output after it
    (:mod:`archsim.workloads.rewrites`). A stack names the precisions at which it keeps NCHW."""
    PACK_SEQUENCES = "pack-sequences"
    """Training on variable-length sequences: whole sequences are packed into packs of the padded
    length, each pack computed as one sequence (:mod:`archsim.workloads.padding`)."""


class RewriteRule(Spec):
    """One rewrite, optionally only at some precisions or in some modes."""

    rewrite: Rewrite
    precisions: tuple[Precision, ...] | None = None
    """Precisions at which the stack applies it (None: all)."""
    modes: tuple[Literal["train", "infer"], ...] | None = None
    """Modes in which the stack applies it (None: both)."""


DISPATCH_FIELDS = {
    "per_op": "op_overhead",
    "framework": "framework_overhead",
    "host": "host_overhead",
    "per_step": "step_overhead",
}
"""Dispatch field -> the :class:`~archsim.spec.efficiency.Efficiency` field the cost models read."""


class Dispatch(Spec):
    """Per-op and per-step costs of a stack (seconds; see the module docstring for each mechanism)."""

    mechanism: Mechanism
    per_op: Duration
    """Device-side fixed cost of each op, part of its time (launch gap, program control, task dispatch)."""
    framework: Duration
    """Device idle time per op while an eager framework dispatches the next one (0 for a compiler)."""
    host: Duration
    """Host cost of issuing one op; hidden unless ops are shorter than it."""
    per_step: Duration
    """Fixed cost of each training step outside the ops (program launch, optimizer bookkeeping)."""


class Kernels(Spec):
    """Kernel choices that change efficiency."""

    compute: dict[Precision, Fraction] = Field(default_factory=dict)
    """Fraction of the matrix peak the stack's matrix kernels reach at a precision, in place of the
    family's ``compute`` (e.g. INT8 convolutions that average far below the INT8 peak)."""


_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)\s*(samples|img|seq)/s\s*$")


def _samples_per_s(value: object) -> float:
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"expected a rate with its unit such as '3500 samples/s' (or img/s, seq/s), got {value!r}")
    rate = float(match.group(1))
    if rate <= 0.0:
        raise ValueError(f"must be positive, got {value!r}")
    return rate


SamplesPerSecond = Annotated[float, BeforeValidator(_samples_per_s)]


class SoftwareSpec(Spec):
    """A software stack (see the module docstring)."""

    schema_version: Literal[1]
    kind: Literal["software"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    version: str | None = None
    family: FamilyName
    """The family of chips the stack runs on."""
    dispatch: Dispatch
    rewrites: tuple[RewriteRule, ...] = ()
    kernels: Kernels = Field(default_factory=Kernels)
    input_pipeline: SamplesPerSecond | None = None
    """Most samples per second the stack's input pipeline delivers to one chip (None: no cap)."""
    collective_library: Name | None = None
    sources: dict[str, str]

    @model_validator(mode="after")
    def _consistent(self) -> SoftwareSpec:
        expected = mechanism(self.family)
        if self.dispatch.mechanism is not expected:
            raise ValueError(
                f"dispatch.mechanism: {self.family} software dispatches by {expected.value}, "
                f"got {self.dispatch.mechanism.value}"
            )
        cited = [f"dispatch.{name}" for name in DISPATCH_FIELDS]
        cited += [f"kernels.compute.{p.value}" for p in self.kernels.compute]
        cited += ["input_pipeline"] if self.input_pipeline is not None else []
        missing = [path for path in cited if path not in self.sources and path.rsplit(".", 1)[0] not in self.sources]
        if missing:
            raise ValueError(f"sources: no source for {', '.join(missing)} (cite it, or say what it was fitted to)")
        return self

    def efficiency(self, precision: Precision) -> Efficiency:
        """The efficiency fields this stack sets at ``precision`` (merged over the family's)."""
        values: dict[str, float] = {field: getattr(self.dispatch, name) for name, field in DISPATCH_FIELDS.items()}
        if precision in self.kernels.compute:
            values["compute"] = self.kernels.compute[precision]
        return Efficiency.model_construct(set(values), **values)  # Efficiency() with these set, as validated

    def with_efficiency(self, efficiency: Efficiency) -> SoftwareSpec:
        """A copy whose dispatch times are ``efficiency``'s (calibration tries values this way)."""
        update = {name: getattr(efficiency, field) for name, field in DISPATCH_FIELDS.items()}
        dispatch = self.dispatch.model_copy(update={k: v for k, v in update.items() if v is not None})
        return self.model_copy(update={"dispatch": dispatch})

    def rewrites_for(self, mode: str, precision: Precision) -> frozenset[Rewrite]:
        """The rewrites the stack applies to a workload built for ``mode`` at ``precision``."""
        return frozenset(
            rule.rewrite
            for rule in self.rewrites
            if (rule.precisions is None or precision in rule.precisions) and (rule.modes is None or mode in rule.modes)
        )
