"""A SCALE-Sim configuration and topology run through archsim's array model: records, JSON, table.

:func:`run_scalesim` reads the two files (:mod:`archsim.spec.scalesim`) and prices every layer on the
one array the configuration describes (:func:`archsim.models.systolic_layer.simulate_layer`). Under
the default ``scalesim`` model each layer's ``cycles`` is SCALE-Sim 3.0's "Total Cycles" for the
same files in ``CALC`` mode; see :mod:`archsim.models.systolic_layer` for what differs elsewhere.
Cycles are of the array's clock, sizes in words (SCALE-Sim's word is one byte), bandwidths in words
per cycle, efficiencies and utilizations fractions in [0, 1] (SCALE-Sim prints percentages).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.models.systolic_layer import LayerStats, StallModel, matrix_layer, simulate_layer
from archsim.models.systolic_map import ArrayConfig
from archsim.spec.scalesim import ScaleSimConfig, read_config, read_topology


@dataclass(frozen=True)
class ScaleSimRun:
    """Every layer of a topology on the array of a SCALE-Sim configuration."""

    config_path: str
    topology_path: str
    config: ScaleSimConfig
    gemm_format: bool
    model: StallModel
    layers: tuple[LayerStats, ...]

    @property
    def total_cycles(self) -> int:
        """Sum of the layers' cycles."""
        return sum(layer.cycles for layer in self.layers)

    @property
    def exact(self) -> bool:
        """True when every layer's cycles are SCALE-Sim 3.0's own numbers."""
        return all(layer.exact for layer in self.layers)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; layers in topology order."""
        c = self.config
        bandwidth: Any = "CALC"
        if c.user_bandwidth is not None:
            bandwidth = dict(zip(("ifmap", "filter", "ofmap"), c.user_bandwidth, strict=True))
        return {
            "config": self.config_path,
            "topology": self.topology_path,
            "run_name": c.run_name,
            "format": "gemm" if self.gemm_format else "conv",
            "model": self.model.value,
            "array": {"rows": c.array_rows, "cols": c.array_cols, "dataflow": c.dataflow.value},
            "sram_words": {"ifmap": c.ifmap_sram_words, "filter": c.filter_sram_words, "ofmap": c.ofmap_sram_words},
            "interface_bandwidth_words_per_cycle": bandwidth,
            "exact": self.exact,
            "total_cycles": self.total_cycles,
            "stall_cycles": sum(layer.stall_cycles for layer in self.layers),
            "layers": [layer.to_dict() for layer in self.layers],
        }

    def to_json(self) -> str:
        """The run as one JSON object."""
        return json.dumps(self.to_dict(), indent=1)

    def table(self) -> list[str]:
        """A per-layer table in SCALE-Sim's terms (utilizations in percent)."""
        c = self.config
        mode = "CALC" if c.user_bandwidth is None else "USER " + "/".join(f"{b:g}" for b in c.user_bandwidth)
        lines = [
            f"{c.run_name}: {c.array_rows}x{c.array_cols} {c.dataflow.value}, SRAM "
            f"{c.ifmap_sram_bytes // 1024}/{c.filter_sram_bytes // 1024}/{c.ofmap_sram_bytes // 1024} kB, "
            f"interface {mode}, model {self.model.value}{'' if self.exact else ' (not SCALE-Sim exact)'}",
            f"{'layer':<24} {'cycles':>12} {'stalls':>9} {'util %':>7} {'map %':>7} {'DRAM rd':>12} {'DRAM wr':>11}",
        ]
        for s in self.layers:
            reads = s.dram_ifmap_reads + s.dram_filter_reads + s.dram_ofmap_reads
            lines.append(
                f"{s.name[:24]:<24} {s.cycles:>12} {s.stall_cycles:>9} {100 * s.overall_utilization:>7.2f} "
                f"{100 * s.mapping_efficiency:>7.2f} {reads:>12} {s.dram_ofmap_writes:>11}"
            )
        lines.append(f"{'total':<24} {self.total_cycles:>12}")
        return lines


def run_scalesim(
    config_path: str | Path, topology_path: str | Path, model: StallModel = StallModel.SCALESIM
) -> ScaleSimRun:
    """Run a SCALE-Sim configuration and topology; bad files raise SpecError naming file and field."""
    config = read_config(config_path)
    topology, gemm = read_topology(topology_path)
    array = ArrayConfig(
        config.array_rows,
        config.array_cols,
        config.dataflow,
        config.ifmap_sram_words,
        config.filter_sram_words,
        config.ofmap_sram_words,
    )
    layers = tuple(
        simulate_layer(layer.name, matrix_layer(layer), array, config.user_bandwidth, model) for layer in topology
    )
    return ScaleSimRun(str(config_path), str(topology_path), config, gemm, model, layers)
