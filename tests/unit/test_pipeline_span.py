"""A pipeline without tensor parallelism that spans members of the second tier (8 stages over two IPU-M2000s)."""

from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.models.placement import place
from archsim.run.target import fabric_for
from archsim.spec.library import Library, builtin_roots


def test_eight_stages_over_two_machines_place_eight_replicas_and_cross_the_rack_links_once() -> None:
    library = Library(builtin_roots())
    fabric = fabric_for(library.system("ipu-pod64"), library, 1, "ipu-pod64")
    placement = place(fabric, 8)
    assert placement.data_parallel == 8
    crossings = [placement.send_tier(stage) for stage in range(7)]
    assert crossings == [0, 0, 0, 1, 0, 0, 0]  # only stage 3 -> 4 leaves its machine
    # the replicas' all-reduce: 8 members of the rack tier at a stride of 2 machines, none on a machine
    assert [(g.tier.name, g.group, g.stride) for g in placement.tiers] == [("machine", 1, 4), ("rack", 8, 2)]


def test_a_pipeline_over_two_machines_runs_and_its_activations_use_the_rack_links(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "ipu-pod64", "bert-large", "--mode", "train", "--batch", "16", "--seq-len", "128", "--json"]
    assert main([*argv, "--pipeline-stages", "8", "--streaming-memory", "optimizer-state"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["pipeline_stages"], record["data_parallel"], record["global_batch"]) == (8, 8, 128)
    rack = [link for link in record["links"] if link["tier"] == "rack"]
    assert rack and all(0 < link["utilization"] <= 1 for link in rack)
    assert 0 < record["bubble_fraction"] < 1


@pytest.mark.parametrize(
    ("stages", "problem"),
    [
        (
            "6",
            "6 stages must divide the chips joined by its first tier (machine, 4 chips) of ipu-pod16, or be a multiple",
        ),
        ("12", "12 stages of 1 chips do not tile the 16 chips of ipu-pod16"),
    ],
)
def test_other_stage_counts_are_refused_in_one_line(
    stages: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "ipu-pod16", "resnet50", "--mode", "train", "--pipeline-stages", stages]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and problem in err[0]
