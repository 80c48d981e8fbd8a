"""The URL codec: every preset round-trips; a tampered link is a named problem, not a crash."""

import base64
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from app.state import (
    CONFIG_SECTIONS, MAX_LINK_CHARS, compare_query, config_from_query, config_to_query, decode_config, encode_config,
)  # fmt: skip
from sim_core import PresetError, list_presets, load_preset
from sim_core.cli import apply_overrides
from sim_core.unused import unused_settings, unused_with_trace
from sim_core.lessons import load_lessons
from sim_core.presets import DEFAULT_SCENARIO
from tests.conftest import make_config, trace_config
from tests.strategies import HOSTILE_VALUES, cases, leaf_paths, to_json


@pytest.mark.parametrize("name", list_presets())
def test_unmodified_preset_gives_a_short_link(name):
    assert config_to_query(load_preset(name), name) == {"preset": name}


@pytest.mark.parametrize("name", list_presets())
def test_modified_config_round_trips_exactly(name):
    cfg = load_preset(name).model_copy(update={"seed": 12345})
    q = config_to_query(cfg, name)
    assert set(q) == {"cfg"} and len(q["cfg"]) < MAX_LINK_CHARS
    back, preset, warning = config_from_query(q)
    assert back == cfg and warning is None and preset is None


def test_a_link_within_a_length_is_the_whole_encoding_and_a_longer_one_is_found_without_it():
    # audit 35: the page compressed an uploaded trace's 15 MB config at level 9 (seconds) to learn it was too long for
    # a link; with a limit, compression stops once its output is too long, and a link that fits is unchanged
    cfg = load_preset("engine-orca").model_copy(update={"seed": 12345})
    full = encode_config(cfg)
    assert encode_config(cfg, len(full)) == full and encode_config(cfg, len(full) - 1) is None
    assert config_to_query(cfg, None, None, MAX_LINK_CHARS) == config_to_query(cfg, None) == {"cfg": full}
    assert config_to_query(cfg, None, None, len("cfg=") + len(full) - 1) is None
    n = 20_000  # arrivals that do not compress to a short link
    big = make_config(workload__trace={"arrival_s": [i * 0.0123456789 + (i * 7919 % 1000) * 1e-7 for i in range(n)],
                                       "prompt_tokens": [1 + i * 31 % 4000 for i in range(n)],
                                       "output_tokens": [1 + i * 17 % 500 for i in range(n)]},
                      workload__num_requests=n)  # fmt: skip
    assert len(config_to_query(big, None)["cfg"]) > MAX_LINK_CHARS
    assert config_to_query(big, None, None, MAX_LINK_CHARS) is None


def test_link_of_a_config_equal_to_a_preset_recovers_its_name():
    cfg = load_preset("engine-orca")
    back, preset, _ = config_from_query({"cfg": encode_config(cfg)})
    assert back == cfg and preset == "engine-orca"


@pytest.mark.parametrize(
    "param,needle",
    [
        ({"cfg": "!!!not-base64!!!"}, "base64"),
        ({"cfg": base64.urlsafe_b64encode(b"plain text").decode()}, "compressed"),
        ({"cfg": base64.urlsafe_b64encode(zlib.compress(b"{oops")).decode()}, "JSON"),
        ({"cfg": base64.urlsafe_b64encode(zlib.compress(b'{"scheduler": {"max_num_seqs": -1}}')).decode()}, "scheduler.max_num_seqs = -1"),
        ({"preset": "no-such-thing"}, "unknown preset"),
    ],
)
def test_bad_link_falls_back_to_default_with_a_named_problem(param, needle):
    cfg, preset, warning = config_from_query(param)
    assert cfg == load_preset(DEFAULT_SCENARIO) and preset == DEFAULT_SCENARIO
    assert needle in warning and "default scenario" in warning


def test_an_unknown_presets_values_apply_to_the_default_scenario_each_checked_and_named():
    # ?preset=default&scheduler.max_num_seqs=0 said only "unknown preset 'default'" and dropped the bad value without a
    # word (a good one too): both are named now, and a good value is kept
    default = load_preset(DEFAULT_SCENARIO)
    cfg, preset, warning = config_from_query({"preset": "default", "scheduler.max_num_seqs": "0"})
    assert cfg == default and preset == DEFAULT_SCENARIO  # (the sidebar names it, not "(modified)")
    assert "unknown preset 'default'" in warning and f"applied to the default scenario {DEFAULT_SCENARIO!r}" in warning
    assert "scheduler.max_num_seqs = 0: out of range; allowed: >= 1 and <= 8192" in warning
    cfg, preset, warning = config_from_query({"preset": "default", "scheduler.max_num_seqs": "64"})
    assert preset is None and cfg.scheduler.max_num_seqs == 64 and cfg.model_copy(update={"scheduler": default.scheduler}) == default
    assert "unknown preset 'default'" in warning and "out of range" not in warning


