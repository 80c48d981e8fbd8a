import json

import pytest

from sim_core import PresetError, SimConfig, list_presets, load_preset
from sim_core.presets import DEFAULT_SCENARIO, PRESETS_DIR, read_preset_data

HARDWARE = {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "l4", "l40s", "mi300x"}
MODELS = {"llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-7b", "mixtral-8x7b"}
WORKLOADS = {"chat", "long-document", "code-completion", "offline-batch"}


@pytest.mark.parametrize("name", list_presets())
def test_every_scenario_validates_and_round_trips(name):
    cfg = load_preset(name)
    assert SimConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert cfg.description


def test_required_families_are_present():
    assert HARDWARE <= set(list_presets("hardware"))
    assert MODELS <= set(list_presets("models"))
    assert WORKLOADS <= set(list_presets("workloads"))
    assert DEFAULT_SCENARIO in list_presets()


@pytest.mark.parametrize("name", sorted(HARDWARE))
def test_hardware_cites_a_datasheet(name):
    assert "datasheet" in read_preset_data("hardware", name)["source"].lower() or "spec" in read_preset_data("hardware", name)["source"].lower()


def test_every_engine_preset_has_its_engine_scenario():
    # The engine benchmark, the equivalence tests and the app's preset list reach an engine preset through its
    # `engine-<name>` scenario: one without it would be left out of "every engine preset" silently.
    engines = set(list_presets("engines"))
    scenarios = {name.removeprefix("engine-") for name in list_presets() if name.startswith("engine-")}
    assert engines == scenarios
    for engine in engines:
        assert read_preset_data("scenarios", f"engine-{engine}")["engine"] == engine


def test_unknown_preset_lists_the_available_ones():
    with pytest.raises(PresetError, match="chat-h100-llama8b"):
        load_preset("no-such-preset")


def test_load_by_path_of_a_full_config(tmp_path, default_cfg):
    path = tmp_path / "cfg.json"
    path.write_text(default_cfg.model_dump_json())
    assert load_preset(str(path)) == default_cfg


def test_bad_file_names_the_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"hardware": {"preset": "h100-sxm", "num_gpus": 0}}))
    with pytest.raises(PresetError, match=r"hardware\.num_gpus = 0"):
        load_preset(str(path))


def test_model_presets_match_published_parameter_counts():
    from sim_core.costmodel import ModelShape

    # published_measurements.md §2: totals computed from the shapes
    expected = {"llama-3.1-8b": 8.03e9, "llama-2-7b": 6.74e9, "mixtral-8x7b": 46.7e9, "qwen2.5-7b": 7.62e9,
                "llama-3.1-70b": 70.6e9, "mistral-7b": 7.24e9}
    for name, total in expected.items():
        cfg = SimConfig.model_validate({"model": read_preset_data("models", name) | {"max_model_len": 131072}})
        assert ModelShape.of(cfg).total_params == pytest.approx(total, rel=0.01), name


def test_presets_directory_holds_only_json():
    data_dir = PRESETS_DIR / "calibration" / "data"  # measurements (CSV) and their sources, read by validate
    files = [p for p in PRESETS_DIR.rglob("*") if p.is_file() and data_dir not in p.parents]
    traces = [p for p in files if p.parent.name == "traces"]  # trace samples in their publishers' formats
    assert files and all(p.suffix == ".json" for p in files if p not in traces)
    assert traces and all(p.suffix in (".csv", ".jsonl") for p in traces)


@pytest.mark.parametrize("name", list_presets())
def test_every_scenario_runs_with_invariants_checked(name):
    from sim_core import run_simulation
    from sim_core.sweep import with_value

    cfg = load_preset(name)
    cfg = with_value(cfg, "workload.num_requests", min(cfg.workload.num_requests, 120))
    res = run_simulation(cfg, check_invariants=True)
    s = res.summary
    assert s.stopped_reason is None and s.num_finished == s.num_requests
    assert s.output_tokens_per_s > 0 and s.ttft_p50_s > 0


