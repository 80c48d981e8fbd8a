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
