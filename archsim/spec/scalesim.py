"""SCALE-Sim's input files: its INI configuration and its topology CSVs (read and write).

A configuration (``*.cfg``) is an INI file with ``[general] run_name``, ``[architecture_presets]``
(``ArrayHeight``, ``ArrayWidth``, ``IfmapSramSzkB``, ``FilterSramSzkB``, ``OfmapSramSzkB``,
``Dataflow``, ``Bandwidth``), ``[run_presets] InterfaceBandwidth`` (``CALC`` or ``USER``) and optional
``[layout]`` and ``[sparsity]`` sections. Keys are case-insensitive, ``:`` and ``=`` both separate a
key from its value. SRAM sizes are in kB of 1024 bytes and SCALE-Sim's word is one byte, so an SRAM
of ``S`` kB holds ``1024 S`` words. In ``USER`` mode SCALE-Sim 3.0 fills the ifmap and filter SRAMs at
``[layout] IfmapSRAMBankBandwidth`` and ``FilterSRAMBankBandwidth`` words per cycle (default 10) and
drains the ofmap SRAM at the first ``Bandwidth`` value; archsim reads them the same way. Offsets,
request buffers and bank layouts only shape SCALE-Sim's address traces and are ignored; sparsity and
custom layouts are not supported and are errors.

A topology is a CSV whose header picks the format: ``Layer name, IFMAP Height, IFMAP Width, Filter
Height, Filter Width, Channels, Num Filter, Strides`` (convolutions) or ``Layer, M, N, K`` (matrix
products; SCALE-Sim needs ``-i gemm`` for these, archsim reads the header). Rows end in a comma, as
SCALE-Sim's parser drops the last field of every row. A layer whose name contains ``DP`` is a
depthwise convolution and, as in SCALE-Sim, becomes one single-channel layer per channel. Output
sizes follow SCALE-Sim: ``E = ceil((H - F + S) / S)`` with no padding.
"""

from __future__ import annotations

import configparser
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from archsim.errors import LimitError, SpecError
from archsim.limits import MAX_DIM, check_trace_ops, read_text_file
from archsim.outfile import write_file
from archsim.spec.chip import Dataflow

WORD_BYTES = 1
"""Bytes per word in SCALE-Sim (its ``word_size``)."""
DEFAULT_PORT_WORDS_PER_CYCLE = 10
"""SCALE-Sim's default ifmap/filter SRAM fill bandwidth in ``USER`` mode, words per cycle."""
CONV_HEADER = (
    "Layer name",
    "IFMAP Height",
    "IFMAP Width",
    "Filter Height",
    "Filter Width",
    "Channels",
    "Num Filter",
    "Strides",
)
GEMM_HEADER = ("Layer", "M", "N", "K")


@dataclass(frozen=True, slots=True)
class ScaleSimConfig:
    """The parts of a SCALE-Sim configuration that decide cycles and traffic."""

    run_name: str
    array_rows: int
    array_cols: int
    ifmap_sram_bytes: int
    filter_sram_bytes: int
    ofmap_sram_bytes: int
    dataflow: Dataflow
    user_bandwidth: tuple[float, float, float] | None
    """``(ifmap, filter, ofmap)`` port bandwidths in words per cycle (``USER``), or None (``CALC``:
    SCALE-Sim assumes whatever bandwidth never stalls and reports what was used)."""

    @property
    def ifmap_sram_words(self) -> int:
        """Ifmap SRAM size in words."""
        return self.ifmap_sram_bytes // WORD_BYTES

    @property
    def filter_sram_words(self) -> int:
        """Filter SRAM size in words."""
        return self.filter_sram_bytes // WORD_BYTES

    @property
    def ofmap_sram_words(self) -> int:
        """Ofmap SRAM size in words."""
        return self.ofmap_sram_bytes // WORD_BYTES