def test_overrides_without_a_preset_change_the_default_scenario():
    cfg, preset, warning = config_from_query({"scheduler.preemption": "swap"})
    default = load_preset(DEFAULT_SCENARIO)
    assert warning is None and preset is None
    assert cfg == default.model_copy(update={"scheduler": default.scheduler.model_copy(update={"preemption": "swap"})})
    cfg, _, warning = config_from_query({"workload.arrival.rate_per_s": "abc"})
    assert cfg == default and "workload.arrival.rate_per_s = 'abc'" in warning


def test_zip_bomb_is_refused():
    bomb = base64.urlsafe_b64encode(zlib.compress(b"{" + b" " * (50 * 2**20) + b"}", 9)).decode()
    with pytest.raises(PresetError, match="too large"):
        decode_config(bomb)


def test_encoding_is_canonical():
    a = make_config(seed=5)
    b = make_config(seed=5)
    assert encode_config(a) == encode_config(b)


def test_a_few_changes_to_a_preset_give_a_readable_link():
    cfg = make_config("engine-sarathi-serve", scheduler__max_num_batched_tokens=4096, seed=3)
    q = config_to_query(cfg, None, "engine-sarathi-serve")
    assert q == {"preset": "engine-sarathi-serve", "scheduler.max_num_batched_tokens": "4096", "seed": "3"}
    back, preset, warning = config_from_query(q)
    assert back == cfg and preset is None and warning is None


def test_readable_link_with_string_and_bool_values_round_trips():
    cfg = make_config("chat-h100-llama8b", scheduler__prefill_mode="prefill_first", scheduler__mix_decodes=True)
    q = config_to_query(cfg, None, "chat-h100-llama8b")
    assert q["scheduler.prefill_mode"] == "prefill_first" and q["scheduler.mix_decodes"] == "true"
    assert config_from_query(q)[0] == cfg


def test_many_changes_fall_back_to_the_exact_encoding():
    cfg = make_config("chat-h100-llama8b", seed=1, scheduler__max_num_seqs=7, hardware__num_gpus=2,
                      kv_cache__block_size=32, workload__num_requests=99)  # fmt: skip
    assert set(config_to_query(cfg, None, "chat-h100-llama8b")) == {"cfg"}


def test_a_cluster_preset_with_another_router_gives_a_readable_link():
    cfg = make_config("cluster-prefix-4xh100-llama8b", deployment__router="cache_aware")
    q = config_to_query(cfg, None, "cluster-prefix-4xh100-llama8b")
    assert q == {"preset": "cluster-prefix-4xh100-llama8b", "deployment.router": "cache_aware"}
    assert config_from_query(q) == (cfg, None, None)


def test_a_readable_link_can_put_a_single_engine_preset_behind_a_router():
    cfg, preset, warning = config_from_query({"preset": "chat-h100-llama8b", "deployment.replicas": "4",
                                              "deployment.router": "least_outstanding"})  # fmt: skip
    assert warning is None and preset is None
    assert (cfg.deployment.replicas, cfg.deployment.router) == (4, "least_outstanding")
    assert cfg.model_copy(update={"deployment": None}) == load_preset("chat-h100-llama8b")


def test_a_links_section_object_sets_the_fields_it_names_and_keeps_the_presets_others():
    # the same walk as --set (config.set_dotted): the object replaced the preset's whole scheduler section
    cfg, preset, warning = config_from_query({"preset": "chat-4xh100-llama70b", "scheduler": '{"max_num_seqs": 64}'})
    base = load_preset("chat-4xh100-llama70b")
    assert warning is None and cfg.scheduler == base.scheduler.model_copy(update={"max_num_seqs": 64})


