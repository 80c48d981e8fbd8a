"""schedulers/compose.py: the order of a tick's steps, written once for both executors."""

from __future__ import annotations

import pytest

from sim_core.schedulers import compose
from sim_core.schedulers.phase import TickKind
from tests.conftest import make_config
from tests.sim_core.test_engine import run_fast_and_tick_by_tick
from tests.sim_core.test_equivalence import assert_same_result


def _run(kind, num_decodes=3, budget=100, decode_tokens=1, may_admit=True, has_swapped=False, decode_result=None,
         chunk_tokens=10, admitted=(1, 5)):  # fmt: skip
    """compose_tick with recording steps: (decoding, [(step, budget it was given)])."""
    calls = []

    def run_decodes():
        calls.append(("decodes", None))
        return decode_result or (num_decodes, False, False)

    def run_chunks(b):
        calls.append(("chunks", b))
        return chunk_tokens

    def admit(b):
        calls.append(("admit", b))
        return admitted

    def swap_in():
        calls.append(("swap_in", None))

    decoding = compose.compose_tick(kind, num_decodes, budget, decode_tokens, may_admit, has_swapped, run_decodes,
                                    run_chunks, admit, swap_in)  # fmt: skip
    return decoding, calls


def test_decode_first_takes_decode_tokens_from_the_budget_before_chunks_then_admits():
    decoding, calls = _run(TickKind.DECODE_FIRST, num_decodes=3, budget=100, decode_tokens=2)
    assert decoding
    assert calls == [("decodes", None), ("chunks", 94), ("admit", 84)]


def test_mixed_prefill_runs_decodes_inside_the_budget():
    # (SGLang's mixed chunk: rem_chunk_tokens less the running batch; TensorRT-LLM counts generation tokens against
    # max_num_tokens before the context chunks. Until session 56 they joined outside it: chunks got all 100)
    decoding, calls = _run(TickKind.PREFILL_MIXED, num_decodes=3, budget=100)
    assert decoding and calls == [("decodes", None), ("chunks", 97), ("admit", 87)]


def test_decode_tick_runs_only_the_decodes():
    assert _run(TickKind.DECODE) == (True, [("decodes", None)])
    assert _run(TickKind.DECODE, num_decodes=0) == (False, [])


def test_prefill_tick_falls_back_to_decodes_only_when_nothing_was_prefilled_or_admitted():
    assert _run(TickKind.PREFILL) == (False, [("chunks", 100), ("admit", 90)])
    decoding, calls = _run(TickKind.PREFILL, chunk_tokens=0, admitted=(0, 0))
    assert decoding and calls == [("chunks", 100), ("admit", 100), ("decodes", None)]
    # a static batch may admit with a zero chunk: admitted requests are work, no fallback
    assert _run(TickKind.PREFILL, chunk_tokens=0, admitted=(2, 0)) == (False, [("chunks", 100), ("admit", 100)])
    assert _run(TickKind.PREFILL, num_decodes=0, chunk_tokens=0, admitted=(0, 0))[0] is False


def test_swap_in_goes_before_admission_unless_this_tick_swapped_out():
    assert _run(TickKind.DECODE_FIRST, has_swapped=True)[1] == [("decodes", None), ("chunks", 97), ("swap_in", None)]
    swapped_out = _run(TickKind.DECODE_FIRST, has_swapped=True, decode_result=(2, False, True))[1]
    assert swapped_out == [("decodes", None), ("chunks", 98), ("admit", 88)]


def test_a_preempting_tick_admits_nothing():
    calls = _run(TickKind.DECODE_FIRST, decode_result=(1, True, False))[1]
    assert calls == [("decodes", None), ("chunks", 99)]
    assert _run(TickKind.DECODE_FIRST, may_admit=False)[1] == [("decodes", None), ("chunks", 97)]


@pytest.mark.parametrize("scenario", ["engine-vllm-v1", "engine-vllm-v0", "engine-sglang", "engine-article-time-slice"])
def test_one_edit_changes_both_executors_identically(scenario, monkeypatch):
    """A toy policy written once, by replacing compose_tick (half the token budget for prefill): the
    scalar core (which runs ticks here) and the tick-by-tick scheduler give identical results, and
    they differ from the unpatched policy's, so the edit reached both executors."""
    # a budget that binds under a burst, and whose half still holds the longest prompt (8192 tokens)
    cfg = make_config(scenario, workload__num_requests=60, workload__arrival__rate_per_s=50.0,
                      scheduler__max_num_batched_tokens=16384)  # fmt: skip
    before, _, _ = run_fast_and_tick_by_tick(cfg, monkeypatch)
    original = compose.compose_tick

    def half_budget(kind, num_decodes, budget, *rest):
        return original(kind, num_decodes, budget // 2, *rest)

    monkeypatch.setattr(compose, "compose_tick", half_budget)
    on, off, fast_ticks = run_fast_and_tick_by_tick(cfg, monkeypatch)
    assert fast_ticks > 0  # the scalar core ran ticks under the toy policy
    assert_same_result(on, off)
    assert on.timeline.num_ticks != before.timeline.num_ticks or on.summary.model_dump() != before.summary.model_dump()


@pytest.mark.parametrize("kind", list(TickKind))
def test_without_prefill_work_every_kind_runs_the_decodes_alone(kind):
    """What the scalar core's unrolled all-decode loop relies on: nothing to prefill or admit, and
    every kind of tick runs the decodes (a PREFILL tick through its fallback) and nothing else."""
    decoding, calls = _run(kind, chunk_tokens=0, may_admit=False)
    assert decoding
    assert [step for step, _ in calls if step != "chunks"] == ["decodes"]


def test_decode_first_takes_the_verify_width_of_the_decodes_left_when_given():
    # speculative decoding: the positions each decode verifies depend on how many decodes run (drafts cut to the budget)
    budgets = []

    def chunks(b):
        budgets.append(b)
        return 10

    decoding = compose.compose_tick(TickKind.DECODE_FIRST, 3, 100, 9, True, False, lambda: (2, True, False), chunks,
                                    lambda b: (0, 0), None, lambda left: 50 // left)  # fmt: skip
    assert decoding and budgets == [100 - 2 * 25]  # the 2 decodes left after a pre-emption, 25 positions each