@dataclass(frozen=True, slots=True)
class TopologyLayer:
    """One layer of a topology, in SCALE-Sim's convolution terms (a GEMM row is a 1 x K filter)."""

    name: str
    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    num_filters: int
    stride: int

    @property
    def ofmap_h(self) -> int:
        """Output height, SCALE-Sim's ``ceil((H - F + S) / S)``."""
        return math.ceil((self.ifmap_h - self.filter_h + self.stride) / self.stride)

    @property
    def ofmap_w(self) -> int:
        """Output width, SCALE-Sim's ``ceil((W - F + S) / S)``."""
        return math.ceil((self.ifmap_w - self.filter_w + self.stride) / self.stride)

    @property
    def m(self) -> int:
        """Output pixels (rows of the matrix product)."""
        return self.ofmap_h * self.ofmap_w

    @property
    def n(self) -> int:
        """Filters (columns of the matrix product)."""
        return self.num_filters

    @property
    def k(self) -> int:
        """Window size ``filter_h * filter_w * channels`` (the product's inner dimension)."""
        return self.filter_h * self.filter_w * self.channels

    @staticmethod
    def gemm(name: str, m: int, n: int, k: int) -> TopologyLayer:
        """The layer SCALE-Sim makes of a GEMM row ``M, N, K``."""
        return TopologyLayer(name, m, k, 1, k, 1, n, 1)