@pytest.mark.parametrize("params,needle", [
    ({"scheduler.nope": "1"}, "not a field"),
    ({"scheduler.max_num_seqs": "0"}, "scheduler.max_num_seqs = 0"),
    ({"deployment.replicas": "0"}, "deployment.replicas = 0"),
    ({"deployment.nope": "1"}, "not a field"),
    ({"workload.classes.0.name": "x"}, "not a field of the config ('workload.classes' is one field: set it whole)"),
    ({"scheduler": "5"}, "scheduler = 5"),
    ({"hardware": '{"preset": "nosuch"}'}, "unknown hardware preset 'nosuch'"),
    ({"scheduler.max_num_batched_tokens": "16"}, "scheduler.max_num_batched_tokens = 16: must be >= scheduler.max_num_seqs (256)"),  # a rule of the config
    # the rule names the preset's field, not the link's: the link's value leads ("Invalid link: scheduler.
    # max_num_batched_tokens = 2048: ..." blamed a field the link never set)
    ({"scheduler.max_num_seqs": "4096"}, "Invalid link: scheduler.max_num_seqs = 4096 does not hold with the preset's other "
     "values: scheduler.max_num_batched_tokens = "),
])  # fmt: skip
def test_a_bad_readable_override_is_named_and_dropped_keeping_the_preset_and_the_others(params, needle):
    # one bad value threw away the link's preset and every other value: the default scenario (a Llama-8B on one H100)
    # opened for ?preset=chat-4xh100-llama70b&scheduler.max_num_seqs=0&seed=7
    cfg, preset, warning = config_from_query({"preset": "chat-4xh100-llama70b", "seed": "7", **params})
    assert needle in warning and "with the link's other values" in warning
    assert cfg == load_preset("chat-4xh100-llama70b").model_copy(update={"seed": 7}) and preset is None


def test_a_link_of_only_bad_values_opens_its_preset_unmodified():
    cfg, preset, warning = config_from_query({"preset": "engine-orca", "scheduler.max_num_seqs": "-1"})
    assert cfg == load_preset("engine-orca") and preset == "engine-orca"
    assert "scheduler.max_num_seqs = -1" in warning and "without the link's values" in warning


@cases(150)
@given(name=hs.sampled_from(list_presets()), seed=hs.integers(0, 2**32 - 1), data=hs.data())
def test_a_links_bad_value_is_named_and_its_other_values_kept(name, seed, data):
    preset = load_preset(name)
    paths = [".".join(p) for p in leaf_paths(preset.model_dump(mode="json")) if p and p[0] in CONFIG_SECTIONS and p != ("seed",)]
    path = data.draw(hs.sampled_from(paths))
    text = data.draw(hs.one_of(HOSTILE_VALUES.map(lambda v: v if isinstance(v, str) else to_json(v)),
                               hs.sampled_from(["-1", "0", "1e400", "nan", "[]", "{}", "null", "true"])))  # fmt: skip
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")[:2000]  # as a browser sends it
    assert_a_links_value_is_taken_or_named(name, seed, path, text)


def assert_a_links_value_is_taken_or_named(name: str, seed: int, path: str, text: str) -> None:
    preset = load_preset(name)
    cfg, _, warning = config_from_query({"preset": name, "seed": str(seed), path: text})
    assert cfg.seed == seed  # the link's other value, whatever became of the hostile one
    try:
        taken = apply_overrides(preset, [f"seed={seed}", f"{path}={text}"])
    except PresetError:
        taken = None
    # (a value that config does not read, for a part of the workload its trace replaces (03d6441) or a setting of a
    # mode it does not run, is taken and named)
    unused = " ".join(f"The link's {t}." for t in unused_settings(taken, [path])) if taken is not None else None
    if warning is None or warning == unused:  # taken: the preset with both
        assert cfg == taken
    else:  # refused: named (its field or the rule's), the preset with the good value
        assert path.split(".")[-1] in warning or path in warning, (path, warning)
        assert cfg == preset.model_copy(update={"seed": seed})


def test_a_links_value_that_a_trace_makes_unused_is_taken_and_named():
    # (found by a random run, SIM_HYPOTHESIS_PROFILE=explore: the property above took any warning for a refusal, but
    # since 03d6441 a valid value for a part of the workload a trace replaces is taken with a warning saying it is unused)
    assert_a_links_value_is_taken_or_named("cluster-distserve-opt13b-3xa100-colocated", 0, "workload.prompt_tokens.sigma", "0")


