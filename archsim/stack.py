"""The software stack of a run: which one, the trace options it implies, the efficiency it sets.

A run names its stack (``--software``, ``software=``) or takes its chip's default (the family file's
``software``; a bare library kernel, ``gemm:`` or ``conv:``, takes ``kernel_software``). The stack's
rewrites become the trace options, which an explicit ``--fusion`` or ``--recompute`` /
``--no-recompute`` overrides; its dispatch costs and kernel choices are merged over the family's
efficiency parameters (a chip's own overrides win over both).
"""

from __future__ import annotations

from archsim.errors import UsageError
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Fusion, Precision
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.software import Rewrite, SoftwareSpec
from archsim.workloads.conv import is_conv
from archsim.workloads.gemm import is_gemm
from archsim.workloads.options import Padding, Recompute, TraceOptions
from archsim.workloads.trace import LAUNCH_KERNEL, Mode, Trace


def default_software(library: Library, chip: ChipSpec, kernel: bool = False) -> SoftwareSpec:
    """The stack ``chip`` runs by default; with ``kernel``, its family's bare kernel library."""
    family = library.family(chip.family)
    return library.software_for(chip, family.kernel_software if kernel else family.software)


def is_kernel(trace: Trace) -> bool:
    """True for a bare library kernel (``gemm:``, ``conv:``, or a trace with ``meta: {launch: kernel}``)."""
    return trace.meta.get("launch") == LAUNCH_KERNEL


def planned_software(library: Library, chip: ChipSpec, name: str | None, workload: str) -> SoftwareSpec:
    """The stack a workload will be built for: ``name``, or the default (a kernel library for gemm:/conv:)."""
    if name is not None:
        return library.software_for(chip, name)
    return default_software(library, chip, is_gemm(workload) or is_conv(workload))


def check_name(name: object) -> str | None:
    """A ``software`` argument checked to be None or a string."""
    if name is not None and not isinstance(name, str):
        raise UsageError("", "--software", f"must be a software name, got {name!r}")
    return name


PADDING_REWRITES = {
    Padding.KEPT: frozenset[Rewrite](),
    Padding.REMOVED: frozenset({Rewrite.REMOVE_PADDING}),
    Padding.PACKED: frozenset({Rewrite.PACK_SEQUENCES}),
}
"""The rewrite each ``--padding`` asks for (:mod:`archsim.workloads.padding`)."""


def stack_options(
    software: SoftwareSpec,
    mode: Mode,
    precision: Precision,
    fusion: Fusion | None,
    recompute: Recompute | bool | None,
    gen_len: int | None = None,
    padding: Padding | None = None,
) -> TraceOptions:
    """Trace options of a run: the stack's rewrites with the explicit ``fusion``/``recompute``/``padding`` over them.

    ``fusion``, ``recompute`` and ``padding`` None keep what the stack does; a value replaces it
    (``recompute`` True is ``full``, False ``none``; ``padding`` replaces the stack's ``remove-padding``
    or ``pack-sequences`` rewrite by :data:`PADDING_REWRITES`'s). ``gen_len``
    is a decode run's generation length (:class:`~archsim.workloads.options.TraceOptions`).
    """
    rewrites = set(software.rewrites_for(mode.value, precision))
    if padding is not None:
        rewrites -= {Rewrite.REMOVE_PADDING, Rewrite.PACK_SEQUENCES}
        rewrites |= PADDING_REWRITES[padding]
    if fusion is not None:
        rewrites.discard(Rewrite.NORM_ACT)
    if recompute is not None:
        rewrites.discard(Rewrite.RECOMPUTE)
    if mode is not Mode.TRAIN:
        rewrites.discard(Rewrite.RECOMPUTE)
    level = Recompute.NONE if recompute is None else Recompute.of(recompute)
    return TraceOptions(fusion or Fusion.NONE, level, frozenset(rewrites), gen_len=gen_len)


def stack_efficiency(
    library: Library,
    chip: ChipSpec,
    software: SoftwareSpec,
    precision: Precision,
    family_efficiency: Efficiency | None = None,
) -> Efficiency:
    """The efficiency a run uses: the family's (or ``family_efficiency``), the stack's, the chip's overrides."""
    base = family_efficiency if family_efficiency is not None else library.family(chip.family).efficiency
    return base.merged(software.efficiency(precision)).merged(chip.efficiency)


def run_stack(
    library: Library, chip: ChipSpec, trace: Trace, software: SoftwareSpec | None, family_efficiency: Efficiency | None
) -> tuple[SoftwareSpec, Efficiency]:
    """The stack that runs ``trace`` (``software``, or the chip's default for it) and the efficiency it runs at."""
    stack = software if software is not None else default_software(library, chip, is_kernel(trace))
    return stack, stack_efficiency(library, chip, stack, trace.precision, family_efficiency)


def default_efficiency(library: Library, chip: ChipSpec, precision: Precision | None = None) -> Efficiency:
    """The efficiency of ``chip`` under its default stack (at ``precision``; None: the chip's default)."""
    run_precision = chip.run_precision(precision)
    return stack_efficiency(library, chip, default_software(library, chip), run_precision)
