"""app/components/setup_notes.py, and the pages that say when two setups are priced with different calibrations."""

from __future__ import annotations

from sim_core.presets import apply_part
from app.components.setup_notes import calibration_difference
from sim_core.presets import DEFAULT_SCENARIO, load_preset
from tests.app.test_pages import PAGES, open_page


def test_two_engines_with_their_own_profiles_are_said_to_be_priced_apart_by_their_largest_differences():
    a = load_preset(DEFAULT_SCENARIO)  # vLLM V1's profile
    b = apply_part(a, "engines", "sarathi-serve")  # the Sarathi-Serve artifact's: ~1 ms of CPU per sequence per tick
    said = calibration_difference(a, b, names=("vLLM V1", "Sarathi-Serve"))
    assert said.startswith("vLLM V1 and Sarathi-Serve are priced with different calibrations")
    assert "vLLM V1: vllm-v1, Sarathi-Serve: sarathi-serve-artifact" in said
    # the knob that differs most (965 / 5 us per sequence) first, with the sidebar's label, then at most three
    assert said.index("Overhead per sequence (µs): 5 against 965") < said.index("Overhead per tick (ms): 3 against 16")
    assert "give both the same calibration profile" in said
    assert "All-reduce latency" not in said and "FP8" not in said  # (one GPU, BF16 weights: knobs its price never reads)
    assert calibration_difference(a, apply_part(a, "engines", "vllm-v1")) is None  # same profile: nothing to say
    v0 = apply_part(a, "engines", "vllm-v0")  # (V0 and V1 differ in their all-reduce latency too: read only with TP)
    assert "All-reduce latency" not in calibration_difference(a, v0)
    tp2 = a.model_copy(update={"hardware": a.hardware.model_copy(update={"num_gpus": 2})})
    assert "All-reduce latency (µs): 25 against 5" in calibration_difference(tp2, apply_part(tp2, "engines", "vllm-v0"))
    tweaked = a.model_copy(update={"calibration": a.calibration.model_copy(update={"tick_overhead_ms": 0.0})})
    assert "Overhead per tick (ms): 3 against 0" in calibration_difference(a, tweaked)  # (a ratio to zero: first)


def test_compare_and_a_head_to_head_sweep_say_when_the_sides_are_priced_apart():
    at = open_page(PAGES[1])  # A: vLLM V0, B: vLLM V1, each with its family's profile
    notes = " ".join(i.value for i in at.info)
    assert "A and B are priced with different calibrations (A: vllm-v0, B: vllm-v1; Overhead per tick (ms): 5 against 3)" in notes
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="8", n="2", vs="sarathi-serve")
    notes = " ".join(i.value for i in at.info)
    assert "vLLM V1 and Sarathi-Serve are priced with different calibrations" in notes, notes
    at = open_page(PAGES[2], preset="chat-h100-llama8b", sweep="rate", start="4", stop="8", n="2")
    assert not any("priced with different calibrations" in i.value for i in at.info)
