"""The sidebar's GPU-count and pool TP controls offer only the tensor-parallel degrees the model's heads split evenly
over (config.tp_degrees_allowed, the config's own rule); a degree a model change leaves behind is named, never lost."""

from __future__ import annotations

from app.components import config_form as form
from app.state import CFG_KEY, encode_config
from sim_core import load_preset
from tests.app.test_pages import PAGES, app, open_page
from tests.conftest import make_config

LLAMA_RULE = "Llama-3.1-8B's 32 attention heads (8 KV heads) split evenly only over 1, 2, 4, 8, 16 or 32 GPUs"


def test_the_gpu_count_offers_only_tp_degrees_the_models_heads_split_over():
    # (Qwen2.5-7B's 28 heads and 4 KV heads on 8 GPUs was offered, and priced with 3.5 heads per GPU)
    at = app(preset="code-completion-l40s-qwen7b").run()
    assert not at.exception
    assert list(at.select_slider(key="w.hardware.num_gpus").options) == ["1", "2", "4"]
    assert list(app(preset="chat-h100-llama8b").run().select_slider(key="w.hardware.num_gpus").options) == ["1", "2", "4", "8"]


def test_heads_edited_under_the_gpu_count_are_named_under_it_and_the_config_is_kept():
    at = app(preset="chat-h100-llama8b").run()
    at.select_slider(key="w.hardware.num_gpus").set_value(8).run()
    before = at.session_state[CFG_KEY]
    assert before.hardware.num_gpus == 8
    at.number_input(key="w.model.num_heads").set_value(28)
    at.number_input(key="w.model.num_kv_heads").set_value(4).run()
    assert not at.exception
    side = " ".join(e.value for e in at.sidebar.error)
    assert "“GPUs” = 8: Llama-3.1-8B's 28 attention heads (4 KV heads) split evenly only over 1, 2, 4 or 28 GPUs" in side
    assert at.session_state[CFG_KEY] == before  # the last valid config stays; the knob keeps its 8 (nothing lost)
    assert list(at.select_slider(key="w.hardware.num_gpus").options) == ["1", "2", "4", "8"]
    assert at.select_slider(key="w.hardware.num_gpus").value == 8


def test_a_model_preset_the_gpu_count_does_not_suit_is_a_message_and_the_config_stays():
    at = app(preset="chat-h100-llama8b").run()
    at.select_slider(key="w.hardware.num_gpus").set_value(8).run()
    before = at.session_state[CFG_KEY]
    at.selectbox(key="w.part.models").set_value("qwen2.5-7b").run()
    assert not at.exception
    side = " ".join(e.value for e in at.sidebar.error)
    assert "hardware.num_gpus = 8: Qwen2.5-7B's 28 attention heads (4 KV heads) split evenly only over 1, 2, 4 or 28" in side
    assert at.session_state[CFG_KEY] == before
    at.select_slider(key="w.hardware.num_gpus").set_value(4).run()  # a degree it allows: the model then loads
    at.selectbox(key="w.part.models").set_value("qwen2.5-7b").run()
    assert not at.exception and at.session_state[CFG_KEY].model.name == "Qwen2.5-7B"


def test_a_pools_tp_offers_only_degrees_the_models_heads_split_over():
    at = app(preset="code-completion-l40s-qwen7b", **{"deployment.disaggregation.prefill.replicas": "1"}).run()
    assert not at.exception and at.session_state[CFG_KEY].deployment.disaggregation is not None
    assert list(at.select_slider(key="w.dep.prefill_tp").options) == ["1", "2", "4"]
    assert list(at.select_slider(key="w.dep.decode_tp").options) == ["1", "2", "4"]


