"""Limits on the size of what archsim reads and simulates, in one place.

Every input is checked against these before it can cost unbounded time or memory, or push a number
past what a 64-bit float holds; a value beyond a limit is refused with a one-line
:class:`~archsim.errors.LimitError` (or :class:`~archsim.errors.SpecError` inside a description)
naming the file, the field and the limit, and the CLI exits with status 2. The limits are far above
anything a real chip, network or trace needs, so that they only ever stop mistakes and hostile input:

=========================  ===================  ==========================================================
limit                      value                why
=========================  ===================  ==========================================================
``MAX_FILE_BYTES``         64 MiB               largest file read at all (checked before reading)
``MAX_MODEL_FILE_BYTES``   2 GiB                largest ONNX or Chakra file read (protobuf's own limit on one
                                                message); weights are dropped as soon as it is parsed
``MAX_YAML_BYTES``         4 MiB                largest text parsed as general YAML (PyYAML builds about
                                                0.6 MB/s); a bigger trace file must be in the one-op-per-line
                                                form :func:`~archsim.workloads.write_trace` writes
``MAX_YAML_DEPTH``         64                   nesting of YAML collections (libyaml's composer recurses in C)
``MAX_YAML_NODES``         200,000              values in a YAML document once aliases are expanded (PyYAML
                                                builds about 100,000 a second: a 3.5 MB list of 1.7 million
                                                numbers took 15 to 49 s)
``MAX_CHAKRA_BYTES``       256 MiB              a gzip-compressed Chakra file decompressed (read in chunks,
                                                refused as soon as it passes: a gzip bomb stops there)
``MAX_COUNT``              2^53                 any count in a description (exact in a float)
``MAX_INT``                2^63 - 1             any byte or FLOP count in a trace file (a signed 64-bit int)
``MAX_DIM``                2^31 - 1             one dimension of a matrix product or convolution (cuBLAS's
                                                ``int`` arguments)
``MAX_ARGUMENT``           2^31 - 1             ``--batch``, ``--seq-len`` and their API arguments
``MAX_TRACE_OPS``          100,000              ops in one trace (a 1000-layer BERT trains in about 40,000), and
                                                layers of a SCALE-Sim topology (depthwise layers expanded)
``MAX_MODEL_LAYERS``       1,000                ResNet blocks or BERT layers of a model description
``MAX_OP_SECONDS``         1e20 s               time a cost model may give one op (3e12 years)
``MAX_SCHEDULED_FOLDS``    10,000,000           folds of one layer scheduled one by one (SCALE-Sim ``USER``
                                                bandwidth mode keeps 32 bytes per fold)
``MAX_SYSTEM_CHIPS``       65,536               chips in one system description (a TPU v4 pod has 4,096)
``MAX_NODES``              4,096                copies of a system a run or a collective scales out to
``MAX_GRAPH_SEARCH_STEPS`` 1,000,000            steps of the ring search in a ``graph`` level of a system
``MAX_LIBRARY_FILES``      10,000               YAML files indexed under one search-path folder
``MAX_LIBRARY_ENTRIES``    200,000              directory entries walked under one search-path folder
=========================  ===================  ==========================================================

Quantities have ranges per dimension (:data:`QUANTITY_RANGES`, in SI base units), enforced by
:func:`archsim.units.parse`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from archsim.errors import LimitError, LookupFailed, SpecError, UsageError

MAX_FILE_BYTES = 64 * 2**20
"""Largest description, trace or baseline file archsim reads (64 MiB)."""
MAX_MODEL_FILE_BYTES = 2 * 2**30
"""Largest ONNX model or Chakra execution trace read (2 GiB, protobuf's limit on one message)."""
MAX_YAML_BYTES = 4 * 2**20
"""Largest text parsed as general YAML (4 MiB); trace op lines in JSON form are exempt."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of YAML sequences and mappings."""
MAX_YAML_NODES = 200_000
"""Most values (scalars and collections) in one YAML document, aliases expanded."""
MAX_CHAKRA_BYTES = 256 * 2**20
"""Largest decompressed size of a gzip-compressed Chakra file (256 MiB: 100,000 nodes take ~50 MB)."""
MAX_COUNT = 2**53
"""Largest count in a description: every integer up to it is exact in a float64."""
MAX_INT = 2**63 - 1
"""Largest byte or FLOP count in a trace file."""
MAX_DIM = 2**31 - 1
"""Largest dimension of a matrix product or a convolution."""
MAX_ARGUMENT = 2**31 - 1
"""Largest batch or sequence length asked for on the command line or through the API."""
MAX_TRACE_OPS = 100_000
"""Most ops in one trace (replay takes about 0.2 ms and 3 KB per op)."""
MAX_MODEL_LAYERS = 1_000
"""Most ResNet blocks (all stages together) or BERT encoder layers in a model description."""
MAX_OP_SECONDS = 1e20
"""Longest time a cost model may give one op; more means an absurd input, refused."""
MAX_SCHEDULED_FOLDS = 10_000_000
"""Most folds of one layer scheduled one by one (SCALE-Sim ``USER`` bandwidth mode; 32 bytes each)."""
MAX_GRAPH_SEARCH_STEPS = 1_000_000
"""Most steps of the exhaustive search for rings in a ``graph`` level of a system (about 2 s)."""
MAX_SYSTEM_CHIPS = 65_536
"""Most chips in one system description (16 times the largest built-in pod)."""
MAX_NODES = 4096
"""Most copies of a system one run or one collective scales out to: the scale-out tier's rings take
``nodes`` steps, and 4,096 DGX A100s price a 1 MiB and a 1 GiB ring all-reduce in about 11 s."""
MAX_LINKS = 1_024
"""Most parallel links of one member, pair or node port in a system description (a DGX H100 GPU has
18 NVLink ports): each is a resource the engine keeps, so a count beyond this could not be simulated
in bounded time."""
MAX_LIBRARY_FILES = 10_000
"""Most YAML files indexed under one search-path folder."""
MAX_LIBRARY_ENTRIES = 200_000
"""Most directory entries walked under one search-path folder while looking for YAML files."""

QUANTITY_RANGES: dict[str, tuple[float, float, str]] = {
    "bytes": (1.0, 2.0**80, "B"),
    "bandwidth": (1.0, 1e21, "B/s"),
    "frequency": (1.0, 1e15, "Hz"),
    "time": (1e-18, 1e9, "s"),
    "throughput": (1.0, 1e24, "OP/s"),
    "power": (1e-6, 1e12, "W"),
    "area": (1e-9, 1e9, "mm^2"),
    "length": (1e-3, 1e9, "nm"),
    "energy": (1e-18, 1e9, "J"),
    "energy per bit": (1e-18, 1e-6, "J/bit"),
    "power density": (1e-9, 1e3, "W/mm^2"),
    "voltage": (1e-3, 1e3, "V"),
}
"""Accepted range ``(lowest, highest, unit)`` of a quantity by dimension (``Dimension.value``), in the
units :mod:`archsim.units` converts to; zero is accepted where the field allows it. Wide enough for any chip or
system (a wafer-scale die is 46,225 mm^2, a whole supercomputer below 1e21 FLOP/s)."""


def check_count(value: int, limit: int, source: str, field: str) -> None:
    """Raise LimitError when ``value`` exceeds ``limit``."""
    if value > limit:
        raise LimitError(source, field, f"{value} exceeds the limit of {limit}")


def check_nodes(nodes: object) -> None:
    """Refuse ``--nodes`` (``nodes=``) unless it is None or an integer in ``1 .. MAX_NODES``."""
    if nodes is None:
        return
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise UsageError("", "--nodes", f"must be a positive integer, got {nodes!r}")
    if nodes > MAX_NODES:
        raise LimitError("", "--nodes", f"must be at most {MAX_NODES}")


def check_trace_ops(count: int, source: str, what: str = "ops") -> None:
    """Raise LimitError when a trace has more than :data:`MAX_TRACE_OPS` ops (or a topology layers)."""
    if count > MAX_TRACE_OPS:
        raise LimitError(source, what, f"{count} {what}, more than the {MAX_TRACE_OPS} allowed")


def read_text_file(path: Path, source: str, missing: str = "no such file") -> str:
    """The UTF-8 text of a regular file of at most :data:`MAX_FILE_BYTES`; anything else is a SpecError.

    For input files outside the YAML loader (SCALE-Sim configurations and topologies, baselines);
    ``missing`` is the problem stated when the file does not exist.
    """
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(source, "", "is a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise SpecError(source, "", f"file is {info.st_size} bytes, larger than the {MAX_FILE_BYTES} allowed")
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(source, "", missing) from None
    except UnicodeDecodeError:
        raise SpecError(source, "", "not a text file (invalid UTF-8)") from None
    except OSError as err:
        raise SpecError(source, "", f"cannot read: {err.strerror or err}") from None
    except ValueError:
        raise SpecError(source, "", "not a valid file name") from None


def description_files(root: Path) -> list[Path]:
    """Every ``*.yaml`` file under ``root``, sorted, walking at most :data:`MAX_LIBRARY_ENTRIES` entries.

    Raises LimitError (naming ``root``) for a folder too large to be a library of descriptions, such
    as a home directory or ``/`` given by mistake, and LookupFailed for a folder that cannot be read
    (never skipped silently: its descriptions would be missing without a word).
    """
    found: list[Path] = []
    walked = 0

    def unreadable(err: OSError) -> None:
        where = err.filename if err.filename is not None else root
        raise LookupFailed(os.fsdecode(where), "search path", f"cannot read: {err.strerror or err}")

    for folder, dirs, files in os.walk(root, onerror=unreadable, followlinks=True):
        dirs.sort()
        walked += len(dirs) + len(files)
        if walked > MAX_LIBRARY_ENTRIES:
            raise LimitError(
                str(root), "search path", f"more than {MAX_LIBRARY_ENTRIES} entries; expected a folder of descriptions"
            )
        base = Path(folder)  # parsed once per folder, not once per file
        found += [base / name for name in files if name.endswith(".yaml")]
        if len(found) > MAX_LIBRARY_FILES:
            raise LimitError(
                str(root), "search path", f"more than {MAX_LIBRARY_FILES} YAML files; expected a folder of descriptions"
            )
    return sorted(found)
