"""app/components/setup_notes.py, and the pages that say when two setups are priced with different calibrations."""

from __future__ import annotations

from sim_core.presets import apply_part
from app.components.setup_notes import calibration_difference, setup_differences
from sim_core.presets import DEFAULT_SCENARIO, load_preset
from tests.app.test_pages import PAGES, open_page


def test_two_engines_with_their_own_profiles_are_said_to_be_priced_apart_by_their_largest_differences():
    a = load_preset(DEFAULT_SCENARIO)  # vLLM V1's profile
    b = apply_part(a, "engines", "sarathi-serve")  # the Sarathi-Serve artifact's: ~1 ms of CPU per sequence per tick
    said = calibration_difference(a, b, names=("vLLM V1", "Sarathi-Serve"))
    assert said.startswith("vLLM V1 and Sarathi-Serve are priced with different calibrations")
    assert "vLLM V1: vllm-v1, Sarathi-Serve: sarathi-serve-artifact" in said
    # the knob that differs most (965 / 20 us per sequence) first, with the sidebar's label, then at most three
    assert said.index("Overhead per sequence (µs): 20 against 965") < said.index("Overhead per tick (ms): 2.5 against 16")
    assert "give both the same calibration profile" in said
    assert "All-reduce latency" not in said and "FP8" not in said  # (one GPU, BF16 weights: knobs its price never reads)
    assert calibration_difference(a, apply_part(a, "engines", "vllm-v1")) is None  # same profile: nothing to say
    v0 = apply_part(a, "engines", "vllm-v0")  # (V0 and V1 differ in their all-reduce latency too: read only with TP)
    assert "All-reduce latency" not in calibration_difference(a, v0)
    tp2 = a.model_copy(update={"hardware": a.hardware.model_copy(update={"num_gpus": 2})})
    assert "All-reduce latency (µs): 30 against 20" in calibration_difference(tp2, apply_part(tp2, "engines", "vllm-v0"))
    tweaked = a.model_copy(update={"calibration": a.calibration.model_copy(update={"tick_overhead_ms": 0.0})})
    assert "Overhead per tick (ms): 2.5 against 0" in calibration_difference(a, tweaked)  # (a ratio to zero: first)


def test_compare_and_a_head_to_head_sweep_say_when_the_sides_are_priced_apart():
    at = open_page(PAGES[1])  # A: vLLM V0, B: vLLM V1, each with its family's profile
    notes = " ".join(i.value for i in at.info)
    # (one knob apart since vllm-v1's refit: both 2.5 ms a tick)
    assert ("A and B are priced with different calibrations (A: vllm-v0, B: vllm-v1; Overhead per sequence (µs): 25 against "
            "20)") in notes
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="8", n="2", vs="sarathi-serve")
    notes = " ".join(i.value for i in at.info)
    assert "vLLM V1 and Sarathi-Serve are priced with different calibrations" in notes, notes
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="8", n="2")
    assert not any("priced with different calibrations" in i.value for i in at.info)


def test_compare_names_every_setting_b_changes_the_first_with_values_the_rest_by_name():
    # both sides read "kv-pressure-a100-llama8b · vLLM V0" while B swapped: the one knob compared was said nowhere; and
    # past six settings ", and 3 more" left no way to see which
    from app.components.setup_notes import MAX_FIELDS, MORE_NAMES, setup_differences
    from sim_core import load_preset
    from sim_core.cli import apply_overrides

    a = load_preset("kv-pressure-a100-llama8b")
    assert setup_differences(a, a) is None
    swap = apply_overrides(a, ["scheduler.preemption=swap"])
    assert setup_differences(a, swap) == "B differs from A in scheduler.preemption recompute → swap."
    said = setup_differences(load_preset("chat-h100-llama8b"), load_preset("cluster-router-4xh100-llama8b"))
    shown, _, rest = said.partition("; also in ")
    assert shown.count(" → ") == MAX_FIELDS and rest and " → " not in rest
    # (one engine against 4 replicas: the topology says what deployment.replicas, a field only B has, would)
    assert shown.startswith("B differs from A in topology one engine → 4 co-located replicas; ") and "deployment." not in said
    many = apply_overrides(a, [f"scheduler.max_num_seqs={7}", "seed=3", "workload.num_requests=77",
                               "workload.arrival.rate_per_s=2", "slo.ttft_s=3", "slo.tpot_s=0.2", "hardware.memory_gib=79",
                               "hardware.peak_tflops=300", "hardware.hbm_bandwidth_gb_per_s=2000", "kv_cache.block_size=32",
                               "kv_cache.gpu_memory_utilization=0.8", "scheduler.queue_order=shortest_prompt_first", "limits.max_ticks=99999",
                               "model.max_model_len=65536", "workload.prompt_tokens.mean=300", "workload.output_tokens.mean=90",
                               "calibration.tick_overhead_ms=3", "scheduler.preemption=swap", "workload.name=x", "name=y",
                               "hardware.num_gpus=2", "scheduler.max_num_batched_tokens=32768"])  # fmt: skip
    said = setup_differences(a, many)
    rest = said.partition("; also in ")[2]
    assert len(rest.split(" and ")[0].split(", ")) == MORE_NAMES and rest.rstrip(".").endswith("more")


