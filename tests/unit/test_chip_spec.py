"""Chip descriptions: validation errors name the file and the YAML path of the problem."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from archsim.errors import LookupFailed, SpecError
from archsim.spec.common import Precision
from archsim.spec.library import Library, builtin_roots


def v100_data() -> dict[str, Any]:
    chips = next(r for r in builtin_roots() if r.name == "chips")
    data: dict[str, Any] = yaml.safe_load((chips / "v100-16gb.yaml").read_text())
    return data


def load_mutated(tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> Any:
    data = v100_data()
    mutate(data)
    path = tmp_path / "chip.yaml"
    path.write_text(yaml.safe_dump(data))
    return Library(use_env=False).chip(str(path))


def test_v100_loads(library: Library) -> None:
    chip = library.chip("v100")
    assert chip.name == "v100-16gb"
    assert chip.memory.main.bandwidth == 900e9
    assert chip.macs_per_clock(Precision.FP16) == 80 * 8 * 64
    assert chip.derived_peak(Precision.FP16) == pytest.approx(125e12, rel=0.01)


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [
        (lambda d: d["tensorcore"].update(sm_count=-4), "tensorcore.sm_count", "greater than 0"),
        (lambda d: d["tensorcore"].update(sm_count="80"), "tensorcore.sm_count", "valid integer"),
        (lambda d: d["tensorcore"].pop("l2_cache"), "tensorcore.l2_cache", "missing required field"),
        (lambda d: d["tensorcore"].update(l3_cache="1 MiB"), "tensorcore.l3_cache", "unknown field"),
        (lambda d: d.update(clock="1.53"), "clock", "has no unit"),
        (lambda d: d.update(clock="1.53 parsecs"), "clock", "unknown unit"),
        (lambda d: d.update(clock="0 GHz"), "clock", "positive"),
        (lambda d: d.update(clock=1.53e9), "clock", "expected a quantity string"),
        (lambda d: d["memory"]["main"].update(bandwidth="9 TB/s"), "memory.main.bandwidth", "exceeds 4 stacks"),
        (lambda d: d["memory"]["main"].update(technology="hbm9"), "memory.main.technology", "unknown memory"),
        (lambda d: d.update(family="ipu"), "", "needs exactly the section 'ipu'"),
        (lambda d: d.update(family="gpu"), "family", "unknown family 'gpu' (known: tensorcore, ipu, cube, systolic"),
        (lambda d: d.update(section=d.pop("tensorcore")), "", "section: not a field of a chip file"),
        (lambda d: d["peak"].update(fp16="250 TFLOPS"), "", "peak.fp16: published 250.0"),
        (lambda d: d.update(schema_version=2), "schema_version", "unsupported version 2"),
        (lambda d: d.update(tdp="unpublished"), "tdp", "not a quantity"),  # only "not published" says so
        (
            lambda d: (d.update(tdp="not published"), d["sources"].pop("tdp")),
            "",
            "tdp: 'not published' needs a source",
        ),
        (lambda d: d.update(default_precision="fp6"), "default_precision", "should be"),
        (lambda d: d.update(default_precision="fp8"), "", "default_precision fp8 has no peak entry"),
        (lambda d: d["peak"].update(fp8="250 TFLOPS"), "", "peak.fp8: no unit of this chip runs fp8"),
        (lambda d: d["tensorcore"].pop("mma_shape"), "tensorcore", "describe the tensor cores together"),
    ],
)
def test_invalid_chip_names_file_and_field(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], field: str, fragment: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_mutated(tmp_path, mutate)
    message = info.value.line()
    assert message.startswith(str(tmp_path / "chip.yaml"))
    assert info.value.field == field
    assert fragment in message


def test_an_ipu_without_in_processor_memory_is_refused(tmp_path: Path) -> None:
    # the fuzz test's find: without it the IPU model failed an assertion with a traceback
    chips = next(r for r in builtin_roots() if r.name == "chips")
    data = yaml.safe_load((chips / "gc2.yaml").read_text())
    del data["memory"]["onchip"]
    path = tmp_path / "chip.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        Library(use_env=False).chip(str(path))
    assert info.value.line().startswith(str(path))
    assert "memory.onchip: an IPU needs its In-Processor-Memory" in info.value.line()


def test_a_tensor_core_sm_that_holds_no_thread_block_is_refused(tmp_path: Path) -> None:
    # the fuzz test's find: max_threads_per_sm 1 loaded, then failed the model's assertion with a traceback
    from archsim import simulate

    chip = load_mutated(tmp_path, lambda d: d["tensorcore"].update(max_threads_per_sm=1))
    assert chip.section.max_threads_per_sm == 1  # type: ignore[attr-defined]
    with pytest.raises(SpecError) as info:
        simulate(str(tmp_path / "chip.yaml"), "gemm:256x256x256")
    assert info.value.field == "tensorcore"
    assert "no thread-block tile fits one SM" in info.value.line()
    assert "\n" not in info.value.line()


def test_unknown_chip_name(library: Library) -> None:
    with pytest.raises(LookupFailed, match="unknown chip"):
        library.chip("v999")


def test_user_folder_shadows_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = v100_data()
    data["clock"] = "1.38 GHz"
    data["peak"] = {"fp16": "113 TFLOPS"}
    (tmp_path / "slow-v100.yaml").write_text(yaml.safe_dump(data))
    assert Library([tmp_path], use_env=False).chip("v100").clock == 1.38e9
    monkeypatch.setenv("ARCHSIM_PATH", str(tmp_path))
    assert Library().chip("v100").clock == 1.38e9
    assert Library(use_env=False).chip("v100").clock == 1.53e9


def test_search_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(LookupFailed, match="not a folder"):
        Library([tmp_path / "nope"])
