"""Which file format a workload name names, from the name alone: an ONNX model or a Chakra trace.

Every run asks this of its workload (:func:`archsim.workloads.build_trace` tries the inline products,
then these formats, then the description library), and answering it must not load the readers: the
ONNX importer and the Chakra decoder, with their own imports, are loaded only for such a file. The
inline products (``gemm:``, ``conv:``) are recognised by :func:`~archsim.workloads.gemm.is_gemm` and
:func:`~archsim.workloads.conv.is_conv`, whose modules every run loads anyway. Suffixes are compared
without regard to case.
"""

from __future__ import annotations

__all__ = ["CHAKRA_SUFFIXES", "ONNX_SUFFIX", "is_chakra", "is_onnx"]

ONNX_SUFFIX = ".onnx"
"""Workload names ending with this are ONNX files (:mod:`archsim.workloads.onnx_import`)."""
CHAKRA_SUFFIXES = (".et", ".chakra")
"""Workload names ending with one of these are Chakra execution traces (:mod:`archsim.workloads.chakra`)."""


def is_onnx(workload: str) -> bool:
    """True when ``workload`` names an ONNX file (``*.onnx``)."""
    return workload.lower().endswith(ONNX_SUFFIX)


def is_chakra(workload: str) -> bool:
    """True when ``workload`` names a Chakra execution trace (``*.et``, ``*.chakra``)."""
    return workload.lower().endswith(CHAKRA_SUFFIXES)