def test_other_page_params_are_not_config_overrides():
    cfg, preset, warning = config_from_query({"preset": "engine-orca", "lesson": "roofline", "sweep": "rate"})
    assert cfg == load_preset("engine-orca") and preset == "engine-orca" and warning is None


@pytest.mark.parametrize("lesson", load_lessons(), ids=lambda x: x.id)
def test_each_lesson_side_has_a_link_that_opens_exactly_that_side(lesson):
    """The Learn page's instructor links: each side's link opens the config that side runs."""
    for step in (0, 1):
        cfg = lesson.config(step)
        opened, _, warning = config_from_query(config_to_query(cfg, None, lesson.scenario))
        assert warning is None and opened == cfg


def test_a_link_can_set_one_field_of_a_pool_the_preset_leaves_out():
    # `deployment.disaggregation.…` on a single-engine preset was "not a field of the config" (only a top-level
    # section was filled in), though `--set` accepts it; a pool's scheduler/hardware start as the top-level ones
    from sim_core.cli import apply_overrides

    sets = {"deployment.disaggregation.prefill.replicas": "2", "deployment.disaggregation.decode.scheduler.max_num_seqs": "64"}
    cfg, _, warning = config_from_query({"preset": "engine-tensorrt-llm-max-utilization", **sets})
    assert warning is None
    assert cfg == apply_overrides(load_preset("engine-tensorrt-llm-max-utilization"), [f"{k}={v}" for k, v in sets.items()])
    assert cfg.deployment.disaggregation.decode.scheduler.name == load_preset("engine-tensorrt-llm-max-utilization").scheduler.name


@cases(50)
@given(gib=hs.floats(0.5, 4096), path=hs.sampled_from(["hardware", "deployment.disaggregation.decode.hardware"]))
def test_a_readable_link_saved_before_the_gib_rename_opens_as_it_did(gib, path):
    # readable links (Nov 29) predate memory_gb -> memory_gib (Nov 30): ?preset=…&hardware.memory_gb=40 said "not a field
    # of the config" and opened the default scenario; config files and ?cfg= links were migrated, these were not
    name = "cluster-distserve-opt13b-3xa100-p2d1"
    old, _, warning = config_from_query({"preset": name, f"{path}.memory_gb": repr(gib)})
    new, _, _ = config_from_query({"preset": name, f"{path}.memory_gib": repr(gib)})
    assert warning is None and old == new
    assert old == apply_overrides(load_preset(name), [f"{path}.memory_gb={gib!r}"])  # and `--set` the same


def test_a_link_of_thousands_of_bad_fields_gets_a_short_warning_and_keeps_its_good_value():
    params = {"preset": "engine-orca", **{f"hardware.x{i}": "1" for i in range(3000)}, "seed": "5"}
    cfg, _, warning = config_from_query(params)
    assert cfg == load_preset("engine-orca").model_copy(update={"seed": 5})
    assert "'hardware.x0'" in warning and "(and 2,995 more)" in warning and len(warning) < 2000


@cases(60)
@given(path=hs.sampled_from(["hardware.name", "model.name", "workload.prompt_tokens", "scheduler.max_num_seqs"]),
       text=hs.one_of(hs.text(max_size=30).map(lambda t: "[" + t), hs.text(max_size=30).map(lambda t: "{" + t),
                      hs.sampled_from(['{"a": 1, "a": 2}', "[x](y)", "{a}", " [1,", '"[x](y)"', "[1, 2]"])))  # fmt: skip
def test_a_link_reads_a_value_as_set_does(path, text):
    # (one rule, inputs.value_from_text: a link took "[x](y)" as a GPU's name and '{"a": 1, "a": 2}' as text where
    # --set refused both, naming the JSON error)
    preset = load_preset("chat-h100-llama8b")
    cfg, _, warning = config_from_query({"preset": "chat-h100-llama8b", path: text})
    try:
        by_set = apply_overrides(preset, [f"{path}={text}"])
    except PresetError:
        by_set = None
    if by_set is None:
        assert warning is not None and path in warning and cfg == preset, warning
    else:
        assert warning is None and cfg == by_set


