"""User cost models: op-kind functions, entry points, the README example, and checks on every cost."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path

import pytest

from archsim import simulate
from archsim.cli import main
from archsim.errors import LimitError, PluginError
from archsim.models import plugins, register_cost_model, register_op_cost, unregister_op_cost
from archsim.models.base import Bound, CostModel, FrameworkDispatch, OpCost, Unit
from archsim.spec.registry import installed_entry_points
from archsim.workloads.trace import Op, OpKind, Phase

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(autouse=True)
def clean_registries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with no user registrations and no entry points loaded."""
    import archsim.models as models
    from archsim.spec import registry

    monkeypatch.setattr(plugins, "_OP_COSTS", {})
    monkeypatch.setattr(registry, "_FAMILIES", registry.families())
    monkeypatch.setattr(models, "_EXPLICIT", set())
    plugins.entry_point_plugins.cache_clear()
    yield
    plugins.entry_point_plugins.cache_clear()
    registry.installed_entry_points.cache_clear()


def times(result: object, kind: str) -> list[float]:
    return [layer.end_s - layer.start_s for layer in result.layers if layer.kind == kind]  # type: ignore[attr-defined]


def doubled(op: Op, model: CostModel) -> OpCost:
    cost = model.cost(op)
    return replace(cost, time_s=2 * cost.time_s)


def test_op_kind_function_replaces_the_cost_of_that_kind_only() -> None:
    before = simulate("v100", "bert-base", batch=2)
    register_op_cost("softmax", doubled)
    after = simulate("v100", "bert-base", batch=2)
    assert times(after, "softmax") == pytest.approx([2 * t for t in times(before, "softmax")])
    # durations are end - start of ops that now start later: equal up to that subtraction's rounding
    assert times(after, "layernorm") == pytest.approx(times(before, "layernorm"), rel=1e-12)
    unregister_op_cost("softmax")
    assert simulate("v100", "bert-base", batch=2).step_time_s == before.step_time_s


def test_family_specific_function_wins_and_none_keeps_the_built_in() -> None:
    calls: list[str] = []

    def gpu_only(op: Op, model: CostModel) -> OpCost | None:
        calls.append(model.chip.name)
        return None  # keep the family's cost

    gpu_before = simulate("v100", "gemm:512x512x512")
    tpu_before = simulate("tpu-v3", "gemm:512x512x512")
    register_op_cost(OpKind.MATMUL, doubled)
    register_op_cost("matmul", gpu_only, family="tensorcore")
    gpu_after = simulate("v100", "gemm:512x512x512")
    tpu_after = simulate("tpu-v3", "gemm:512x512x512")
    assert calls == ["v100-16gb"]
    assert times(gpu_after, "matmul") == times(gpu_before, "matmul")
    assert times(tpu_after, "matmul") == pytest.approx([2 * t for t in times(tpu_before, "matmul")])


def test_register_cost_model_replaces_a_family() -> None:
    from archsim.spec.registry import family_definition

    built_in = family_definition("systolic").model

    def factory(chip, efficiency, precision, footprint):  # type: ignore[no-untyped-def]
        model = built_in(chip, efficiency, precision, footprint)
        model.cost = lambda op, base=model.cost: doubled(op, type("M", (), {"cost": staticmethod(base)})())
        return model

    before = simulate("tpu-v3", "gemm:512x512x512")
    register_cost_model("systolic", factory)
    after = simulate("tpu-v3", "gemm:512x512x512")
    assert after.layers[0].end_s == pytest.approx(2 * before.layers[0].end_s)