def test_a_link_with_a_tp_degree_the_heads_do_not_split_over_names_it_and_keeps_the_rest():
    # links saved before the rule described deployments no engine runs: the value is named and dropped
    at = app(preset="chat-h100-llama8b", seed="7", **{"hardware.num_gpus": "3"}).run()
    assert not at.exception
    said = " ".join(w.value for w in at.warning)
    assert f"hardware.num_gpus = 3: {LLAMA_RULE}" in said
    assert at.session_state[CFG_KEY] == make_config(seed=7)
    old = load_preset("chat-h100-llama8b")  # an exact link: its whole config is refused, the default scenario opens
    old = old.model_copy(update={"hardware": old.hardware.model_copy(update={"num_gpus": 6})})
    at = app(cfg=encode_config(old)).run()
    assert not at.exception
    assert f"hardware.num_gpus = 6: {LLAMA_RULE}" in " ".join(w.value for w in at.warning)
    assert at.session_state[CFG_KEY] == load_preset("chat-h100-llama8b")


def test_a_gpu_sweep_runs_the_allowed_degrees_and_a_range_without_one_is_named():
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="num_gpus", start="1", stop="8", n="8",
                   **{"workload.num_requests": "40"})  # fmt: skip
    assert not at.exception
    assert list(at.dataframe[0].value["num_gpus"]) == [1, 2, 4, 8]  # not 3, 5, 6 or 7 GPUs
    at.number_input(key="sw.start.num_gpus").set_value(5)
    at.number_input(key="sw.stop.num_gpus").set_value(7).run()
    assert not at.exception
    assert f"num_gpus from 5 to 7: {LLAMA_RULE}" in " ".join(e.value for e in at.error)


def test_every_number_box_takes_its_range_from_the_config_model():
    # (the boxes restated the model's limits, and some narrower: a TTFT objective of 5 ms, which the config takes, was
    # refused by a box starting at 10 ms; a 0.5 GB/s GPU link by one starting at 1)
    from app.components.config_form import ALL_SPECS
    from sim_core.config import field_bounds

    at = app(preset="chat-h100-llama8b").run()
    boxes = {spec.path: at.number_input(key="w." + spec.path) for spec in ALL_SPECS if spec.kind == "number"
             and any(w.key == "w." + spec.path for w in at.number_input)}  # fmt: skip
    assert len(boxes) >= 30
    for path, box in boxes.items():
        assert (box.min, box.max) == tuple(field_bounds(tuple(path.split(".")))), path
    assert all(spec.lo is None and spec.hi is None for spec in ALL_SPECS if spec.kind == "number")


def test_a_slider_travels_within_the_config_models_limits():
    from app.components.config_form import ALL_SPECS
    from sim_core.config import field_bounds

    for spec in (s for s in ALL_SPECS if s.kind == "slider"):
        lo, hi = field_bounds(tuple(spec.path.split(".")))
        assert lo <= spec.lo < spec.hi <= hi, spec.path


def test_values_the_config_takes_below_the_old_boxes_are_taken():
    at = app(preset="chat-4xh100-llama70b").run()  # (tensor parallel: one GPU reads no GPU link, and hides its box)
    at.number_input(key="w.slo.ttft_s").set_value(0.005)
    at.number_input(key="w.hardware.interconnect_gb_per_s").set_value(0.5).run()
    assert not at.exception and not at.sidebar.error
    cfg = at.session_state[CFG_KEY]
    assert cfg.slo.ttft_s == 0.005 and cfg.hardware.interconnect_gb_per_s == 0.5


def test_the_deployment_boxes_take_their_range_from_the_config_model():
    from sim_core.config import MAX_REPLICAS, field_bounds

    at = app(preset="code-completion-l40s-qwen7b", **{"deployment.disaggregation.prefill.replicas": "1"}).run()
    assert not at.exception
    for key in ("prefill", "decode"):
        assert (at.number_input(key="w.dep." + key).min, at.number_input(key="w.dep." + key).max) == (1, MAX_REPLICAS)
    link = ("deployment", "disaggregation", "link")
    assert (at.number_input(key="w.dep.bw").min, at.number_input(key="w.dep.bw").max) == field_bounds((*link, "bandwidth_gb_per_s"))
    assert (at.number_input(key="w.dep.lat").min, at.number_input(key="w.dep.lat").max) == field_bounds((*link, "latency_us"))