def _int(value: str, source: str, field: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise SpecError(source, field, f"expected a positive integer, got {value.strip()[:40]!r}") from None
    if number < 1:
        raise SpecError(source, field, f"expected a positive integer, got {number}")
    if number > MAX_DIM:
        raise LimitError(source, field, f"{number} exceeds the limit of {MAX_DIM}")
    return number


def read_config(path: str | Path) -> ScaleSimConfig:
    """Parse a SCALE-Sim ``.cfg`` file; a missing or bad key is a SpecError naming it."""
    source = str(path)
    parser = configparser.ConfigParser()
    text = read_text_file(Path(path), source)
    try:
        parser.read_string(text, source)
    except configparser.Error as err:
        raise SpecError(source, "", f"not an INI file: {err.message.splitlines()[0]}") from None

    def get(section: str, key: str, default: str | None = None) -> str:
        if parser.has_option(section, key):
            try:
                return parser.get(section, key).strip()
            except configparser.InterpolationError as err:  # SCALE-Sim's parser interpolates %(name)s too
                raise SpecError(source, f"{section}.{key}", _interpolation_problem(err)) from None
        if default is None:
            raise SpecError(source, f"{section}.{key}", "missing")
        return default

    arch = "architecture_presets"
    dataflow_text = get(arch, "Dataflow").lower()
    try:
        dataflow = Dataflow(dataflow_text)
    except ValueError:
        raise SpecError(source, f"{arch}.Dataflow", f"expected os, ws or is, got {dataflow_text!r}") from None
    mode = get("run_presets", "InterfaceBandwidth")
    if mode not in ("CALC", "USER"):
        raise SpecError(source, "run_presets.InterfaceBandwidth", f"expected CALC or USER, got {mode!r}")
    if get("sparsity", "SparsitySupport", "false").lower() == "true":
        raise SpecError(source, "sparsity.SparsitySupport", "sparse mode is not supported by archsim")
    for key in ("IfmapCustomLayout", "FilterCustomLayout"):
        if get("layout", key, "false").lower() == "true":
            raise SpecError(source, f"layout.{key}", "custom SRAM layouts are not supported by archsim")
    bandwidth: tuple[float, float, float] | None = None
    if mode == "USER":
        ofmap = _int(get(arch, "Bandwidth").split(",")[0], source, f"{arch}.Bandwidth")
        ifmap = _int(get("layout", "IfmapSRAMBankBandwidth", "10"), source, "layout.IfmapSRAMBankBandwidth")
        weights = _int(get("layout", "FilterSRAMBankBandwidth", "10"), source, "layout.FilterSRAMBankBandwidth")
        bandwidth = (float(ifmap), float(weights), float(ofmap))
    return ScaleSimConfig(
        run_name=get("general", "run_name", Path(path).stem),
        array_rows=_int(get(arch, "ArrayHeight"), source, f"{arch}.ArrayHeight"),
        array_cols=_int(get(arch, "ArrayWidth"), source, f"{arch}.ArrayWidth"),
        ifmap_sram_bytes=1024 * _int(get(arch, "IfmapSramSzkB"), source, f"{arch}.IfmapSramSzkB"),
        filter_sram_bytes=1024 * _int(get(arch, "FilterSramSzkB"), source, f"{arch}.FilterSramSzkB"),
        ofmap_sram_bytes=1024 * _int(get(arch, "OfmapSramSzkB"), source, f"{arch}.OfmapSramSzkB"),
        dataflow=dataflow,
        user_bandwidth=bandwidth,
    )


def _interpolation_problem(err: configparser.InterpolationError) -> str:
    """What is wrong with a value's ``%`` interpolation, in one line."""
    if isinstance(err, configparser.InterpolationMissingOptionError):
        problem = f"%({err.reference})s names no key of its section"
    elif isinstance(err, configparser.InterpolationDepthError):
        problem = "%(...)s references nest too deep"
    else:
        problem = err.message.splitlines()[0]
    return f"{problem} (a percent sign is written %%)"


def _fields(line: str) -> list[str]:
    fields = [f.strip() for f in line.strip().split(",")]
    while fields and not fields[-1]:
        fields.pop()
    return fields


def read_topology(path: str | Path) -> tuple[list[TopologyLayer], bool]:
    """Parse a topology CSV; returns its layers and whether it is in the ``M, N, K`` GEMM format."""
    source = str(path)
    lines = read_text_file(Path(path), source).splitlines()
    check_trace_ops(len(lines) - 1, source, "layers")
    rows = [(number, _fields(line)) for number, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise SpecError(source, "", "empty topology")
    header = [h.lower() for h in rows[0][1]]
    gemm = header[1:4] == ["m", "n", "k"]
    if not gemm and len(header) < len(CONV_HEADER):
        raise SpecError(source, "line 1", "header is neither the convolution nor the M,N,K format")
    layers: list[TopologyLayer] = []
    for number, fields in rows[1:]:
        where = f"line {number}"
        width = 4 if gemm else 8
        if len(fields) < width:
            raise SpecError(source, where, f"expected {width} fields, got {len(fields)}")
        if len(fields) > width and fields[width] not in ("", "1:1"):
            raise SpecError(source, where, f"sparsity ratio {fields[width]!r} is not supported")
        name = fields[0]
        values = [_int(v, source, f"{where}: {h}") for v, h in zip(fields[1:width], rows[0][1][1:width], strict=True)]
        if gemm:
            layers.append(TopologyLayer.gemm(name, *values))
            continue
        layer = TopologyLayer(name, *values[:7])
        if layer.filter_h > layer.ifmap_h or layer.filter_w > layer.ifmap_w:
            raise SpecError(source, where, "filter larger than the input")
        if "DP" in name:
            # SCALE-Sim runs a depthwise layer as one single-channel layer per channel
            height, width, filter_h, filter_w, channels, filters, stride = values
            check_trace_ops(len(layers) + channels, source, "layers")
            layers += [
                TopologyLayer(f"{name}Channel_{c}", height, width, filter_h, filter_w, 1, filters, stride)
                for c in range(channels)
            ]
        else:
            layers.append(layer)
    if not layers:
        raise SpecError(source, "", "no layers")
    return layers, gemm


def write_topology(layers: Iterable[TopologyLayer], path: str | Path, gemm: bool = False) -> None:
    """Write ``layers`` as a SCALE-Sim topology CSV (every row ends in a comma, as SCALE-Sim expects).

    In the GEMM format a layer must have SCALE-Sim's GEMM shape (``TopologyLayer.gemm``).
    """
    lines = [", ".join(GEMM_HEADER if gemm else CONV_HEADER) + ","]
    for layer in layers:
        if gemm:
            lines.append(f"{layer.name}, {layer.m}, {layer.n}, {layer.k},")
        else:
            lines.append(
                f"{layer.name}, {layer.ifmap_h}, {layer.ifmap_w}, {layer.filter_h}, {layer.filter_w}, "
                f"{layer.channels}, {layer.num_filters}, {layer.stride},"
            )
    write_file(path, "\n".join(lines) + "\n")