@pytest.mark.parametrize(
    ("function", "fragment"),
    [
        (lambda op, model: 1.0, "returned float, expected an OpCost or None"),
        (lambda op, model: replace(model.cost(op), time_s=float("nan")), "time_s is nan s"),
        (lambda op, model: replace(model.cost(op), time_s=-1.0), "time_s is -1.0 s"),
        (lambda op, model: replace(model.cost(op), memory_s=float("inf")), "memory_s is inf s"),
        (lambda op, model: replace(model.cost(op), dram_bytes=-5), "dram_bytes is -5"),
        (lambda op, model: replace(model.cost(op), bound="fast"), "bound and unit must be"),
        (lambda op, model: 1 / 0, "raised ZeroDivisionError: division by zero"),
    ],
)
def test_bad_user_costs_are_one_line(capsys: pytest.CaptureFixture[str], function: object, fragment: str) -> None:
    register_op_cost("matmul", function)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match=re.escape(fragment)) as info:
        simulate("v100", "gemm:128x128x128")
    assert "op gemm" in info.value.line()
    assert main(["run", "v100", "gemm:128x128x128"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


def test_bad_registrations() -> None:
    with pytest.raises(PluginError, match="'fft' is not one of"):
        register_op_cost("fft", doubled)
    with pytest.raises(PluginError, match="'quantum' is not one of"):
        register_op_cost("matmul", doubled, family="quantum")


def test_out_of_range_costs() -> None:
    def huge(op: Op, model: CostModel) -> OpCost:
        return replace(model.cost(op), time_s=1e300)

    register_op_cost("matmul", huge, family="tensorcore")
    with pytest.raises(PluginError, match=r"time_s is 1e\+300 s, outside \[0, 1e\+20\] s"):
        simulate("v100", "gemm:128x128x128")
    # the same record from a built-in model is a LimitError naming the chip
    with pytest.raises(LimitError, match=r"^chip: op gemm: time_s is inf s"):
        plugins.check_cost(replace(plugins_cost(), time_s=float("inf")), "chip", op_of("gemm"), None)


def plugins_cost() -> OpCost:
    from archsim.models.base import Bound, Unit

    return OpCost(1.0, 1.0, 1.0, 0.0, 10, 0.5, Bound.COMPUTE, Unit.MATRIX)


def op_of(name: str) -> Op:
    from archsim.workloads.trace import Phase

    return Op(name, OpKind.MATMUL, Phase.FORWARD, 1, (), ())


def install_entry_points(root: Path, monkeypatch: pytest.MonkeyPatch, lines: str, module: str) -> None:
    """A fake installed distribution (dist-info with entry_points.txt) and its module on sys.path."""
    info = root / "my_models-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-models\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[archsim.cost_models]\n{lines}")
    (root / "my_models.py").write_text(module)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "my_models", raising=False)
    installed_entry_points.cache_clear()  # a newly installed distribution
    plugins.entry_point_plugins.cache_clear()


MODULE = """
from dataclasses import fields, replace

def slow_softmax(op, model):
    cost = model.cost(op)
    return replace(cost, time_s=3 * cost.time_s)

def slow_matmul(op, model):
    cost = model.cost(op)
    return replace(cost, time_s=5 * cost.time_s)
"""