def test_a_link_names_broken_json_meant_as_an_object_or_list():
    cfg, _, warning = config_from_query({"preset": "chat-h100-llama8b", "hardware.name": "[x](y)", "seed": "3"})
    assert cfg == load_preset("chat-h100-llama8b").model_copy(update={"seed": 3})
    assert warning.startswith("hardware.name: not valid JSON (Expecting value at line 1, column 2) in '[x](y)'; text that "
                              "starts with { or [ goes in JSON quotes (%22...%22 in a link)")  # fmt: skip
    named, _, warning = config_from_query({"preset": "chat-h100-llama8b", "hardware.name": '"[x](y)"'})
    assert warning is None and named.hardware.name == "[x](y)"
    # and a link the app writes for such a name reads back exactly (the readable form cannot hold it: the exact one)
    assert config_from_query(config_to_query(named, None, "chat-h100-llama8b"))[0] == named


def test_a_config_parameter_beside_the_whole_config_is_named_as_not_used():
    # ?cfg=...&seed=7 opened seed 0 and ?cfg=...&preset=orca-... the cfg's config, each without a word (fuzz39)
    cfg = make_config(seed=3)
    for extra in ({"seed": "7"}, {"preset": "orca-a100-llama8b"}, {"scheduler.max_num_seqs": "4", "seed": "7"}):
        got, _, warning = config_from_query({"cfg": encode_config(cfg), **extra})
        assert got == cfg
        assert warning == f"The link's cfg holds the whole config, so its {', '.join(map(repr, extra))} parameter(s) were not used."
    assert config_from_query({"cfg": encode_config(cfg), "sweep": "rate"})[2] is None  # (a page's own parameter: its page's)


def test_a_field_a_later_parameter_replaces_with_its_whole_section_is_named():
    # ?preset=...&scheduler.max_num_seqs=4&scheduler={...} ran the section's 8, the 4 lost without a word (fuzz39)
    params = {"preset": "chat-h100-llama8b", "scheduler.max_num_seqs": "4", "scheduler": '{"max_num_seqs": 8}'}
    cfg, _, warning = config_from_query(params)
    assert cfg.scheduler.max_num_seqs == 8
    assert warning == ("scheduler.max_num_seqs = 4: the link's later 'scheduler' sets that section whole and replaces it; "
                       "give one. Showing the preset with the link's other values instead.")  # fmt: skip
    # the other order sets the field on the section: both hold, nothing to say
    cfg, _, warning = config_from_query({"preset": "chat-h100-llama8b", "scheduler": '{"max_num_seqs": 8}',
                                         "scheduler.max_num_seqs": "4"})  # fmt: skip
    assert cfg.scheduler.max_num_seqs == 4 and warning is None


def test_a_link_value_the_trace_makes_unused_is_named_beside_its_other_problems():
    cfg, name, warning = config_from_query({"preset": "trace-azure-2023-h100-llama8b", "workload.arrival.rate_per_s": "5"})
    assert name is None  # (a modified preset)
    assert cfg.workload.trace is not None and "workload.arrival.rate_per_s: not used, the workload replays a trace" in warning
    _, _, warning = config_from_query({"preset": "trace-azure-2023-h100-llama8b", "workload.arrival.rate_per_s": "5",
                                       "scheduler.max_num_seqs": "-1"})  # fmt: skip
    assert "scheduler.max_num_seqs = -1" in warning and "workload.arrival.rate_per_s: not used" in warning
    assert config_from_query({"preset": "chat-h100-llama8b", "workload.arrival.rate_per_s": "5"})[2] is None


def test_a_link_refresh_interval_for_a_router_that_reads_no_state_is_named():
    params = {"preset": "cluster-router-4xh100-llama8b", "deployment.state_refresh_s": "0"}  # (its router: round robin)
    cfg, _, said = config_from_query(params)
    assert cfg.deployment.state_refresh_s == 0 and ("The link's deployment.state_refresh_s: not used, it is read only when deployment.router is 'least_kv', "
                                                   "'prefix_affinity' or 'weighted_score' (here 'round_robin')") in said
    assert config_from_query(params | {"deployment.router": "least_kv"})[2] is None


# A link cut short (a chat tool's line break, a copy that missed its end) decompressed to the start of the config and
# said "not valid JSON (Unterminated string starting at at line 1, column 2)": neither that the link was cut nor what
# to do. Any prefix of a good link now says so, keeps the default scenario, and never raises.
FULL_LINK = encode_config(load_preset("chat-h100-llama8b"))