def test_a_linked_value_below_a_sliders_travel_is_shown_in_significant_digits():
    # ?hardware.hbm_bandwidth_gb_per_s=0.001 widened the slider to hold it (the model allows it) and showed "0.00"
    at = app(**{"hardware.hbm_bandwidth_gb_per_s": "0.001"}).run()
    assert not at.exception
    slider = at.slider(key="w.hardware.hbm_bandwidth_gb_per_s")
    assert slider.value == 0.001 and slider.min == 0.001 and slider.proto.format == "%.3g"
    assert app(preset="chat-h100-llama8b").run().slider(key="w.hardware.hbm_bandwidth_gb_per_s").proto.format != "%.3g"


def test_a_whole_value_on_a_whole_step_is_shown_without_decimals():
    # a review: lesson 1's banner said "HBM bandwidth (GB/s) = 1,675" beside the slider's "1675.00"; H100's 989.4
    # TFLOP/s keeps its decimal, and a linked 1675.5 GB/s is not shown as a whole number
    at = app(preset="chat-h100-llama8b").run()
    assert at.slider(key="w.hardware.hbm_bandwidth_gb_per_s").proto.format == "%.0f"
    assert at.slider(key="w.hardware.peak_tflops").proto.format != "%.0f"
    half = app(**{"hardware.hbm_bandwidth_gb_per_s": "1675.5"}).run()
    assert half.slider(key="w.hardware.hbm_bandwidth_gb_per_s").proto.format != "%.0f"


def _shown(at, path: str) -> bool:
    return any(w.key == f"w.{path}" for w in (*at.sidebar.number_input, *at.sidebar.selectbox, *at.sidebar.slider))


def test_the_sidebar_shows_a_setting_only_while_the_run_reads_it():
    # (sim_core.unused's rule, the one the CLI's and links' notes give: swap space matters only when pre-emption swaps)
    at = app(preset="chat-h100-llama8b").run()
    assert not _shown(at, "kv_cache.swap_space_gb") and not _shown(at, "scheduler.time_slice.prefill_slice_ms")
    at.selectbox(key="w.scheduler.preemption").set_value("swap").run()
    at.selectbox(key="w.scheduler.prefill_mode").set_value("time_slice").run()
    assert not at.exception
    assert _shown(at, "kv_cache.swap_space_gb") and _shown(at, "scheduler.time_slice.prefill_slice_ms")
    # DistServe's decode pool swaps under a top-level scheduler that recomputes: its swap space is shown
    at = app(preset="cluster-distserve-opt13b-3xa100-p2d1").run()
    assert at.selectbox(key="w.scheduler.preemption").value == "recompute" and _shown(at, "kv_cache.swap_space_gb")


def test_a_knob_hidden_and_shown_again_keeps_the_value_set_before():
    # swap space set to 12, hidden by pre-emption = recompute, shown again by swap, read 4 (the preset's) and the run
    # took 4: Streamlit hands back a hidden widget's stale value
    at = app(preset="chat-h100-llama8b").run()
    at.selectbox(key="w.scheduler.preemption").set_value("swap").run()
    at.number_input(key="w.kv_cache.swap_space_gb").set_value(12.0).run()
    at.selectbox(key="w.scheduler.preemption").set_value("recompute").run()
    at.run()  # (a rerun while it is hidden: the config keeps 12)
    assert at.session_state[CFG_KEY].kv_cache.swap_space_gb == 12.0
    at.selectbox(key="w.scheduler.preemption").set_value("swap").run()
    assert not at.exception
    assert at.number_input(key="w.kv_cache.swap_space_gb").value == 12.0 == at.session_state[CFG_KEY].kv_cache.swap_space_gb


