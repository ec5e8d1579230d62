"""The hyperparameters of the torch decoder modules of :mod:`tests.llm_modules`, and their ``decoder`` YAML.

Kept apart from the modules, without PyTorch: a test file names its configurations (and pytest its
parameters) when it is collected, and only the pytest-xdist worker that runs it imports torch
(:func:`skip_without`).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REQUIRE_TORCH = "ARCHSIM_REQUIRE_TORCH"
"""Set to 1 by CI: the PyTorch tests must run there, and fail where a package they need is missing."""


def skip_without(*packages: str) -> None:
    """Skip the calling test module, at collection, where one of ``packages`` is not installed.

    Nothing is imported here (a worker that runs none of the module's tests never loads PyTorch,
    some 3 s): the tests import what they use. With ``ARCHSIM_REQUIRE_TORCH=1`` nothing is
    skipped, and each test fails on its import instead.
    """
    if os.environ.get(REQUIRE_TORCH) == "1":
        return
    for package in packages:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed (pip install -e '.[test]')", allow_module_level=True)


@dataclass(frozen=True)
class Config:
    """Hyperparameters shared by the torch modules and the ``decoder`` YAML built from them."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 1024
    vocab: int = 512
    max_position: int = 256
    llama: bool = False
    sdpa: bool = False
    experts: int = 0
    top_k: int = 2

    @property
    def head(self) -> int:
        """Size of one attention head."""
        return self.hidden // self.heads


def decoder_yaml(cfg: Config, folder: Path, name: str) -> str:
    """Write ``folder/NAME.yaml``, the built-in ``decoder`` description of ``cfg``; returns ``name``."""
    decoder: dict[str, object] = {
        "layers": cfg.layers, "hidden": cfg.hidden, "heads": cfg.heads, "kv_heads": cfg.kv_heads,
        "ffn": cfg.ffn, "activation": "swiglu" if cfg.llama else "gelu",
        "norm": "rmsnorm" if cfg.llama else "layernorm", "positions": "rotary" if cfg.llama else "learned",
        "bias": not cfg.llama, "dropout": False, "vocab": cfg.vocab, "tied_embeddings": not cfg.llama,
        "max_position": cfg.max_position, "default_seq_len": cfg.max_position,
    }  # fmt: skip
    if cfg.experts:
        decoder["moe"] = {"experts": cfg.experts, "top_k": cfg.top_k, "capacity_factor": None}
    data = {
        "schema_version": 1, "kind": "model", "name": name, "description": "a torch test module",
        "architecture": "decoder", "default_batch": {"train": 1, "infer": 1}, "optimizer": "adam",
        "decoder": decoder, "sources": {"decoder": "tests/llm_modules.py (the torch module it describes)"},
    }  # fmt: skip
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return name