def test_the_long_document_presets_description_states_its_runs_figures():
    # it said "prefill dominates" over a headline of "prefill 32% of busy time": the prompts dominate the tokens, not
    # the GPU's time (browser review)
    from sim_core import run_simulation

    cfg = load_preset("long-document-a100-llama8b")
    res = run_simulation(cfg)
    ratio = res.requests.prompt_tokens.sum() / res.requests.output_tokens.sum()
    assert f"prompts about {ratio:.0f}x longer than the answers" in cfg.description and round(ratio) == 9
    assert "prefilled in a third of the GPU's busy time" in cfg.description
    assert round(res.summary.prefill_time_fraction * 3) == 1, res.summary.prefill_time_fraction


# What the engine and mechanism presets' descriptions state about their own runs (a browser review found pages that
# did not show what their descriptions promised: a "two waves" demo in one wave, a swap preset that never swaps)
def _run(name: str, **dotted):
    from sim_core import run_simulation
    from sim_core.sweep import with_value

    cfg = load_preset(name)
    for path, value in dotted.items():
        cfg = with_value(cfg, path.replace("__", "."), value)
    return run_simulation(cfg).summary


def test_the_sarathi_serve_preset_says_its_cpu_costs_make_its_tpot_about_4x_vllm_v1s():
    desc = load_preset("engine-sarathi-serve").description
    assert "16 ms a tick and ~1 ms per running sequence" in desc and "about 4x engine-vllm-v1's" in desc
    profile = read_preset_data("calibration", "sarathi-serve-artifact")
    assert profile["tick_overhead_ms"] == 16 and round(profile["per_seq_overhead_us"] / 1000) == 1
    sarathi, v1 = _run("engine-sarathi-serve"), _run("engine-vllm-v1")
    assert 3.5 <= sarathi.tpot_p50_s / v1.tpot_p50_s <= 4.5
    alone = _run("engine-sarathi-serve", calibration="vllm-v1")  # "its TPOT is then vLLM V1's and its ITL p99 lower"
    assert alone.tpot_p50_s == pytest.approx(v1.tpot_p50_s, rel=0.05) and alone.itl_p99_s < v1.itl_p99_s


def test_the_exclusive_preset_says_it_serves_about_0_4_req_s_of_its_2():
    desc = load_preset("engine-exclusive").description
    assert "the lowest TPOT of the engine presets" in desc and "about 0.4 req/s" in desc and "TTFT reaches minutes" in desc
    ex = _run("engine-exclusive")
    others = [_run(n) for n in list_presets() if n.startswith("engine-") and n != "engine-exclusive"]
    assert len(others) == 15 and ex.tpot_p50_s < min(o.tpot_p50_s for o in others)
    assert load_preset("engine-exclusive").workload.arrival.rate_per_s == 2.0
    assert round(ex.num_finished / ex.makespan_s, 1) == 0.4 and ex.ttft_p50_s > 60


def test_the_swap_preset_says_nothing_is_swapped_here_and_the_kv_pressure_preset_swaps():
    assert "nothing is pre-empted or swapped and the run is engine-vllm-v0's" in load_preset("engine-vllm-v0-swap").description
    swap, v0 = _run("engine-vllm-v0-swap"), _run("engine-vllm-v0")
    assert swap.num_preemptions == swap.num_swap_outs == 0 and swap.output_tokens_per_s == v0.output_tokens_per_s
    assert swap.ttft_p99_s == v0.ttft_p99_s and swap.num_ticks == v0.num_ticks
    assert _run("kv-pressure-a100-llama8b", scheduler__preemption="swap").num_swap_outs > 0


def test_the_tensorrt_llm_presets_say_their_capacity_policies_run_one_schedule_here():
    a, b = _run("engine-tensorrt-llm-max-utilization"), _run("engine-tensorrt-llm-no-evict")
    for name in ("engine-tensorrt-llm-max-utilization", "engine-tensorrt-llm-no-evict"):
        cfg = load_preset(name)
        assert "the KV cache is never short, so it runs the same schedule as" in cfg.description
        assert cfg.scheduler.max_num_seqs == 8  # "with the batch of 8"
    assert a.num_preemptions == b.num_preemptions == 0 and a.kv_peak_usage < 0.1
    assert (a.num_ticks, a.ttft_p99_s, a.tpot_p99_s) == (b.num_ticks, b.ttft_p99_s, b.tpot_p99_s)


