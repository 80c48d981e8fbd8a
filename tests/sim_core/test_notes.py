"""Run notes: what the engine would do at start-up that the simulation does not (sim_core/notes.py)."""

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
