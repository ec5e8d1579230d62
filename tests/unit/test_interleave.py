"""The interleaved 1F1B schedule: Megatron-LM's block order, a smaller bubble, its refusals."""

from __future__ import annotations

import pytest

from archsim import simulate
from archsim.engine.schedules import interleaved_order
from archsim.spec.library import Library
from archsim.workloads.microbatches import BlockKind
from tests.cli import run_cli

F, B = BlockKind.FORWARD, BlockKind.BACKWARD


def test_megatron_order_on_two_chips_two_chunks() -> None:
    # chip 0 of P = 2 with V = 2 chunks (virtual stages 0 and 2), 4 microbatches: warm-up 2 (P-1) + (V-1) P = 4
    order = interleaved_order(0, 2, 2, 4, True)
    assert order[:6] == [(F, 0, 0), (F, 0, 1), (F, 2, 0), (F, 2, 1), (F, 0, 2), (B, 2, 0)]
    assert order[-1] == (B, 0, 3)


@pytest.mark.parametrize(("chips", "chunks", "microbatches"), [(2, 2, 4), (4, 3, 8), (8, 2, 16)])
def test_every_chip_runs_each_of_its_blocks_once(chips: int, chunks: int, microbatches: int) -> None:
    for chip in range(chips):
        order = interleaved_order(chip, chips, chunks, microbatches, True)
        mine = {chip + c * chips for c in range(chunks)}
        expected = {(kind, k, mb) for kind in (F, B) for k in mine for mb in range(microbatches)}
        assert len(order) == len(expected) and set(order) == expected
        # a chunk's backward of a microbatch never comes before its forward
        for kind, k, mb in order:
            if kind is B:
                assert order.index((F, k, mb)) < order.index((B, k, mb))


def test_interleaving_shrinks_the_bubble(library: Library) -> None:
    def run(chunks: int) -> tuple[float, float]:
        result = simulate(
            "dgx-a100", "gpt3-1.3b", "train", 8, seq_len=256, pipeline_stages=4, interleave=chunks, library=library
        )
        assert result.interleave == chunks
        return result.bubble_fraction, result.step_time_s

    (plain, plain_s), (two, two_s) = run(1), run(2)
    assert two < plain and two_s < plain_s


def test_interleaving_is_refused_where_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (("--interleave", "2"), "give --pipeline-stages P"),
        (("--pipeline-stages", "4", "--interleave", "2", "--schedule", "gpipe"), "1f1b pipeline"),
        (("--pipeline-stages", "4", "--interleave", "2", "--batch", "6", "--microbatches", "6"), "(4 or 8)"),
    ]
    for extra, what in cases:
        code, out, err = run_cli(capsys, "run", "dgx-a100", "gpt3-1.3b", "--mode", "train", *extra)
        assert code == 2 and out == "" and err.count("\n") == 1 and what in err, err
