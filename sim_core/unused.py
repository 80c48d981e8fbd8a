"""Settings a config does not read, and why: the one rule for when a setting matters.

A time slice is read only under prefill_mode time_slice, a prefix cache's eviction policy only with prefix caching
on, a swap space only when pre-emption swaps, and so on (`READ_ONLY_WHEN`). The sidebar shows such a control only
while it is read (app/components/config_form.py), and a `--set` or a link value for one that the run does not read is
named in a note (`unused_settings`): `--set scheduler.time_slice.prefill_slice_ms=1` on a decode-first engine ran
byte-identical to the preset without a word, as did a trace's replaced workload fields before `unused_with_trace`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sim_core.config import STATE_ROUTERS, SimConfig, field_bounds, pool_config

Condition = tuple[str, tuple[Any, ...]]  # (dotted path of a control, the values under which the setting is read)

_MAX_TURNS = field_bounds(("workload", "sessions", "turns"))[1]
MULTI_TURN: tuple[int, ...] = tuple(range(2, _MAX_TURNS + 1))  # a conversation's turns beyond the first
_SPECULATING: Condition = ("scheduler.speculative.enabled", (True,))
# (the GPU-to-GPU link carries only the tensor-parallel all-reduce: one GPU has none, costmodel's `_ar_bytes_per_token`)
_TENSOR_PARALLEL: Condition = ("hardware.num_gpus", tuple(range(2, field_bounds(("hardware", "num_gpus"))[1] + 1)))

# A setting (a field or a whole section, by its dotted path) read only while every condition holds; the longest path
# that covers a setting gives its rule. Checked against the engines' code by tests/sim_core/test_unused.py, which
# runs each setting changed where it is said to be unread and asserts the run does not change.
READ_ONLY_WHEN: dict[str, tuple[Condition, ...]] = {
    "hardware.interconnect": (_TENSOR_PARALLEL,),
    "hardware.interconnect_gb_per_s": (_TENSOR_PARALLEL,),
    "workload.arrival.rate_per_s": (("workload.arrival.process", ("poisson", "gamma", "constant")),),
    "workload.arrival.burstiness_cv": (("workload.arrival.process", ("gamma",)),),
    "workload.arrival.num_clients": (("workload.arrival.process", ("closed_loop",)),),
    "workload.arrival.think_time_s": (("workload.arrival.process", ("closed_loop",)),),
    "workload.prompt_tokens.sigma": (("workload.prompt_tokens.dist", ("lognormal",)),),
    "workload.output_tokens.sigma": (("workload.output_tokens.dist", ("lognormal",)),),
    "workload.sessions.user_tokens": (("workload.sessions.turns", MULTI_TURN),),
    "workload.sessions.think_time_s": (("workload.sessions.turns", MULTI_TURN),),
    "workload.sessions.closed_loop": (("workload.sessions.turns", MULTI_TURN),),
    "scheduler.mix_decodes": (("scheduler.prefill_mode", ("prefill_first",)),),
    "scheduler.new_token_ratio": (("scheduler.admission", ("new_token_ratio",)),),
    "scheduler.time_slice": (("scheduler.prefill_mode", ("time_slice",)),),
    "scheduler.quota": (("scheduler.prefill_mode", ("quota",)),),
    "scheduler.dynamic_batch.target_tick_ms": (("scheduler.dynamic_batch.enabled", (True,)),),
    "scheduler.smart_preemption.threshold_ms": (("scheduler.smart_preemption.enabled", (True,)),),
    "scheduler.smart_preemption.decode_queue_limit": (("scheduler.smart_preemption.enabled", (True,)),),
    "scheduler.speculative.num_draft_tokens": (_SPECULATING,),
    "scheduler.speculative.acceptance_rate": (_SPECULATING,),
    "scheduler.speculative.acceptance_by_position": (_SPECULATING,),
    "scheduler.speculative.draft": (_SPECULATING,),
    "scheduler.speculative.draft_cost_fraction": (_SPECULATING, ("scheduler.speculative.draft", ("head",))),
    "scheduler.speculative.draft_model": (_SPECULATING, ("scheduler.speculative.draft", ("model",))),
    "kv_cache.swap_space_gb": (("scheduler.preemption", ("swap",)),),
    "kv_cache.eviction_policy": (("kv_cache.enable_prefix_caching", (True,)),),
    "deployment.state_refresh_s": (("deployment.router", STATE_ROUTERS),),
}

# A trace's rows set each request's arrival, prompt and output lengths and priority (workload.generate_workload), so
# these parts of the workload are not read while it has one. The sidebar says so; a --set or a link value for them was
# kept without a word, and the run replayed the trace as it is.
TRACE_REPLACES = ("workload.arrival", "workload.prompt_tokens", "workload.output_tokens", "workload.classes")


def _covers(path: str, key: str) -> bool:
    return key == path or key.startswith(path + ".")


def read_only_when(key: str) -> tuple[Condition, ...]:
    """The conditions under which the dotted setting `key` is read (all must hold); () when it is always read."""
    paths = [p for p in READ_ONLY_WHEN if _covers(p, key)]
    return READ_ONLY_WHEN[max(paths, key=len)] if paths else ()


def value_at(cfg: SimConfig, path: str) -> Any:
    """The value of the dotted `path` in `cfg` (None past an absent optional section)."""
    node: Any = cfg
    for part in path.split("."):
        node = getattr(node, part, None)
    return node


def failed_condition(cfg: SimConfig, key: str) -> Condition | None:
    """The first condition of `key`'s rule that the one engine `cfg` describes does not meet, or None (it is read)."""
    return next(((path, values) for path, values in read_only_when(key) if value_at(cfg, path) not in values), None)


