"""The sidebar shows the active calibration profile and switching it loads that profile's values."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from app.state import CFG_KEY
from sim_core.presets import read_preset_data

APP = str(Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py")


def test_profile_select_shows_the_engine_family_and_switching_loads_its_values():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["preset"] = "engine-sarathi-serve"
    at.session_state["ui.section.Calibration"] = True  # sidebar sections are lazy: open the one under test
    at.run()
    select = at.selectbox(key="w.calibration.profile")
    assert select.value == "sarathi-serve-artifact"
    select.set_value("tensorrt-llm-classic").run()
    assert not at.exception
    want = read_preset_data("calibration", "tensorrt-llm-classic")
    assert at.session_state["w.calibration.tick_overhead_ms"] == want["tick_overhead_ms"]
    assert at.session_state[CFG_KEY].calibration.profile == "tensorrt-llm-classic"
    assert at.session_state[CFG_KEY].calibration.tick_overhead_ms == want["tick_overhead_ms"]
