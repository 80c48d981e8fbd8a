"""Run notes: what the engine would do at start-up that the simulation does not (sim_core/notes.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.notes import VLLM_V0_LONG_CONTEXT_TOKENS, VLLM_V0_MIN_BATCHED_TOKENS, budget_notes
from sim_core.presets import list_presets, load_preset
from sim_core.sweep import with_value


def _v0(max_model_len: int, budget: int, chunked: bool = False):
    cfg = with_value(load_preset("engine-vllm-v0"), "model.max_model_len", max_model_len)
    cfg = with_value(cfg, "scheduler.enable_chunked_prefill", chunked)
    return with_value(cfg, "scheduler.max_num_batched_tokens", budget)


def test_vllm_v0_without_chunked_prefill_needs_a_budget_of_one_whole_context():
    # vLLM V0 SchedulerConfig._verify_args: "max_num_batched_tokens (8192) is smaller than max_model_len (16384)"
    (note,) = budget_notes(_v0(16384, 8192))
    assert "would refuse to start" in note and "(8,192)" in note and "(16,384)" in note
    assert "its default here is 16,384" in note
    assert budget_notes(_v0(16384, 16384)) == []  # the default: starts
    assert budget_notes(_v0(16384, 8192, chunked=True)) == []  # a chunked prompt spans steps


def test_above_32k_context_the_note_names_chunked_prefill_as_vllm_v0s_default():
    (note,) = budget_notes(_v0(131072, 16384))
    assert f"over {VLLM_V0_LONG_CONTEXT_TOKENS:,} tokens" in note and "its default here" not in note


def test_only_engines_fitted_as_vllm_v0_get_the_note():
    # the article's schedulers share vLLM's memory rule but are not vLLM; vLLM V1 always chunks
    cfg = _v0(16384, 8192)
    assert budget_notes(with_value(cfg, "calibration.profile", "default")) == []


def test_no_shipped_scenario_is_a_configuration_vllm_v0_refuses():
    names = list_presets("scenarios")
    assert "engine-vllm-v0" in names and "kv-pressure-a100-llama8b" in names
    for name in names:
        assert budget_notes(load_preset(name)) == [], name


@settings(max_examples=60, deadline=None)
@given(max_len=st.integers(64, 200_000), budget=st.integers(64, 200_000), chunked=st.booleans())
def test_the_note_appears_exactly_when_vllm_v0_would_refuse(max_len, budget, chunked):
    cfg = load_preset("engine-vllm-v0")
    cfg = cfg.model_copy(update={
        "model": cfg.model.model_copy(update={"max_model_len": max_len}),
        "scheduler": cfg.scheduler.model_copy(update={"max_num_batched_tokens": budget, "enable_chunked_prefill": chunked}),
    })  # (no validation: the rule alone, over sizes the config's other checks would refuse first)
    notes = budget_notes(cfg)
    assert bool(notes) == (not chunked and budget < max_len)
    if notes and max_len <= VLLM_V0_LONG_CONTEXT_TOKENS:
        assert f"{max(max_len, VLLM_V0_MIN_BATCHED_TOKENS):,}" in notes[0]


def _traced(rows: int, num_requests: int | None):
    from sim_core.presets import config_from_dict

    data = load_preset("chat-h100-llama8b").model_dump(mode="json")
    data["workload"]["trace"] = {"arrival_s": [i * 0.5 for i in range(rows)], "prompt_tokens": [64] * rows,
                                 "output_tokens": [8] * rows}  # fmt: skip
    if num_requests is None:
        del data["workload"]["num_requests"]  # (a config file that leaves it out: the default, 200)
    else:
        data["workload"]["num_requests"] = num_requests
    return config_from_dict(data)


def test_a_trace_longer_than_num_requests_says_that_only_its_first_rows_are_replayed():
    # an inline trace of 100,000 rows without num_requests simulated the default 200 rows without a word
    from sim_core import run_simulation
    from sim_core.notes import run_notes, trace_notes

    note = ("the trace has 300 rows and workload.num_requests = 200 replays the first 200 of them; set "
            "workload.num_requests (up to 300) to replay more.")  # fmt: skip
    cfg = _traced(300, None)
    assert trace_notes(cfg) == [note]
    assert note in run_notes(run_simulation(cfg))  # (what the CLI prints as NOTE lines and the Simulate page shows)
    assert trace_notes(_traced(300, 300)) == [] and trace_notes(_traced(50, 20)) != []


def test_no_shipped_scenario_replays_part_of_its_trace():
    # (the note changes no result: every shipped trace scenario replays its whole trace)
    assert not [name for name in list_presets() if trace_notes_of(name)]


def trace_notes_of(name: str) -> list[str]:
    from sim_core.notes import trace_notes

    return trace_notes(load_preset(name))


def test_a_swap_engine_that_pre_empts_nothing_is_told_so():
    # engine-vllm-v0-swap showed "0 swaps" beside a description of swapping: its KV never ran short
    from sim_core import run_simulation
    from sim_core.notes import run_notes, swap_notes
    from tests.conftest import make_config

    quiet = run_simulation(make_config("engine-vllm-v0-swap", workload__num_requests=40))
    assert quiet.summary.num_preemptions == 0
    assert any("no request was pre-empted" in n for n in run_notes(quiet))
    pressed = run_simulation(make_config("kv-pressure-a100-llama8b", scheduler__preemption="swap", workload__num_requests=120))
    assert pressed.summary.num_preemptions > 0 and swap_notes(pressed) == []
    assert swap_notes(run_simulation(make_config("engine-vllm-v0", workload__num_requests=40))) == []  # (recompute)


@pytest.mark.parametrize(("changes", "setting"), [
    ({}, "a higher workload.arrival.rate_per_s"),
    ({"workload__arrival__process": "offline"}, "a higher workload.num_requests (all queued at once)"),
    ({"workload__arrival__process": "closed_loop"}, "a higher workload.arrival.num_clients"),
])
def test_the_swap_note_names_the_setting_that_loads_this_workload(changes, setting):
    from sim_core import run_simulation
    from sim_core.notes import swap_notes
    from tests.conftest import make_config

    (note,) = swap_notes(run_simulation(make_config("engine-vllm-v0-swap", workload__num_requests=40, **changes)))
    assert f"makes it act: {setting}, or a lower kv_cache.gpu_memory_utilization." in note, note


def test_a_replayed_traces_swap_note_does_not_name_the_rate_it_ignores():
    # the DistServe pair replays a trace: the link notice said workload.arrival.rate_per_s is not used while the swap
    # note named it as the way to add KV pressure; a rate sweep time-scales a trace (`sweep.with_rate`)
    from sim_core import run_simulation
    from sim_core.notes import run_notes

    notes = [n for n in run_notes(run_simulation(load_preset("cluster-distserve-opt13b-3xa100-p2d1"))) if "nothing was swapped" in n]
    assert notes and all("rate_per_s" not in n and "time-scales its arrivals" in n for n in notes), notes
