"""Workloads: build the op-by-op :class:`~archsim.workloads.trace.Trace` of a training or inference step.

Public interface:

* :func:`build_trace` -- a trace from a model name or alias, a path to a model or trace YAML file,
  an inline ``gemm:MxNxK`` / ``gemm:BxMxNxK``, or an inline ``conv:N,C,H,W,K,R,S[,STRIDE[,PAD]]``;
* :func:`microbatch_trace` -- one microbatch's trace of a per-replica batch, the same semantics for
  every source (pipelining and gradient accumulation);
* :func:`write_trace` / :func:`read_trace` -- trace files (``kind: trace``), exact round trip;
* ONNX models (``*.onnx``, :mod:`~archsim.workloads.onnx_import`), PyTorch modules
  (:func:`from_torch`, :mod:`~archsim.workloads.torch_import`) and Chakra execution traces
  (``*.et``, :mod:`~archsim.workloads.chakra`) as workloads.

Network graphs live in :mod:`~archsim.workloads.resnet`, :mod:`~archsim.workloads.bert` and
:mod:`~archsim.workloads.decoder` (language models, also in ``prefill`` and ``decode`` modes), the
generic training derivation in :mod:`~archsim.workloads.training`, memory estimates in
:mod:`~archsim.workloads.memory`. Every problem with the input raises an
:class:`~archsim.errors.ArchsimError` (``UsageError``, ``SpecError`` or ``LookupFailed``).
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.errors import SpecError, UsageError
from archsim.spec.common import Fusion, Precision
from archsim.spec.library import Entry, Library
from archsim.spec.model import Architecture, DecoderSection, ModelSpec
from archsim.workloads.conv import conv_graph, is_conv
from archsim.workloads.gemm import gemm_graph, is_gemm
from archsim.workloads.graph import ForwardGraph
from archsim.workloads.memory import finish_trace
from archsim.workloads.options import Recompute, TraceOptions
from archsim.workloads.padding import Unpadded, unpadded
from archsim.workloads.resnet import resnet_graph
from archsim.workloads.sources import is_chakra, is_onnx
from archsim.workloads.trace import Mode, Trace

# the BERT and decoder graphs, their parallel transforms and the file readers are imported where a
# workload needs them: a run of one model loads only its own (a cold start pays for every import)
if TYPE_CHECKING:
    from archsim.workloads.tensor_parallel import ShardComm
    from archsim.workloads.traceio import read_trace, write_trace

__all__ = ["Fusion", "TraceOptions", "build_trace", "from_torch", "microbatch_trace", "read_trace", "write_trace"]


def __getattr__(name: str) -> Any:
    # trace files need the YAML reader, which a run of a built-in model does not load
    if name in ("read_trace", "write_trace"):
        from archsim.workloads import traceio

        return getattr(traceio, name)
    raise AttributeError(f"module 'archsim.workloads' has no attribute {name!r}")


def from_torch(*args: Any, **kwargs: Any) -> Trace:
    """A trace of a PyTorch module; see :func:`archsim.workloads.torch_import.from_torch` (needs torch)."""
    from archsim.workloads.torch_import import from_torch as build

    return build(*args, **kwargs)


def _positive(value: int | None, field: str, source: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UsageError(source, field, f"must be a positive integer, got {value!r}")


def _model_trace(
    spec: ModelSpec,
    source: str,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    options: TraceOptions,
    padding: Unpadded | None = None,
) -> Trace:
    """The trace of a built-in (or user) model description.

    ``padding`` (:func:`~archsim.workloads.padding.unpadded`): a BERT step's sequences are computed
    without their padding; the trace keeps ``batch`` and ``seq_len`` and says what it computed in its meta.
    """
    if batch is None:
        batch = spec.default_batch.train if mode is Mode.TRAIN else spec.default_batch.infer
    meta = {"model": spec.name, "architecture": spec.architecture.value}
    if mode.is_generation and spec.architecture is not Architecture.DECODER:
        problem = f"{mode.value} generates text: decoder language models only, not {spec.name}"
        raise UsageError(source, "--mode", problem)
    if options.gen_len is not None and mode is not Mode.DECODE:
        raise UsageError(source, "--gen-len", "sets the tokens a decode run generates: --mode decode only")
    if options.tensor_parallel > 1 and spec.decoder is None:
        raise UsageError(source, "--tensor-parallel", f"splits decoder language models only, not {spec.name}")
    if options.expert_parallel > 1 and (spec.decoder is None or spec.decoder.moe is None):
        problem = f"shards a mixture of experts' experts: {spec.name} is dense (a model with a moe section would do)"
        raise UsageError(source, "--expert-parallel", problem)
    if options.bn_group > 1 and mode is not Mode.TRAIN:
        problem = "shares batch-norm statistics in training only (inference normalizes with running statistics)"
        raise UsageError(source, "--bn-group", problem)
    if options.bn_group > 1 and spec.architecture is not Architecture.RESNET:  # the one family with batch norm
        raise UsageError(source, "--bn-group", f"{spec.name} has no batch-norm layer to share statistics over")
    if spec.architecture is Architecture.DECODER and spec.decoder is not None:
        from archsim.workloads.expert_parallel import with_expert_parallel
        from archsim.workloads.tensor_parallel import with_tensor_parallel

        seq_len, graph, meta = _decoder_graph(spec, source, mode, batch, precision, seq_len, options, meta)
        trace = finish_trace(replace(graph, meta=meta), mode, batch, seq_len, spec.optimizer, options)
        trace = with_tensor_parallel(trace, _shard_comm(spec.decoder, mode, batch, trace, options))
        return with_expert_parallel(trace, options.expert_parallel)
    if spec.architecture is Architecture.BERT and spec.bert is not None:
        from archsim.workloads.bert import bert_graph

        limit = spec.bert.max_position
        if seq_len is None:
            seq_len = spec.bert.default_seq_len
        elif seq_len > limit:
            raise UsageError(source, "--seq-len", f"{seq_len} exceeds {spec.name}'s max_position of {limit}")
        sequences, tokens = (batch, seq_len) if padding is None else padding.shape(batch, seq_len)
        graph = bert_graph(spec, mode, sequences, tokens, precision)
        if padding is not None:
            meta |= padding.meta()
    else:
        if seq_len is not None:
            raise UsageError(source, "--seq-len", f"{spec.name} is not a sequence model; leave the sequence length out")
        graph = resnet_graph(spec, mode, batch, precision)
    graph = replace(graph, meta=meta)
    trace = finish_trace(graph, mode, batch, seq_len, spec.optimizer, options)
    if options.bn_group == 1:  # the transform's module (and its imports) only for the runs that need it
        return trace
    from archsim.workloads.sync_batchnorm import with_batch_norm_group

    return with_batch_norm_group(trace, options.bn_group)


def _decoder_graph(
    spec: ModelSpec,
    source: str,
    mode: Mode,
    batch: int,
    precision: Precision,
    seq_len: int | None,
    options: TraceOptions,
    meta: dict[str, str],
) -> tuple[int, ForwardGraph, dict[str, str]]:
    """A decoder's sequence (or prompt) length, forward graph (one tensor-parallel shard) and trace meta.

    ``meta["model_flops"]`` is the whole model's :func:`~archsim.workloads.decoder.matrix_flops` for the
    step (what MFU counts).
    """
    from archsim.workloads.decoder import DEFAULT_GEN_LEN, DEFAULT_PROMPT_LEN, decoder_graph, matrix_flops, step_shape

    assert spec.decoder is not None
    gen_len = options.gen_len
    limit = spec.decoder.max_position
    generated = 0
    if mode.is_generation:
        seq_len = DEFAULT_PROMPT_LEN if seq_len is None else seq_len
        if mode is Mode.DECODE:
            generated = DEFAULT_GEN_LEN if gen_len is None else gen_len
            meta["gen_len"] = str(generated)
    elif seq_len is None:
        seq_len = spec.decoder.default_seq_len
    if seq_len + generated > limit:
        what = f"{seq_len} prompt + {generated} generated tokens" if generated else f"{seq_len} tokens"
        flag = "--prompt-len" if mode.is_generation else "--seq-len"
        raise UsageError(source, flag, f"{what} exceed {spec.name}'s max_position of {limit}")
    tp, sp = options.tensor_parallel, options.sequence_parallel
    if sp and tp == 1:
        raise UsageError(
            source, "--sequence-parallel", "splits a tensor-parallel group's tokens: needs --tensor-parallel"
        )
    try:
        graph = decoder_graph(spec, mode, batch, seq_len, precision, generated, tp, sp, options.expert_parallel)
    except ValueError as error:
        flag = "--sequence-parallel" if "sequence" in str(error) else "--tensor-parallel"
        flag = "--expert-parallel" if "experts" in str(error) else flag
        raise UsageError(source, flag, str(error)) from None
    meta["model_flops"] = str(matrix_flops(spec.decoder, mode, batch, *step_shape(mode, seq_len, generated)))
    if mode.is_generation:
        meta["kv_cache_bytes"] = str(graph.kv_cache_bytes)
    return seq_len, graph, meta


def _shard_comm(cfg: DecoderSection, mode: Mode, batch: int, trace: Trace, options: TraceOptions) -> ShardComm:
    """What the tensor-parallel shards of a decoder step exchange (:mod:`archsim.workloads.tensor_parallel`)."""
    from archsim.workloads.tensor_parallel import ShardComm

    assert trace.seq_len is not None
    queries = 1 if mode is Mode.DECODE else trace.seq_len
    tokens, size = batch * queries, trace.precision.nbytes
    return ShardComm(
        options.tensor_parallel,
        options.sequence_parallel,
        size(tokens * cfg.hidden),
        loss_tokens=tokens if mode is Mode.TRAIN else 0,
        logits_bytes=size(batch * cfg.vocab) if mode.is_generation else 0,
    )


def _file_trace(
    trace: Trace, source: str, mode: Mode, batch: int | None, precision: Precision, seq_len: int | None
) -> Trace:
    """A trace read from a file, checked against what was asked (None accepts the file's value)."""
    asked = (("--mode", mode, trace.mode), ("--precision", precision, trace.precision))
    for field, want, have in (*asked, ("--batch", batch, trace.batch), ("--seq-len", seq_len, trace.seq_len)):
        if want is not None and want != have:
            shown = have.value if isinstance(have, Mode | Precision) else have
            wanted = want.value if isinstance(want, Mode | Precision) else want
            raise UsageError(
                source, field, f"the trace file was built for {shown}, not {wanted}; a trace cannot be rebuilt"
            )
    return trace


def build_trace(
    workload: str,
    library: Library,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    options: TraceOptions | None = None,
    *,
    communication: bool = False,
) -> Trace:
    """The trace of one step of ``workload`` on one chip.

    ``workload`` is a model name or alias on the library's search path, a path to a model or trace
    YAML file, or an inline ``gemm:MxNxK`` / ``gemm:BxMxNxK``. ``batch`` is per chip; None means
    the model's ``default_batch`` for ``mode`` (an inline GEMM's batch is 1 and any other value is
    an error: a batched GEMM puts it in the shape). ``seq_len`` is for sequence models only; None
    means the model's ``default_seq_len``, and more than ``max_position`` is an error. ``prefill`` and
    ``decode`` (decoder language models only) take the prompt's length as ``seq_len`` (None: 128) and
    ``options.gen_len`` (decode; None: 128), prompt and generation within ``max_position``. A trace file
    is returned as stored: its mode and precision must equal those asked, and its batch and
    sequence length must equal ``batch`` and ``seq_len`` unless those are None. ``options`` (fusion,
    recomputation; :class:`~archsim.workloads.options.TraceOptions`) apply to every workload that is
    built here, not to a trace file, which is already built. ``communication`` True keeps a Chakra
    ET's communication nodes as communication ops (the trace runs data parallel on a system); False
    refuses an ET that has some.
    Raises UsageError, SpecError or LookupFailed (all :class:`~archsim.errors.ArchsimError`).
    """
    trace, _ = _build(workload, library, mode, batch, precision, seq_len, options, communication=communication)
    return _formatted(trace, precision)


def _formatted(trace: Trace, precision: Precision | str) -> Trace:
    """``trace`` as :func:`_build` gave it, in ``precision``: a block-scaled format's weight products quantized.

    :func:`_build` builds a source at the format's storage precision (fp8); a trace file already in the
    format comes back as it is stored.
    """
    asked = Precision(precision)
    if asked.block_scaling is None or trace.precision is asked:
        return trace
    from archsim.workloads.quantize import quantized_trace

    return quantized_trace(trace, asked)


def _build(
    workload: str,
    library: Library,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    options: TraceOptions | None,
    fixed_batch_checked: bool = True,
    communication: bool = False,
) -> tuple[Trace, bool]:
    """:func:`build_trace`, and whether the source's batch is fixed (a file, an inline product).

    With ``fixed_batch_checked`` False, a trace or Chakra file is returned whatever ``batch`` asks
    (an inline product still refuses any batch but 1: its batch is in its shape). A block-scaled
    precision builds the source at its storage precision (fp8) and :func:`_formatted` quantizes its
    weight products; a trace file must hold the precision itself (it is already built).
    """
    for field, enum in (("--mode", Mode), ("--precision", Precision)):
        value = mode if enum is Mode else precision
        if value not in set(enum):
            choices = ", ".join(e.value for e in enum)
            raise UsageError(workload, field, f"must be one of {choices}, got {value!r}")
    mode, stored = Mode(mode), Precision(precision)
    precision = stored.storage
    if stored.is_generic or stored.block_scaling is not None:
        from archsim.workloads.quantize import GENERIC_PROBLEM, check_mode

        if stored.is_generic:
            raise UsageError(workload, "--precision", GENERIC_PROBLEM)
        check_mode(mode, stored, workload)
    if mode is Mode.GENERATE:  # a prefill and decode steps: two traces, built by archsim.run.generation
        raise UsageError(workload, "--mode", "generate is a prefill then decode steps, not one trace: use archsim run")
    options = options or TraceOptions()
    if options.recomputation is not Recompute.NONE and mode is not Mode.TRAIN:
        raise UsageError(workload, "--recompute", "recomputes activations for the backward pass: training only")
    _positive(batch, "--batch", workload)
    _positive(seq_len, "--seq-len", workload)
    _positive(options.gen_len, "--gen-len", workload)
    if (mode.is_generation or options.gen_len is not None) and any(
        inline(workload) for inline in (is_gemm, is_conv, is_onnx, is_chakra)
    ):
        flag = "--mode" if mode.is_generation else "--gen-len"
        raise UsageError(workload, flag, "prefill and decode generate text: decoder language models only")
    if options.tensor_parallel > 1 and any(inline(workload) for inline in (is_gemm, is_conv, is_onnx, is_chakra)):
        raise UsageError(workload, "--tensor-parallel", "splits decoder language models only (a model description)")
    if options.expert_parallel > 1 and any(inline(workload) for inline in (is_gemm, is_conv, is_onnx, is_chakra)):
        raise UsageError(workload, "--expert-parallel", "shards a mixture of experts (a model description) only")
    if options.bn_group > 1 and any(inline(workload) for inline in (is_gemm, is_conv, is_onnx, is_chakra)):
        raise UsageError(workload, "--bn-group", "shares a model's batch-norm statistics (a model description) only")
    if is_gemm(workload):
        if batch not in (None, 1):
            raise UsageError(
                workload, "--batch", "an inline gemm has no batch of samples; write gemm:BxMxNxK for a batched product"
            )
        if seq_len is not None:
            raise UsageError(workload, "--seq-len", "an inline gemm has no sequence length")
        return finish_trace(gemm_graph(workload, precision), mode, 1, None, None, options), True
    if is_conv(workload):
        if seq_len is not None:
            raise UsageError(workload, "--seq-len", "an inline convolution has no sequence length")
        if batch not in (None, 1):
            raise UsageError(workload, "--batch", "the batch of an inline convolution is its first dimension, N")
        return finish_trace(conv_graph(workload, precision), mode, 1, None, None, options), True
    if is_onnx(workload):
        from archsim.workloads.onnx_import import onnx_trace

        return onnx_trace(workload, mode, batch, precision, seq_len, options=options), False
    if is_chakra(workload):
        from archsim.workloads.chakra import read_chakra

        _built_already(workload, options)
        chakra = read_chakra(workload, precision)
        if chakra.has_comm and not communication:
            comms = sum(op.kind.is_comm for op in chakra.ops)
            problem = f"{comms} communication node(s) need a multi-chip system as the target, data parallel only"
            raise UsageError(workload, "", f"{problem} (archsim run SYSTEM FILE, no --pipeline-stages)")
        checked = batch if fixed_batch_checked else None
        return _file_trace(chakra, workload, mode, checked, precision, seq_len), True
    entry = _description(workload, library)
    if entry.kind == "trace":
        from archsim.workloads.traceio import trace_from_data

        _built_already(entry.source, options)
        trace = trace_from_data(entry.data, entry.source)
        checked = batch if fixed_batch_checked else None
        return _file_trace(trace, entry.source, mode, checked, stored, seq_len), True
    spec: ModelSpec = library.spec(entry)
    padding = unpadded(library, spec, mode, seq_len, options)
    return _model_trace(spec, workload, mode, batch, precision, seq_len, options, padding), False


def _description(workload: str, library: Library) -> Entry:
    """The model or trace description ``workload`` names (a name on the search path or a file)."""
    if workload.endswith((".yaml", ".yml")) or os.sep in workload:
        from archsim.workloads.traceio import read_description

        # read here rather than in Library.find, so that a large trace file is parsed fast, once
        entry = Entry(Path(workload), read_description(Path(workload)))
        if entry.kind not in ("model", "trace"):
            raise SpecError(workload, "kind", f"is {entry.kind!r}, expected model or trace")
        return entry
    return library.find(["model", "trace"], workload)


def model_decoder(workload: str, library: Library) -> tuple[str, DecoderSection] | None:
    """The decoder model ``workload`` names, as its refusals name it, or None where it names none.

    None for an inline product or convolution, an ONNX or Chakra file, a trace, or a model of
    another architecture: what a layout's tensor-parallel check (:func:`archsim.models.placement.place`)
    splits.
    """
    if any(inline(workload) for inline in (is_gemm, is_conv, is_onnx, is_chakra)):
        return None
    entry = _description(workload, library)
    if entry.kind != "model":
        return None
    spec: ModelSpec = library.spec(entry)
    return None if spec.decoder is None else (workload, spec.decoder)


def _built_already(source: str, options: TraceOptions) -> None:
    """A trace file keeps the fusion, recomputation and generation length it was built with."""
    if not options.is_default:
        flag = "--recompute" if options.recomputation is not Recompute.NONE else "--fusion"
        raise UsageError(source, flag, "a trace file is already built; fuse or recompute when building it")
    if options.gen_len is not None:
        raise UsageError(source, "--gen-len", "a trace file is already built for its generation length")
    if options.tensor_parallel > 1:
        raise UsageError(source, "--tensor-parallel", "splits decoder language models only (a model description)")
    if options.expert_parallel > 1:
        raise UsageError(source, "--expert-parallel", "shards a mixture of experts (a model description) only")
    if options.bn_group > 1:
        raise UsageError(source, "--bn-group", "shares a model's batch-norm statistics (a model description) only")


def microbatch_trace(
    workload: str,
    library: Library,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    microbatches: int | None,
    default_microbatches: int,
    options: TraceOptions | None = None,
) -> tuple[Trace, int]:
    """One microbatch's trace and the number of microbatches that make the per-replica ``batch``.

    The semantics are the same for every source: ``batch`` (None: the source's own, as
    :func:`build_trace` gives it) is the samples of one replica per step, split into
    ``microbatches`` of ``batch / microbatches`` samples. A source that can be rebuilt (a model, an
    ONNX file) is built at that size; ``microbatches`` None is the largest divisor of the batch up to
    ``default_microbatches``. A source whose batch is fixed (a trace or Chakra file, an inline
    product) cannot be split: it is one of ``microbatches`` microbatches only when ``batch`` is
    ``microbatches`` times its own, else the whole batch (one microbatch); anything else is refused.
    """
    probe, fixed = _build(workload, library, mode, batch, precision, seq_len, options, fixed_batch_checked=False)
    probe = _formatted(probe, precision)
    if fixed:
        own = probe.batch
        count = microbatches if microbatches is not None else (max(1, batch // own) if batch is not None else 1)
        if count * own != (batch if batch is not None else own):
            as_one = f"--batch {own * count} to take it as one of {count} microbatches"
            if batch is None:
                inline = is_gemm(workload) or is_conv(workload)
                fits = "--microbatches 1" + ("" if inline else f", or {as_one}")
                problem = f"holds a fixed batch of {own} that cannot be split into {count} microbatches: ask {fits}"
            else:
                problem = (
                    f"holds a fixed batch of {own}, not a microbatch of a batch of {batch} in {count}: "
                    f"ask {as_one}, or --batch {own} alone"
                )
            raise UsageError(workload, "--microbatches" if batch is None else "--batch", problem)
        return probe, count
    count = microbatches if microbatches is not None else math.gcd(probe.batch, default_microbatches)
    if probe.batch % count:
        problem = f"the batch of {probe.batch} does not split into {count} microbatches"
        raise UsageError(workload, "--microbatches", problem)
    if count == 1:
        return probe, 1
    return build_trace(workload, library, mode, probe.batch // count, precision, seq_len, options), count
