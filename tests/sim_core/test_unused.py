"""sim_core.unused: a setting said to be unread changes no run, and the CLI, links and lessons are told by it."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from sim_core import load_preset, run_simulation
from sim_core.cli import main
from sim_core.config import SimConfig, field_info, set_dotted
from sim_core.lessons import load_lessons
from sim_core.presets import PresetError, config_from_dict, list_presets
from sim_core.unused import READ_ONLY_WHEN, read_only_when, setting_is_read, unused_settings, value_at


def _leaves(path: str) -> list[str]:
    """The fields under the dotted `path` (itself when it is a field)."""
    ann = field_info(tuple(path.split("."))).annotation
    model = next((a for a in typing.get_args(ann) or (ann,) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if model is None:
        return [path]
    return [leaf for name in model.model_fields for leaf in _leaves(f"{path}.{name}")]


def _other_values(cfg: SimConfig, path: str) -> list:
    """Valid-looking values for the field at `path` other than `cfg`'s (the first that validates is used)."""
    info = field_info(tuple(path.split(".")))
    now = value_at(cfg, path)
    if path.endswith("draft_model"):
        return [m for m in list_presets("models") if m != now]
    if path.endswith("acceptance_by_position"):
        return [[0.5] * cfg.scheduler.speculative.num_draft_tokens]
    if info.annotation is bool:
        return [not now]
    if typing.get_origin(info.annotation) is typing.Literal:
        return [v for v in typing.get_args(info.annotation) if v != now]
    if isinstance(now, (int, float)):
        kind = type(now)
        return [kind(v) for v in (now * 2, now + 1, now / 2, now - 1) if kind(v) != now]
    raise AssertionError(f"no other value for {path} = {now!r}")


def _unread_base(key: str) -> SimConfig:
    """A small config in which `key`'s rule fails at its first condition (the others hold)."""
    base = load_preset("cluster-router-4xh100-llama8b" if key.startswith("deployment.") else "chat-h100-llama8b")
    data = base.model_dump(mode="json")
    set_dotted(data, "workload.num_requests", 40)
    (first_path, first_values), *rest = read_only_when(key)
    for path, values in rest:  # (the later conditions hold, so the first alone leaves it unread)
        set_dotted(data, path, values[0])
    now = value_at(base, first_path)
    ann = field_info(tuple(first_path.split("."))).annotation
    options = [False] if ann is bool else [1] if first_path.endswith("turns") else list(typing.get_args(ann)) or [now]
    set_dotted(data, first_path, next(v for v in options if v not in first_values))
    return config_from_dict(data)


UNREAD_LEAVES = sorted({leaf for path in READ_ONLY_WHEN for leaf in _leaves(path)})


@pytest.mark.parametrize("key", UNREAD_LEAVES)
def test_a_setting_said_to_be_unread_changes_no_run(key):
    cfg = _unread_base(key)
    assert not setting_is_read(cfg, key) and unused_settings(cfg, [key])
    for value in _other_values(cfg, key):
        data = cfg.model_dump(mode="json")
        set_dotted(data, key, value)
        try:
            changed = config_from_dict(data)
        except PresetError:
            continue
        break
    else:
        raise AssertionError(f"no valid other value for {key}")
    assert changed != cfg
    # (the whole summary, as JSON: every figure, KV blocks and the stopped reason included)
    assert run_simulation(changed).summary.model_dump_json() == run_simulation(cfg).summary.model_dump_json()


@pytest.mark.parametrize("key", sorted(READ_ONLY_WHEN))
def test_a_setting_is_read_when_its_conditions_hold(key):
    data = load_preset("cluster-router-4xh100-llama8b" if key.startswith("deployment.") else "chat-h100-llama8b").model_dump(mode="json")
    for path, values in read_only_when(key):
        set_dotted(data, path, values[0])
    cfg = config_from_dict(data)
    assert setting_is_read(cfg, key) and not unused_settings(cfg, [key])


def test_a_pool_with_its_own_scheduler_reads_what_the_top_level_one_does_not():
    # DistServe's decode pool swaps under a top-level scheduler that recomputes: the swap space is read
    cfg = load_preset("cluster-distserve-opt13b-3xa100-p2d1")
    assert cfg.scheduler.preemption == "recompute" and cfg.deployment.disaggregation.decode.scheduler.preemption == "swap"
    assert setting_is_read(cfg, "kv_cache.swap_space_gb")
    # the prefill pool runs the top-level scheduler (prefill first): a time slice is read by neither pool
    assert not setting_is_read(cfg, "scheduler.time_slice.prefill_slice_ms")
    # the decode pool never caches prefixes (whole KV arrives): the eviction policy is read where the prefill pool caches
    cached = config_from_dict(cfg.model_dump(mode="json") | {"kv_cache": cfg.kv_cache.model_dump() | {"enable_prefix_caching": True}})
    assert setting_is_read(cached, "kv_cache.eviction_policy")


def test_settings_the_rules_do_not_name_are_always_read():
    cfg = load_preset("chat-h100-llama8b")
    assert read_only_when("scheduler.max_num_seqs") == () and setting_is_read(cfg, "scheduler.max_num_seqs")
    # (a rule covers its section's fields, not a sibling whose name starts the same)
    assert read_only_when("scheduler.quota.window_ms") == READ_ONLY_WHEN["scheduler.quota"]
    assert read_only_when("scheduler.quotas") == ()


def test_many_unread_settings_are_named_a_few_at_a_time():
    cfg = load_preset("chat-h100-llama8b")
    keys = [leaf for path in ("scheduler.quota", "scheduler.time_slice", "scheduler.new_token_ratio") for leaf in _leaves(path)]
    said = unused_settings(cfg, keys + keys)  # (a key given twice is named once)
    assert len(said) == 5 and said[-1].endswith(f"; and {len(keys) - 5:,} more settings not used")


def test_the_cli_names_an_unread_setting_and_the_mode_that_would_read_it(capsys):
    argv = ["run", "chat-h100-llama8b", "--json", "--set", "workload.num_requests=20",
            "--set", "scheduler.time_slice.prefill_slice_ms=1", "--set", "kv_cache.swap_space_gb=0"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("NOTE: --set scheduler.time_slice.prefill_slice_ms: not used, it is read only when scheduler.prefill_mode is "
            "'time_slice' (here 'decode_first')") in err
    assert "NOTE: --set kv_cache.swap_space_gb: not used, it is read only when scheduler.preemption is 'swap' (here 'recompute')" in err
    assert main(argv[:5] + ["--set", "scheduler.prefill_mode=time_slice", "--set", "scheduler.time_slice.prefill_slice_ms=1"]) == 0
    assert "NOTE" not in capsys.readouterr().err


def test_every_lessons_knob_and_overrides_are_read_on_each_side():
    # (a lesson that turned a knob nothing reads would show two equal runs and call them an answer)
    for lesson in load_lessons():
        for step in range(len(lesson.values)):
            for run in ("lesson", "mechanism") if lesson.mechanism else ("lesson",):
                cfg = lesson.config(step, run)
                for key in (lesson.knob, *lesson.overrides):
                    assert setting_is_read(cfg, key), (lesson.id, run, key)
