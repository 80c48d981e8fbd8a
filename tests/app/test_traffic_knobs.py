"""AppTest: the issue-12 knobs (prefix-cache eviction policy, closed-loop sessions) are in the sidebar and in links."""

from __future__ import annotations

from app.state import CFG_KEY
from tests.app.test_pages import app


def test_a_link_sets_the_eviction_policy_and_the_kv_section_shows_it():
    at = app(preset="chat-h100-llama8b", **{"kv_cache.enable_prefix_caching": "true", "kv_cache.eviction_policy": "lfu"}).run()
    assert not at.exception
    assert at.session_state[CFG_KEY].kv_cache.eviction_policy == "lfu"
    assert at.selectbox(key="w.kv_cache.eviction_policy").value == "lfu"


def test_multi_turn_sessions_show_the_closed_loop_toggle():
    at = app(preset="chat-h100-llama8b", **{"workload.sessions.turns": "3", "workload.sessions.closed_loop": "false"}).run()
    assert not at.exception
    assert at.session_state[CFG_KEY].workload.sessions.closed_loop is False
    assert at.toggle(key="w.workload.sessions.closed_loop").value is False