def test_the_batch_cap_preset_runs_one_batch_and_two_waves_at_a_cap_of_16():
    from sim_core import run_simulation
    from sim_core.sweep import with_value

    cfg = load_preset("mechanism-batch-cap")
    assert cfg.scheduler.max_num_seqs == 256 and "batch cap of 256" in cfg.description
    assert "Max batch size (Scheduler) to 16" in cfg.description
    one = run_simulation(cfg)
    assert int(one.timeline.num_running.max()) == 24
    two = run_simulation(with_value(cfg, "scheduler.max_num_seqs", 16))
    req = two.requests
    assert int(two.timeline.num_running.max()) == 16
    late = req.first_scheduled_s > req.finish_s.min() - 1e-12  # admitted once the first wave finishes
    assert int(late.sum()) == 8


def test_the_prefill_oom_preset_runs_and_names_the_chunk_that_does_not_fit():
    from sim_core import run_simulation
    from sim_core.costmodel import MemoryPlanError
    from sim_core.sweep import with_value

    cfg = load_preset("prefill-oom-l4-llama8b")
    assert cfg.scheduler.max_num_batched_tokens == 256 and "to 32,768" in cfg.description
    assert run_simulation(cfg).summary.num_finished == cfg.workload.num_requests
    with pytest.raises(MemoryPlanError, match="Out of memory"):
        run_simulation(with_value(cfg, "scheduler.max_num_batched_tokens", 32768))


def test_the_multi_turn_preset_says_its_run_is_too_short_for_its_configured_rate():
    cfg = load_preset("multi-turn-chat-h100-llama8b")
    assert "Conversations start at 1.5 per second" in cfg.description and "about 2.4 req/s" in cfg.description
    assert cfg.workload.arrival.rate_per_s / cfg.workload.sessions.turns == 1.5
    assert cfg.workload.num_requests // cfg.workload.sessions.turns == 75
    assert round(_run("multi-turn-chat-h100-llama8b").steady.arrival_rate_per_s, 1) == 2.4


def test_the_smart_preemption_preset_says_where_its_suspensions_show():
    # its page read "Pre-emptions 0" and nothing else said the mechanism acted
    desc = load_preset("engine-article-smart-preemption").description
    assert "not counted among the pre-emptions" in desc
    assert "p99 1.8 s, against 0.42 s with smart pre-emption off" in desc and "TPOT p99 26 against 27 ms" in desc
    on, off = _run("engine-article-smart-preemption"), _run("engine-article-smart-preemption",
                                                            scheduler__smart_preemption__enabled=False)
    assert on.num_preemptions == off.num_preemptions == 0
    assert (round(on.ttft_p99_s, 1), round(off.ttft_p99_s, 2)) == (1.8, 0.42)
    assert (round(on.tpot_p99_s * 1e3), round(off.tpot_p99_s * 1e3)) == (26, 27)


def test_the_priority_mechanism_names_its_classes_as_its_class_table_does():
    # its class table reads "priority 0 / priority 1" (a trace's priority column) beside "batch-class" and "interactive"
    cfg = load_preset("mechanism-priority")
    prio = cfg.workload.trace.priority
    assert list(prio) == [1] * 6 + [0] * 2
    assert "six batch-class requests (priority 1)" in cfg.description and "two interactive ones (priority 0" in cfg.description


def test_the_drafts_of_a_vocabulary_are_read_once_whatever_sizes_links_ask_for():
    # (audit 80: cached per size, every vocab_size a link set, 256 to 1,000,000, kept an entry for good)
    from sim_core import presets

    sizes = {presets.read_preset_data("models", m)["vocab_size"] for m in list_presets("models")}
    for size in (*range(50_001, 50_201), *sizes):
        drafts = presets.models_of_vocabulary(size)
        assert all(presets.read_preset_data("models", m)["vocab_size"] == size for m in drafts)
        assert bool(drafts) == (size in sizes)
    assert not hasattr(presets.models_of_vocabulary, "cache_info")  # (no entry per size asked for)