def setting_is_read(cfg: SimConfig, key: str) -> bool:
    """Whether some engine of `cfg` reads the dotted setting `key`. A disaggregated deployment's pools run their own
    engine configs (`pool_config`): a pool with its own scheduler reads none of the top-level one's, and a pool's
    scheduler may read a top-level setting the top-level scheduler does not (DistServe's decode pool swaps, so it
    reads kv_cache.swap_space_gb, under a top-level scheduler that recomputes)."""
    if not read_only_when(key):
        return True
    dis = cfg.deployment.disaggregation if cfg.deployment is not None else None
    if dis is None or key.startswith("deployment."):
        return failed_condition(cfg, key) is None
    for role in ("prefill", "decode"):
        if key.startswith("scheduler.") and getattr(dis, role).scheduler is not None:
            continue  # (the pool reads its own scheduler, not this one)
        if failed_condition(pool_config(cfg, role), key) is None:
            return True
    return False


def _shown_values(values: tuple[Any, ...]) -> str:
    if values == (True,):
        return "on"
    if values in (MULTI_TURN, _TENSOR_PARALLEL[1]):
        return "more than 1"
    shown = [repr(v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def unused_by_mode(cfg: SimConfig, keys: Iterable[str]) -> list[str]:
    """A sentence for each dotted key in `keys` that `cfg` does not read, naming the control that would make it read
    and the control's value now."""
    out = []
    for key in keys:
        if setting_is_read(cfg, key):
            continue
        # (in a deployment whose pools disagree, the top-level engine's reason, or the first pool's)
        dis = cfg.deployment.disaggregation if cfg.deployment is not None else None
        one = cfg if dis is None or key.startswith("deployment.") else pool_config(cfg, "prefill")
        path, values = failed_condition(one, key) or read_only_when(key)[0]
        now = value_at(one, path)
        now_text = ("on" if now else "off") if isinstance(now, bool) else repr(now)
        out.append(f"{key[:80]}: not used, it is read only when {path} is {_shown_values(values)} (here {now_text})")
    return out


def replaced_by_trace(cfg: SimConfig, key: str) -> bool:
    """Whether `cfg` has a trace and the dotted `key` is a part of the workload its rows replace."""
    return cfg.workload.trace is not None and any(_covers(p, key) for p in TRACE_REPLACES)


def unused_with_trace(cfg: SimConfig, keys: Iterable[str]) -> str | None:
    """A sentence naming the dotted `keys` that `cfg`'s trace makes unused, or None (no trace, or none of them)."""
    unused = [k for k in keys if replaced_by_trace(cfg, k)]
    if not unused:
        return None
    shown = ", ".join(k[:60] for k in unused[:5]) + (f" (and {len(unused) - 5} more)" if len(unused) > 5 else "")
    return (f"{shown}: not used, the workload replays a trace whose rows set each request's arrival, prompt and output "
            "lengths and priority (to replay it at another rate, time-scale it: a rate sweep does, and so does a trace "
            "file's time scale when it is loaded)")  # fmt: skip


def unused_settings(cfg: SimConfig, keys: Iterable[str]) -> list[str]:
    """Sentences naming the dotted `keys` (a link's, `--set`'s) that `cfg` does not read: a trace's replaced workload
    fields (`unused_with_trace`), and settings of a mode, a policy or a router the config does not use
    (`unused_by_mode`). At most a few: a link of many such keys is told of the first ones and how many more."""
    keys = list(dict.fromkeys(keys))
    traced = unused_with_trace(cfg, keys)
    by_mode = unused_by_mode(cfg, [k for k in keys if not replaced_by_trace(cfg, k)])
    shown = by_mode[:MAX_SHOWN]
    if len(by_mode) > MAX_SHOWN:  # (said in the last sentence: a caller prefixes each, "The link's (and 2 more ...)")
        shown[-1] += f"; and {len(by_mode) - MAX_SHOWN:,} more settings not used"
    return ([traced] if traced is not None else []) + shown


MAX_SHOWN = 5  # sentences for settings not used: a link of hundreds of them made a wall of text