def test_compare_does_not_name_the_replicas_of_a_pd_side():
    # co-located 4 replicas against 3P1D read "deployment.replicas 4 → 1", as if B ran one replica: a P:D side's
    # replicas field is 1 by rule, its pools name what differs
    from app.components.setup_notes import setup_differences
    from sim_core import config_with, load_preset

    a, b = load_preset("cluster-dynamo-llama70b-fp8-8xh100-colocated"), load_preset("cluster-dynamo-llama70b-fp8-8xh100-3p1d")
    assert a.deployment.replicas != b.deployment.replicas  # (the field does differ)
    said = setup_differences(a, b)
    # what A ran is said, in words, first (the pools' fields read "– → 3", "– → 1"); of the fields of the section only B
    # has, those at what A's leaving it out stands for are not listed ("first_token_from – → prefill", the default),
    # nor the instance counts the topology gives; those set otherwise are (its 450 GB/s NVLink)
    assert said == ("B differs from A in topology 4 co-located replicas → 3P1D; deployment.disaggregation.link."
                    "bandwidth_gb_per_s – → 450.0; deployment.disaggregation.link.latency_us – → 10.0; "
                    "deployment.disaggregation.first_token_from – → decode."), said  # fmt: skip
    slow = setup_differences(a, config_with(b, {"deployment.disaggregation.link.bandwidth_gb_per_s": 1.0}))
    assert "link.bandwidth_gb_per_s – → 1.0" in slow, slow
    # a pool on other GPUs is named (Splitwise's A100 decode pool: ten of its fields were listed "→ –", its name nowhere)
    split = setup_differences(load_preset("cluster-splitwise-llama70b-4xdgx-ha-3p1d"),
                              load_preset("cluster-splitwise-llama70b-4xdgx-colocated"))  # fmt: skip
    assert split == ("B differs from A in topology 3P1D (decode on A100 80GB SXM) → 4 co-located replicas; "
                     "deployment.disaggregation.link.bandwidth_gb_per_s 400.0 → –."), split  # fmt: skip
    # one engine against replicas: a router other than the default is named (the topology says the count)
    chat = load_preset("chat-h100-llama8b")
    routed = setup_differences(chat, config_with(chat, {"deployment.replicas": 4, "deployment.router": "least_outstanding"}))
    assert routed == "B differs from A in topology one engine → 4 co-located replicas; deployment.router – → least_outstanding."
    # both split, the pools' own fields listed with their values
    two = setup_differences(b, config_with(b, {"deployment.disaggregation.prefill.replicas": 2}))
    assert two == "B differs from A in topology 3P1D → 2P1D; deployment.disaggregation.prefill.replicas 3 → 2.", two
    # the GPU and the model by name where their fields differ (DistServe's OPT-13B on A100s against the default
    # listed peak_tflops 312.0 → 989.4 and eleven model fields by path alone), not where only the name does (a label)
    named = setup_differences(load_preset("cluster-distserve-opt13b-3xa100-p2d1"), load_preset("chat-h100-llama8b"))
    assert named.startswith("B differs from A in topology 1P1D → one engine; GPU A100 80GB SXM → H100 SXM; model OPT-13B "
                            "→ Llama-3.1-8B; hardware.peak_tflops 312.0 → 989.4; "), named  # fmt: skip
    assert setup_differences(a, config_with(a, {"hardware.name": "My H100"})) is None
    one = setup_differences(load_preset("chat-h100-llama8b"), a)
    assert one.startswith("B differs from A in topology one engine → 4 co-located replicas; "), one


def test_settings_neither_run_reads_come_last_by_name():
    # a swap space under recompute pushed the real differences into "also in", and alone read as a difference
    from sim_core import config_with

    a = load_preset("chat-h100-llama8b")
    unread = config_with(a, {"kv_cache.swap_space_gb": 9})
    assert setup_differences(unread, a) == "B differs from A in only settings neither run reads: kv_cache.swap_space_gb."
    both = config_with(unread, {"scheduler.max_num_seqs": 64})
    assert setup_differences(both, a) == ("B differs from A in scheduler.max_num_seqs 64 → 256; not read by either run: "
                                          "kv_cache.swap_space_gb.")