def test_the_draft_model_is_chosen_in_the_sidebar_while_a_separate_draft_speculates():
    # (the config took any model preset as the draft and the memory plan counted it, but the sidebar had no control
    # for it: a separate draft was always Llama-3.2-1B)
    from sim_core.costmodel import plan_memory

    at = app(preset="spec-decode-h100-llama8b").run()
    assert not _shown(at, "scheduler.speculative.draft_model")  # an EAGLE-style head has no separate model
    at.selectbox(key="w.scheduler.speculative.draft").set_value("model").run()
    box = at.selectbox(key="w.scheduler.speculative.draft_model")
    # only drafts of the target's vocabulary (Llama-2-7B's 32,000 tokens against Llama-3.1-8B's 128,256 was offered)
    assert box.value == "llama-3.2-1b" and list(box.options) == ["llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b"]
    small = plan_memory(at.session_state[CFG_KEY]).kv_capacity_tokens
    box.set_value("llama-3.1-8b").run()
    assert not at.exception
    cfg = at.session_state[CFG_KEY]
    assert cfg.scheduler.speculative.draft_model == "llama-3.1-8b"
    assert plan_memory(cfg).kv_capacity_tokens < small  # an 8B draft's weights and KV leave the target less room


def test_the_gpu_link_controls_show_only_while_a_tensor_parallel_group_reads_them():
    # "GPU link type" and "GPU link (GB/s)" stayed at one GPU, where no all-reduce runs and they change nothing
    one = app(preset="chat-h100-llama8b").run()
    tp = app(preset="chat-4xh100-llama70b").run()
    assert not one.exception and not tp.exception
    keys = lambda at: {w.key for w in at.sidebar.number_input} | {w.key for w in at.sidebar.selectbox}  # noqa: E731
    assert "w.hardware.interconnect_gb_per_s" in keys(tp) and "w.hardware.interconnect_gb_per_s" not in keys(one)


def test_every_sidebar_setting_a_message_names_reads_as_its_label_and_section():
    # a run's notes and an out-of-memory refusal name settings by config path; the pages show them in the sidebar's
    # words, every control's, the longest path first (scheduler.smart_preemption.enabled is not "scheduler.…" + rest)
    for section, specs in form.SECTIONS.items():
        for spec in (x for x in specs if "." in x.path):  # (a top-level one, "seed", is also a word of prose)
            said = form.sidebar_words(f"raise {spec.path} (now 2), or {spec.path}.")
            assert said == f"raise “{spec.label.split(' (')[0]}” ({section}) (now 2), or “{spec.label.split(' (')[0]}” ({section}).", said
    assert form.sidebar_words("deployment.router 'round_robin'") == "“Router” (Deployment) 'round_robin'"  # (the pools' form)
    # every control of the deployment form, the pools' link and first-token settings too (they read as paths before)
    from app.components import deployment_form

    for path, label in deployment_form.LABELS.items():
        assert form.sidebar_words(f"{path} = 1.") == f"“{label.split(' (')[0]}” (Deployment) = 1."
    assert form.sidebar_words("deployment.disaggregation.link.latency_us") == "“KV link latency” (Deployment)"
    assert form.sidebar_words("workload chat (seed 0)") == "workload chat (seed 0)"


def test_a_request_classs_field_is_named_by_its_row_in_the_editor():
    # "workload.classes.1.share" read "“Request classes”.1.share" beside an editor whose index is hidden (a review)
    text = form.friendly_error("Invalid settings:\n  workload.classes.1.share = 0.3: the classes' shares must sum to 1, got "
                          "0.5 + 0.3 = 0.8")
    assert "“Request classes” (row 2, share) = 0.3: the classes' shares must sum to 1" in text and ".1." not in text


def test_the_batch_cap_steps_through_small_values_one_by_one_and_keeps_a_value_off_its_stops():
    # a review on a phone: a linear 1-1,024 slider put the article's 4-16 in 3 px of a 214-px track
    at = app(preset="chat-h100-llama8b").run()
    cap = at.select_slider(key="w.scheduler.max_num_seqs")
    options = [int(o) for o in cap.options]
    assert options[:16] == list(range(1, 17)) and options[-1] == 1024 and len(options) < 40
    cap.set_value(8).run()
    assert not at.exception and at.session_state[CFG_KEY].scheduler.max_num_seqs == 8
    odd = app(preset="chat-h100-llama8b", **{"scheduler.max_num_seqs": "300"}).run()  # a link's value off the stops
    assert odd.select_slider(key="w.scheduler.max_num_seqs").value == 300 and odd.session_state[CFG_KEY].scheduler.max_num_seqs == 300
    assert "300" in odd.select_slider(key="w.scheduler.max_num_seqs").options
