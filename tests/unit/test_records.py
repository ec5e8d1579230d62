"""Result records: what a batch is per, and the unit throughput is counted in, taken from the run itself."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace

import pytest

from archsim import simulate
from archsim.api import resolve_target, run_trace
from archsim.results.records import LayerRecord, RunResult, to_json
from archsim.results.report import run_summary
from archsim.results.table import summary_lines
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.time_to_train import simulate_training
from archsim.workloads import build_trace
from archsim.workloads.trace import Mode


def test_batch_says_what_it_is_per(library: Library) -> None:
    chip = simulate("v100", "resnet50", batch=8, library=library)
    assert chip.batch_scope() == "8 per chip"
    data_parallel = simulate("dgx1", "resnet50", mode="train", batch=4, library=library)
    assert data_parallel.batch_scope() == "4 per chip, global 32 over 8 replicas"
    pipelined = simulate(
        "ipu-m2000", "bert-base", mode="train", batch=8, pipeline_stages=4, microbatches=4, library=library
    )
    assert pipelined.batch_scope() == "8 per replica (4 pipeline chips) in 4 microbatches"
    assert summary_lines(pipelined)[0].startswith("bert-base train on ipu-m2000 x4: batch 8 per replica (4 pipeline")
    batch = next(cell for field, _, cell in run_summary(pipelined) if field == "batch")
    assert (batch.text, batch.value) == ("8 per replica (4 pipeline chips) in 4 microbatches", 8)


def test_throughput_unit_comes_from_the_workload(library: Library) -> None:
    assert simulate("v100", "resnet50", batch=2, library=library).throughput_unit == "samples/s"
    bert = simulate("v100", "bert-base", batch=2, library=library)
    assert bert.throughput_unit == "sequences/s"
    assert json.loads(to_json(bert))["throughput_unit"] == "sequences/s"
    assert "sequences/s" in summary_lines(bert)[2]
    system = simulate("dgx1", "bert-base", mode="train", batch=2, library=library)
    assert system.throughput_unit == "sequences/s"


def test_a_trace_that_names_its_sample_is_counted_in_it(library: Library) -> None:
    # a decode step produces one token per sequence: a trace says so in meta, and throughput follows
    trace = build_trace("bert-base", library, Mode.INFER, 4, Precision.FP16, 128)
    decode = replace(trace, meta={**trace.meta, "sample": "token"})
    result = run_trace(resolve_target("v100", library), decode, library)
    assert result.throughput_unit == "tokens/s"
    assert "tokens/s" in summary_lines(result)[2]
    throughput = next(cell for field, _, cell in run_summary(result) if field == "throughput")
    assert throughput.text.endswith("tokens/s")


def test_every_shipped_chip_has_tdp_and_die_area_or_says_not_published(library: Library) -> None:
    for entry in library.entries("chip"):
        chip = library.chip(entry.name)
        for figure in ("tdp", "die_area"):
            assert getattr(chip, figure) is not None, f"{entry.name}: {figure} missing"
            assert figure in chip.sources, f"{entry.name}: {figure} has no source"
        for figure in chip.not_published():
            assert chip.sources[figure].startswith("not published: "), f"{entry.name}: {figure}"


def test_not_published_is_shown_as_such(library: Library) -> None:
    ipu = simulate("gc200", "resnet50", batch=4, library=library)
    assert ipu.chip_not_published == ("tdp",)
    assert ipu.normalized.per_watt_tdp is None
    assert ipu.normalized.per_watt == ipu.throughput / ipu.power_w  # modelled power needs no TDP
    assert "not published per W of TDP" in summary_lines(ipu)[2]
    per_watt = next(cell for field, _, cell in run_summary(ipu) if field == "throughput_per_watt_tdp")
    assert (per_watt.text, per_watt.value) == ("not published", None)
    assert json.loads(to_json(ipu))["chip_not_published"] == ["tdp"]
    gpu = simulate("v100", "resnet50", batch=4, library=library)
    assert gpu.chip_not_published == ()
    assert gpu.normalized.per_watt is not None and gpu.normalized.per_watt_tdp is not None


def test_to_dict_and_to_json_are_asdict_and_json_dumps(library: Library, multichip_run: RunResult) -> None:
    # a chip, a system with links and collectives, a pipeline, a decoder step, a fed run that also trains
    results = [
        simulate("v100", "resnet50", mode="train", batch=8, library=library),
        multichip_run,
        simulate("ipu-m2000", "bert-base", mode="train", batch=8, pipeline_stages=4, library=library),
        simulate("a100", "gpt2", mode="decode", batch=2, library=library),
        simulate_training("dgx1", "resnet50", batch=64, input_decode="host", library=library),
    ]
    assert multichip_run.links and multichip_run.collectives and results[-1].time_to_train is not None
    for result in results:
        assert list(result.to_dict().items()) == list(asdict(result).items())
        assert to_json(result) == json.dumps(asdict(result), indent=1, allow_nan=False)


def test_to_json_is_json_dumps_for_any_layer_text_and_number(multichip_run: RunResult) -> None:
    # to_json writes the layers with the C encoder and indents them itself: names that hold its
    # separators, quotes, escapes, newlines, non-ASCII text or a "layers" line of their own, and
    # numbers at the ends of the float range, must come out as json.dumps writes them
    names = ['a, "b": 1', 'q"uote', "back\\slash", "new\nline", "tab\t", "\u00e9t\u00e9 \u4e2d", '\n "layers": []', ""]
    numbers = [0.0, -0.0, 5e-324, 1e16, 1.7976931348623157e308, 0.1 + 0.2, 123456789012345678901234567890]
    layers = tuple(
        replace(layer, name=names[i % len(names)], start_s=numbers[i % len(numbers)], cycles=i * 10**12)
        for i, layer in enumerate(multichip_run.layers)
    )
    result = replace(multichip_run, layers=layers, workload='wl, "x"\n "layers": []')
    assert to_json(result) == json.dumps(asdict(result), indent=1, allow_nan=False)
    assert to_json(replace(result, layers=())) == json.dumps(asdict(replace(result, layers=())), indent=1)
    with pytest.raises(ValueError, match="JSON compliant"):
        to_json(replace(result, layers=(replace(layers[0], end_s=float("nan")),)))


def test_with_energy_is_replace_and_keeps_every_field() -> None:
    # each field a value of its own, none its default: a field added to LayerRecord and left out of
    # with_energy (which spells the fields out for speed) fails here
    kinds = [(f.name, str(f.type)) for f in fields(LayerRecord)]
    values = {name: {"str": name, "int": 100 + i, "float": 0.5 + i}[kind] for i, (name, kind) in enumerate(kinds)}
    layer = LayerRecord(**values)  # type: ignore[arg-type]
    assert layer.with_energy(7.25) == replace(layer, energy_j=7.25)
    assert asdict(layer.with_energy(7.25)) == {**values, "energy_j": 7.25}
    stretched = layer.with_energy(7.25, 0.5)  # a throttle's clock_scale moves the times, nothing else
    assert stretched == replace(layer, energy_j=7.25, start_s=layer.start_s / 0.5, end_s=layer.end_s / 0.5)