def test_entry_points_are_used_and_python_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = simulate("v100", "bert-base", batch=2)
    tpu_before = simulate("tpu-v3", "gemm:512x512x512")
    install_entry_points(
        tmp_path, monkeypatch, "softmax = my_models:slow_softmax\ntensorcore.matmul = my_models:slow_matmul\n", MODULE
    )
    after = simulate("v100", "bert-base", batch=2)
    assert times(after, "softmax") == pytest.approx([3 * t for t in times(before, "softmax")])
    assert times(after, "matmul") == pytest.approx([5 * t for t in times(before, "matmul")])
    assert simulate("tpu-v3", "gemm:512x512x512").step_time_s == tpu_before.step_time_s  # matmul: GPUs only
    register_op_cost("softmax", doubled)  # Python wins over the entry point
    again = simulate("v100", "bert-base", batch=2)
    assert times(again, "softmax") == pytest.approx([2 * t for t in times(before, "softmax")])


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ("fft = my_models:slow_softmax\n", "op kind: 'fft' is not one of"),
        ("gpu.softmax = my_models:slow_softmax\n", "family: 'gpu' is not one of"),
        ("softmax = my_models:absent\n", "cannot load: AttributeError"),
        ("softmax = not_a_module:x\n", "cannot load: ModuleNotFoundError"),
    ],
)
def test_broken_entry_points_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], lines: str, fragment: str
) -> None:
    install_entry_points(tmp_path, monkeypatch, lines, MODULE)
    assert main(["run", "v100", "gemm:64x64x64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("archsim: error: entry point ") and err.count("\n") == 1
    assert fragment in err


def readme_block(heading: str) -> str:
    """The first ```python block after ``heading`` in the README."""
    text = README.read_text()
    section = text[text.index(heading) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```\n", start)]


def test_readme_cost_model_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    code = readme_block("## Your own cost models")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    before, after = namespace["before"], namespace["after"]
    assert times(after, "softmax") == pytest.approx([4 * t for t in times(before, "softmax")])
    assert re.fullmatch(r"step \d+\.\d{3} ms -> \d+\.\d{3} ms\n", capsys.readouterr().out)


def test_readme_strategies_example_runs_as_written() -> None:
    code = readme_block("## Property-testing your models")
    namespace: dict[str, object] = {"__name__": "readme_example"}
    # "<README>", not "README.md": hypothesis reads the source of the test by file name and line,
    # and the block's line numbers are not the file's, so it would tokenize unrelated README text
    exec(compile(code, "<README>", "exec"), namespace)  # noqa: S102 - the README's own example
    namespace["test_never_below_roofline"]()  # type: ignore[operator]


def every_field_set() -> OpCost:
    """An OpCost whose fields all hold values of their own, none its default."""
    values: dict[str, object] = {"bound": Bound.MEMORY, "unit": Unit.VECTOR}
    for i, f in enumerate(fields(OpCost)):
        values.setdefault(f.name, {"int": 1000 + i, "float": 0.25 + i}.get(str(f.type)))
    return OpCost(**values)  # type: ignore[arg-type]


def test_framework_dispatch_adds_its_time_and_keeps_every_other_field() -> None:
    # FrameworkDispatch.cost spells OpCost's fields out for speed: a field added and left out fails here
    base = every_field_set()

    class Fixed:
        chip, precision, separate_units = None, None, True

        def cost(self, op: Op) -> OpCost:
            return base

    priced = FrameworkDispatch(Fixed(), 2.0).cost(None)  # type: ignore[arg-type]
    assert priced == replace(base, time_s=base.time_s + 2.0, overhead_s=base.overhead_s + 2.0, bound=Bound.OVERHEAD)


@pytest.mark.parametrize(
    ("change", "accepted"),
    [({}, True), ({"time_s": 0}, True), ({"memory_s": True}, False), ({"compute_s": float("nan")}, False),
     ({"overhead_s": float("inf")}, False), ({"roofline_s": -0.0}, True), ({"communication_s": 1e20}, True),
     ({"time_s": 1.5e20}, False), ({"dram_bytes": 0}, True), ({"dram_bytes": -1}, False),
     ({"dram_bytes": 2.0}, False), ({"dram_bytes": False}, False), ({"bound": "memory"}, False),
     ({"unit": Unit.MATRIX}, True)],
)  # fmt: skip
def test_the_quick_check_accepts_only_what_the_full_check_accepts(change: dict[str, object], accepted: bool) -> None:
    # check_cost first tries a quick test (plugins._plainly_valid), then the full one: the quick one
    # never passes a record the full one refuses, and check_cost refuses exactly the bad records
    cost = replace(every_field_set(), **change)  # type: ignore[arg-type]
    op = Op("probe", OpKind.MATMUL, Phase.FORWARD, 1, (), ())
    if accepted:
        plugins.check_cost(cost, "chip", op, None)
    else:
        assert not plugins._plainly_valid(cost)
        with pytest.raises(LimitError, match=r"^chip: op probe: "):
            plugins.check_cost(cost, "chip", op, None)
    assert plugins._plainly_valid(cost) == (accepted and type(cost.time_s) is float)