@cases(80)
@given(hs.integers(min_value=1, max_value=len(FULL_LINK) - 1))
def test_a_link_cut_anywhere_says_it_is_cut_short_or_damaged(cut):
    cfg, preset, warning = config_from_query({"cfg": FULL_LINK[:cut]})
    assert cfg == load_preset(DEFAULT_SCENARIO) and preset == DEFAULT_SCENARIO
    assert ("cut short" in warning or "damaged" in warning) and "at at" not in warning
    assert "Traceback" not in warning


def test_a_link_cut_after_its_first_bytes_says_cut_short_and_what_to_do():
    _, _, warning = config_from_query({"cfg": FULL_LINK[:1000]})
    assert "The link is cut short: its cfg parameter (1,000 characters) ends before the config does" in warning
    assert "copy the whole link again" in warning


@pytest.mark.parametrize("params, says", [
    # the unknown name is answered with the one meant and where the others are (the CLI's `did_you_mean` rule)
    ({"preset": "chat-h100-llamma8b"}, "unknown preset 'chat-h100-llamma8b' (did you mean 'chat-h100-llama8b'? all "),
    ({"preset": "nope"}, f"unknown preset 'nope' (all {len(list_presets())} are in the Scenario preset list)"),
    ({"preset": "chat-h100-llama8b", "workload.rate_per_s": "3"}, "(did you mean 'workload.arrival.rate_per_s'?)"),
    ({"preset": "chat-h100-llama8b", "scheduler.max_seqs": "3"}, "(did you mean 'scheduler.max_num_seqs'?)"),
])  # fmt: skip
def test_an_unknown_name_in_a_link_is_answered_with_the_one_meant(params, says):
    _, _, warning = config_from_query(params)
    assert says in warning, warning


def test_an_unknown_field_far_from_every_field_gets_no_guess():
    # (the section's shared prefix made every scheduler field look close: 'policy' is none of them)
    _, _, warning = config_from_query({"preset": "chat-h100-llama8b", "scheduler.policy": "x"})
    assert "not a field of the config." in warning and "did you mean" not in warning


def test_a_link_that_splits_a_replicas_preset_is_told_to_set_its_replicas_to_one():
    # it said "set deployment.disaggregation.prefill.replicas and .decode.replicas instead", which the link had just done
    params = {"preset": "cluster-router-4xh100-llama8b", "deployment.disaggregation.prefill.replicas": "2"}
    _, _, warning = config_from_query(params)
    assert "deployment.replicas (4) must be 1 with disaggregation" in warning
    assert "set deployment.replicas to 1 as well" in warning
    cfg, _, warning = config_from_query(params | {"deployment.replicas": "1"})
    assert warning is None and cfg.deployment.disaggregation.prefill.replicas == 2


def test_a_links_unread_setting_is_said_against_the_config_of_the_moment():
    # "read only when scheduler.prefill_mode is 'time_slice' (here 'decode_first')" stayed up after the student
    # switched to time_slice, which reads it
    from tests.app.test_pages import app

    at = app(preset="chat-h100-llama8b", **{"scheduler.time_slice.prefill_slice_ms": "5"}).run()
    assert any("scheduler.time_slice.prefill_slice_ms: not used" in w.value for w in at.warning)
    at.selectbox(key="w.scheduler.prefill_mode").set_value("time_slice").run()
    assert not at.exception and not any("not used" in w.value for w in at.warning)
    assert at.session_state["sim.cfg"].scheduler.time_slice.prefill_slice_ms == 5.0  # (the link's value, now read)


def test_a_compare_query_opens_both_sides_exactly_or_is_none_past_the_link_limit():
    # Plan's "Compare the first two rows": each side a whole config, within MAX_LINK_CHARS, or no link at all (a
    # trace's requests: two rows of an uploaded trace passed it)
    import numpy as np
    from urllib.parse import urlencode

    a, b = make_config("chat-h100-llama8b", seed=1), make_config("chat-h100-llama8b-sglang", seed=2)
    query = compare_query(a, b)
    assert set(query) == {"a_cfg", "b_cfg"} and len(urlencode(query)) <= MAX_LINK_CHARS
    assert decode_config(query["a_cfg"]) == a and decode_config(query["b_cfg"]) == b
    rng = np.random.default_rng(0)  # (incompressible lengths: a real trace's)
    n = 4000
    long = trace_config(rng.integers(1, 4000, n).tolist(), rng.integers(1, 2000, n).tolist(), np.sort(rng.random(n) * 600).tolist())
    assert config_to_query(long, None, max_chars=MAX_LINK_CHARS // 2) is None and compare_query(a, long) is None
