"""Plain-text rendering of a run for people: a summary and a per-layer table."""

from __future__ import annotations

from archsim.results.records import RunResult
from archsim.units import format_bytes, format_time


def summary_lines(result: RunResult) -> list[str]:
    """The run's headline numbers, one per line."""
    unit = result.throughput_unit
    seq = f", seq_len {result.seq_len}" if result.seq_len is not None else ""
    if result.padding == "packed":
        seq += f" (packed into packs of {result.seq_len} tokens, {result.tokens_per_sequence} real per sequence)"
    elif result.padding is not None:
        seq += f" ({result.tokens_per_sequence} tokens computed per sequence: padding removed)"
    n = result.normalized
    per_watt = f"{n.per_watt:.3g}" if n.per_watt is not None else "n/a"
    per_tdp = f"{n.per_watt_tdp:.3g}" if n.per_watt_tdp is not None else result.missing("tdp")
    throttled = (
        f", clock throttled to {100 * result.clock_scale:.1f}% (voltage {100 * result.voltage_scale:.1f}%) by the TDP"
        if result.clock_scale < 1.0
        else ""
    )
    per_bt = result.missing("transistors")
    if n.per_billion_transistors is not None:
        per_bt = f"{n.per_billion_transistors:.3g}"
    bounds = ", ".join(f"{k} {format_time(v)}" for k, v in result.time_by_bound.items() if v > 0)
    return [
        f"{result.workload} {result.mode} on {result.target} x{result.num_chips}: batch {result.batch_scope()}, "
        f"{result.precision}{seq}" + (f", software {result.software}" if result.software else ""),
        f"step time     {format_time(result.step_time_s)} (ops {format_time(result.ops_time_s)}, "
        f"step overhead {format_time(result.step_overhead_s)})",
        f"throughput    {result.throughput:.1f} {unit} ({n.per_chip:.1f} per chip, {per_watt} per W, "
        f"{per_tdp} per W of TDP, {per_bt} per billion transistors)",
        f"energy        {result.energy_j:.4g} J per step ({result.energy_per_sample_j:.4g} J per sample), "
        f"{result.power_w:.4g} W per chip (peak {result.peak_power_w:.4g} W, static {result.static_power_w:.3g} W)"
        f"{throttled}",
        f"area          {result.area_mm2:.4g} mm^2 per chip ({result.area_source})",
        f"flops         {result.flops / 1e12:.3f} TFLOP per step, utilization {100 * result.utilization:.1f}% of peak",
        f"memory        {format_bytes(result.memory_bytes)} used of {format_bytes(result.memory_capacity_bytes)} "
        f"{result.memory_technology}"
        + (
            f", {format_bytes(result.streaming_memory_bytes)} in streaming memory"
            if result.streaming_memory_bytes
            else ""
        ),
        *memory_split_lines(result),
        f"op time by bound: {bounds}",
        f"error bar     {error_bar(result)}; outside the calibration: {', '.join(result.extrapolation) or 'nothing'}",
        *generation_lines(result),
    ]


def memory_split_lines(result: RunResult) -> list[str]:
    """What one chip holds, by part (``memory_per_chip``; none when the result has no split)."""
    m = result.memory_per_chip
    if m is None:
        return []
    parts = (
        ("weights", m.weights),
        ("gradients", m.gradients),
        ("optimizer state", m.optimizer_state),
        ("activations", m.activations),
        ("KV cache", m.kv_cache),
    )
    split = ", ".join(f"{name} {format_bytes(size)}" for name, size in parts)
    return [f"memory split  {split} (total {format_bytes(m.total)})"]


def error_bar(result: RunResult) -> str:
    """``uncertainty`` as people read it: the cross-validated error of runs like this one."""
    if result.uncertainty is None:
        return "unknown (no calibration row of this family)"
    return f"+/-{100 * result.uncertainty:.1f}% (cross-validated error of the calibration rows like this run)"


def generation_lines(result: RunResult) -> list[str]:
    """Prefill, decode, generate: time to first token or per output token, the KV cache; a decoder's MFU."""
    mfu = [] if result.mfu is None else [f"model flops   {100 * result.mfu:.1f}% MFU (model FLOPs over peak)"]
    if result.ttft_s is None and result.tpot_s is None:
        if result.tokens_per_s is None:
            return mfu
        return [f"tokens        {result.tokens_per_s:.1f} tokens/s", *mfu]
    if result.e2e_s is not None:
        assert result.ttft_s is not None
        assert result.tpot_s is not None
        assert result.output_tokens_per_s is not None
        latency = (
            f"time to first token {format_time(result.ttft_s)}, per output token {format_time(result.tpot_s)} "
            f"(mean of {result.gen_len} decode steps), end to end {format_time(result.e2e_s)} "
            f"(prompt {result.prompt_len}); {result.output_tokens_per_s:,.1f} output tokens/s"
        )
    elif result.ttft_s is not None:
        latency = f"time to first token {format_time(result.ttft_s)} (prompt of {result.prompt_len} tokens)"
    else:
        assert result.tpot_s is not None
        latency = (
            f"time per output token {format_time(result.tpot_s)} (prompt {result.prompt_len}, "
            f"{result.gen_len} generated: one step at the mean context)"
        )
    cache = f"kv cache      {format_bytes(result.kv_cache_bytes)} of the memory used"
    if result.max_batch is not None:
        cache += f"; the largest batch that fits is {result.max_batch}"
    return [f"generation    {latency}", cache, *mfu]


def layer_table(result: RunResult) -> list[str]:
    """One row per op in trace order."""
    name_width = max([len("layer")] + [len(layer.name) for layer in result.layers])
    header = (
        f"{'layer':<{name_width}}  {'kind':<11} {'phase':<10} {'start':>10} {'time':>10} {'GFLOP':>9} {'MB':>9}  bound"
    )
    rows = [header, "-" * len(header)]
    for layer in result.layers:
        rows.append(
            f"{layer.name:<{name_width}}  {layer.kind:<11} {layer.phase:<10} {format_time(layer.start_s):>10} "
            f"{format_time(layer.end_s - layer.start_s):>10} {layer.flops / 1e9:>9.3f} {layer.bytes / 1e6:>9.2f}  "
            f"{layer.bound}"
        )
    return rows
