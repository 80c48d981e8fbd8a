"""Generated combinations of features (engine presets x prefix caching with shared prompts x speculative
decoding x swap/recompute x priorities x parallel sampling x queue orders x small KV caches x sessions x
deployments: replicas with every router, xPyD with other GPU kinds and TP x limits): each runs with per-tick
invariants or stops with a documented message; the result's request table, summary and timeline agree with
each other and with the config; same config and seed, same arrays; one replica is the single engine.
Regression tests for the bugs these found come first."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from sim_core import MemoryPlanError, PresetError, config_from_dict, list_presets, load_preset, run_simulation
from sim_core.presets import read_preset_data
from sim_core.types import Status
from tests.sim_core.cluster.test_deployment import assert_same_summary
from tests.strategies import cases


# ---------------------------------------------------------------- regressions
def test_an_idle_gap_does_not_run_the_clock_past_max_sim_time():
    # arrivals every 10 s, limit 15 s: the idle row after the second request ended at the third arrival
    # (20 s), so the run reported 20 s of simulated time while saying it stopped at 15 s
    cfg = config_from_dict({"workload": {"num_requests": 4, "arrival": {"process": "constant", "rate_per_s": 0.1},
                                         "prompt_tokens": {"dist": "fixed", "mean": 100},
                                         "output_tokens": {"dist": "fixed", "mean": 4}},
                            "limits": {"max_sim_time_s": 15.0}})  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    assert "15 s of simulated time" in res.summary.stopped_reason
    assert res.summary.num_finished == 2
    assert res.summary.simulated_time_s == 15.0
    assert res.timeline.t_end_s[-1] == 15.0


def test_a_hand_off_the_run_stopped_before_is_running_not_finished():
    # 2P1D stopped by max_sim_time while prefill 1's hand-off event was still on the deployment's heap: the
    # merged table took the prefill side's FINISHED (at the first token) for a request with 1 of 8 tokens
    cfg = config_from_dict({"workload": {"num_requests": 4, "arrival": {"process": "constant", "rate_per_s": 500},
                                         "prompt_tokens": {"dist": "fixed", "mean": 1024},
                                         "output_tokens": {"dist": "fixed", "mean": 8}},
                            "deployment": {"disaggregation": {"prefill": {"replicas": 2}}},
                            "limits": {"max_sim_time_s": 0.01}})  # fmt: skip
    res = run_simulation(cfg, check_invariants=True)
    q = res.requests
    assert res.summary.stopped_reason.startswith("prefill 0: stopped at 0.01 s")
    assert np.array_equal(q.num_emitted, [1, 1, 0, 0])  # both prompts were prefilled ...
    assert not np.any(q.status == Status.FINISHED)  # ... and neither request is done
    assert np.array_equal(q.status[:2], [Status.RUNNING, Status.RUNNING])
    assert np.isnan(q.finish_s).all()
    assert res.summary.num_finished == 0 and res.summary.num_unfinished == 4


def test_a_deployment_with_speculative_decoding_reports_its_speculation():
    # the deployment's summary is recomputed over the merged table and left the speculative figures None
    # (as if speculation were off) while every instance decoded with it; one replica must be the engine
    cfg = config_from_dict({"workload": {"num_requests": 20}, "scheduler": {"speculative": {"enabled": True}}})
    one = run_simulation(cfg).summary
    dep = cfg.model_copy(update={"deployment": config_from_dict({"deployment": {"replicas": 1}}).deployment})
    assert run_simulation(dep).summary.spec_tokens_per_step == one.spec_tokens_per_step > 1
    assert run_simulation(dep).summary.spec_draft_time_s == one.spec_draft_time_s > 0
    for deployment in ({"replicas": 3}, {"disaggregation": {"prefill": {"replicas": 2}}}):
        s = run_simulation(config_from_dict(cfg.model_dump(mode="json") | {"deployment": deployment})).summary
        assert 1 < s.spec_tokens_per_step <= 1 + cfg.scheduler.speculative.num_draft_tokens
        assert s.spec_draft_time_s > 0


def test_a_deployment_stopped_before_any_busy_tick_has_no_mean_utilisation():
    # one engine's MFU/MBU mean over no busy tick is NaN; the deployment's tick-weighted mean said 0.0
    data = {"workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1.0}}, "limits": {"max_ticks": 1}}
    one = run_simulation(config_from_dict(data)).summary
    dep = run_simulation(config_from_dict(data | {"deployment": {"replicas": 1}})).summary
    assert one.num_ticks == dep.num_ticks == 0
    assert np.isnan(one.mfu_mean) and np.isnan(dep.mfu_mean) and np.isnan(dep.mbu_mean)


@pytest.mark.parametrize("hash_id", [2**61 - 1, 2**63, 2**70])
def test_a_trace_block_hash_id_the_cache_cannot_key_is_refused_naming_the_row(hash_id):
    # 2^63 and above validated, then the prefix cache's int64 arrays raised OverflowError mid-run (a traceback
    # for a link); 2^61 - 1 + k hashes as k in Python (the cache's block keys): a false prefix hit
    data = {"workload": {"num_requests": 1, "trace": {"arrival_s": [0.0], "prompt_tokens": [2048], "output_tokens": [3],
                                                      "block_hash_ids": [[5, hash_id]]}},
            "kv_cache": {"enable_prefix_caching": True}}  # fmt: skip
    with pytest.raises(PresetError, match=r"trace row 1: block hash ids must be >= 0 and <= 2305843009213693950"):
        config_from_dict(data)
    data["workload"]["trace"]["block_hash_ids"] = [[5, 2**61 - 2]]  # the largest id still runs
    assert run_simulation(config_from_dict(data)).summary.num_finished == 1


@pytest.mark.parametrize("deployment", [None, {"replicas": 1, "router": "cache_aware"}])
def test_trace_requests_share_only_the_blocks_their_hash_ids_share(deployment):
    # past its hash ids a block was keyed by -1 - r, and CPython's hash(-1) == hash(-2): requests 0 and 1 of a
    # trace shared every block after their common ids (2,032 of 2,048 prompt tokens "cached" instead of 512)
    trace = {"arrival_s": [0.0, 1.0, 2.0], "prompt_tokens": [2048] * 3, "output_tokens": [3] * 3,
             "block_hash_ids": [[7], [7], [8]], "hash_block_tokens": 512}  # fmt: skip
    cfg = config_from_dict({"workload": {"num_requests": 3, "trace": trace}, "kv_cache": {"enable_prefix_caching": True},
                            "deployment": deployment})  # fmt: skip
    s = run_simulation(cfg, check_invariants=True).summary
    assert s.prefill_tokens_saved == 512  # request 1 reuses request 0's one shared hash block, nothing else
    assert s.prefix_hit_rate_tokens == 512 / (3 * 2048)


def test_a_decode_pool_too_small_for_one_request_says_so_before_running():
    # (and the sentence reads "needs N blocks. Lower ...", not "blocks . Lower")
    data = {"workload": {"num_requests": 2, "prompt_tokens": {"dist": "fixed", "mean": 60000},
                         "output_tokens": {"dist": "fixed", "mean": 50}},
            "model": {"max_model_len": 131072},
            "deployment": {"disaggregation": {"decode": {"hardware": {"memory_gib": 19.5}}}}}  # fmt: skip
    with pytest.raises(MemoryPlanError, match=r"^decode pool: KV cache too small: .* needs 3754 blocks\. Lower "):
        run_simulation(config_from_dict(data))


FAR_DEPLOYMENTS = [{"replicas": 3, "router": r} for r in ("least_kv", "least_outstanding", "cache_aware")] + [
    {"replicas": 3, "router": "least_kv", "state_refresh_s": 0.0}, {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}}]


@pytest.mark.parametrize("arrival_s", [1e5, 1e7])
@pytest.mark.parametrize("deployment", FAR_DEPLOYMENTS)
def test_a_trace_arrival_far_past_the_time_limit_stops_a_deployment_there(arrival_s, deployment):
    # 2P2D: prefill 1 jumped to the limit before decode 0 had run request 0's last 4 tokens, and its stop ended the run
    # with request 0 unfinished. 1e7 s is the latest a trace may place a request (config.MAX_SIM_TIME_S)
    trace = {"arrival_s": [0.0, arrival_s], "prompt_tokens": [100, 100], "output_tokens": [5, 5]}
    cfg = config_from_dict({"workload": {"num_requests": 2, "trace": trace}, "deployment": deployment})
    res = run_simulation(cfg, check_invariants=True)
    assert "stopped at 3600 s of simulated time" in res.summary.stopped_reason
    assert res.requests.status.tolist() == [Status.FINISHED, Status.PENDING]
    assert res.requests.finish_s[0] < 1.0 and res.summary.simulated_time_s == 3600.0


@pytest.mark.parametrize("arrival_s", [1e18, 1e308])
@pytest.mark.parametrize("deployment", FAR_DEPLOYMENTS)
def test_a_trace_arrival_past_the_longest_run_is_refused_before_a_deployment_runs(arrival_s, deployment):
    # 1e18 overflowed the routers' tick-count bounds and 1e308 the refresh window (OverflowError) until the engine
    # learnt to stop there; no run reaches either, and the trace is now refused naming the row, the value and the range
    trace = {"arrival_s": [0.0, arrival_s], "prompt_tokens": [100, 100], "output_tokens": [5, 5]}
    with pytest.raises(PresetError, match=re.escape(f"trace row 2: arrival_s = {arrival_s} s is outside [0, 10,000,000] s")):
        config_from_dict({"workload": {"num_requests": 2, "trace": trace}, "deployment": deployment})


@pytest.mark.parametrize("field, value, words", [
    ("workload.arrival.rate_per_s", 5e-324, "out of range; allowed: >= 1e-06"),
    ("deployment.state_refresh_s", 1e-300, "must be 0 (exact) or at least 1e-06 s"),
])  # fmt: skip
def test_rates_and_refresh_intervals_the_clock_cannot_resolve_are_refused(field, value, words):
    # rate 5e-324: ZeroDivisionError drawing the gaps; refresh 1e-300 s: OverflowError in the refresh instants
    data = {"deployment": {"replicas": 2, "router": "least_kv"}, "workload": {"num_requests": 4, "sessions": {"turns": 2}}}
    section, *path, last = field.split(".")
    node = data.setdefault(section, {})
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    with pytest.raises(PresetError) as err:
        config_from_dict(data)
    assert f"{field} = {value!r}: " in str(err.value) and words in str(err.value)


# ---------------------------------------------------------------- generated combinations
ENGINES = [p for p in list_presets() if p.startswith("engine-")]
BASES = ENGINES + ["shared-system-prompt-h100-llama8b", "multi-turn-chat-h100-llama8b", "spec-decode-h100-llama8b",
                   "trace-mooncake-h100-llama8b"]  # fmt: skip
ROUTERS = ["round_robin", "least_outstanding", "least_kv", "prefix_affinity", "cache_aware", "session", "weighted_score"]


def _preset_section(family: str, name: str) -> dict:
    data = read_preset_data(family, name)
    data.pop("description", None)
    return data


@st.composite
def combined_configs(draw) -> dict:
    """A preset with several features switched on together, sized to run in a fraction of a second."""
    d = load_preset(draw(st.sampled_from(BASES))).model_dump(mode="json")
    d["seed"] = draw(st.integers(0, 999))
    wl, kv, sc, lim = d["workload"], d["kv_cache"], d["scheduler"], d["limits"]
    wl["num_requests"] = draw(st.sampled_from([1, 5, 20, 40]))
    if wl["trace"] is None:
        wl["arrival"].update(process=draw(st.sampled_from(["poisson", "gamma", "constant", "offline", "closed_loop"])),
                             rate_per_s=draw(st.sampled_from([0.5, 20.0, 500.0])), num_clients=draw(st.sampled_from([1, 8])))  # fmt: skip
        p_max, o_max = draw(st.sampled_from([64, 600, 2000])), draw(st.sampled_from([1, 16, 120]))
        wl["prompt_tokens"] = {"dist": draw(st.sampled_from(["fixed", "uniform"])), "mean": p_max // 2, "min": 1, "max": p_max}
        wl["output_tokens"] = {"dist": draw(st.sampled_from(["fixed", "uniform"])), "mean": max(o_max // 2, 1), "min": 1, "max": o_max}
        if draw(st.booleans()):
            wl["shared_prefix"] = {"num_system_prompts": draw(st.sampled_from([1, 3])), "share_ratio": draw(st.sampled_from([0.5, 1.0])),
                                   "system_prompt_tokens": {"dist": "fixed", "mean": draw(st.sampled_from([16, 700]))}}  # fmt: skip
        turns = draw(st.sampled_from([1, 1, 3]))
        wl["sessions"] = {"turns": turns, "think_time_s": draw(st.sampled_from([0.0, 0.3])), "closed_loop": draw(st.booleans()),
                          "user_tokens": {"dist": "uniform", "mean": 40, "min": 1, "max": 80}}  # fmt: skip
    wl["num_samples"] = draw(st.sampled_from([1, 1, 3]))
    if draw(st.booleans()):
        wl["classes"] = [{"name": "hi", "share": 0.25, "priority": 0}, {"name": "lo", "share": 0.75, "priority": draw(st.integers(1, 9))}]
    if kv["layout"] == "paged":
        kv["enable_prefix_caching"] = draw(st.booleans())
        kv["eviction_policy"] = draw(st.sampled_from(["lru", "lfu"]))
        kv["block_size"] = draw(st.sampled_from([1, 16, 256]))
    if draw(st.booleans()):  # KV pressure: a 1B model on a few GiB, or an 8B one on barely more than its weights
        if draw(st.booleans()):
            d["model"] = dict(d["model"], **_preset_section("models", "llama-3.2-1b"))
            d["hardware"]["memory_gib"] = draw(st.sampled_from([3.0, 3.5, 5.0]))
        else:
            d["hardware"]["memory_gib"] = draw(st.sampled_from([17.5, 18.5, 21.0]))
        kv["gpu_memory_utilization"] = draw(st.sampled_from([0.9, 1.0]))
    d["model"]["max_model_len"] = max(d["model"]["max_model_len"], 32768)
    sc["preemption"] = draw(st.sampled_from(["recompute", "swap"]))
    kv["swap_space_gb"] = draw(st.sampled_from([0.0, 0.01, 4.0]))
    sc["queue_order"] = draw(st.sampled_from(["fcfs", "priority", "shortest_prompt_first"]))
    sc["admission"] = draw(st.sampled_from([sc["admission"], "watermark", "reserve", "greedy", "new_token_ratio"]))
    sc["max_num_seqs"] = draw(st.sampled_from([sc["max_num_seqs"], 1, 4]))
    if wl["num_samples"] == 1 and draw(st.booleans()):
        sc["speculative"] = {"enabled": True, "num_draft_tokens": draw(st.integers(1, 5)),
                             "acceptance_rate": draw(st.sampled_from([0.0, 0.6, 1.0])), "draft": draw(st.sampled_from(["head", "model"]))}  # fmt: skip
    elif wl["num_samples"] > 1:
        sc["speculative"]["enabled"] = False
    tight = draw(st.sampled_from([None, None, "max_ticks", "max_sim_time_s"]))  # a run stopped by a limit, half the time
    lim.update(max_ticks=draw(st.sampled_from([1, 40])) if tight == "max_ticks" else 2_000_000,
               max_sim_time_s=draw(st.sampled_from([0.02, 2.0])) if tight == "max_sim_time_s" else 3600.0,
               coalesce_ticks=draw(st.booleans()), num_recorded_batches=draw(st.sampled_from([0, 100])))  # fmt: skip
    kind = draw(st.sampled_from(["none", "replicas", "xpyd"]))
    if kind == "replicas":
        d["deployment"] = {"replicas": draw(st.sampled_from([1, 1, 3])), "router": draw(st.sampled_from(ROUTERS)),
                           "state_refresh_s": draw(st.sampled_from([0.0, 0.05, 1.0]))}  # fmt: skip
    elif kind == "xpyd":
        pools = {}
        for role in ("prefill", "decode"):
            pool = {"replicas": draw(st.integers(1, 2)), "tensor_parallel": draw(st.sampled_from([None, 1, 2]))}
            if draw(st.booleans()):
                pool["hardware"] = _preset_section("hardware", draw(st.sampled_from(["a100-80gb", "h100-sxm", "l40s", "l4"])))
            if draw(st.booleans()):
                pool["scheduler"] = dict(sc, max_num_seqs=draw(st.sampled_from([1, 4])))
            pools[role] = pool
        link = {"bandwidth_gb_per_s": draw(st.sampled_from([None, 0.5, 50.0])), "latency_us": draw(st.sampled_from([0.0, 5000.0])),
                "layerwise_pipelining": draw(st.booleans())}  # fmt: skip
        d["deployment"] = {"disaggregation": dict(pools, link=link), "router": draw(st.sampled_from(ROUTERS))}
    return d


def _arrays(res) -> dict[str, np.ndarray]:
    out = {f"requests.{f.name}": getattr(res.requests, f.name) for f in dataclasses.fields(res.requests)}
    out |= {f"timeline.{k}": v for k, v in res.timeline.columns.items()}
    out |= {f"events.{f}": getattr(res.events, f) for f in ("req", "time_s", "kind")}
    out["itl_s"] = res.itl_s
    return out


def _same(a: dict, b: dict, ties: bool = False) -> list[str]:
    """Names of the arrays that differ. `ties`: events at one instant may come in another order (a deployment
    merges its instances' events; tests/sim_core/cluster/test_deployment.py's assert_same_run)."""
    if ties:
        a, b = dict(a), dict(b)
        for x in (a, b):
            order = np.lexsort((x["events.kind"], x["events.req"], x["events.time_s"]))
            x.update({k: x[k][order] for k in ("events.kind", "events.req", "events.time_s")})
    return [k for k in b if not np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")]


@cases(60)
@given(combined_configs())
def test_combined_features_keep_the_result_consistent_and_deterministic(data):
    try:
        cfg = config_from_dict(data)
    except PresetError as err:  # a cross-field rule: one formatted message
        event("rejected by a cross-field rule")
        assert str(err).startswith("Invalid config")
        return
    try:
        res = run_simulation(cfg, check_invariants=True)
    except MemoryPlanError as err:
        event("does not fit in memory")
        assert "GiB" in str(err)
        return
    event(f"ran: {'one engine' if cfg.deployment is None else 'xPyD' if cfg.deployment.disaggregation else 'replicas'}"
          + (" (stopped by a limit)" if res.summary.stopped_reason else ""))
    s, q, lim = res.summary, res.requests, cfg.limits
    finished = q.status == Status.FINISHED
    assert s.num_requests == cfg.workload.num_requests == q.arrival_s.size
    assert s.num_finished == int(finished.sum()) and s.num_finished + s.num_unfinished == s.num_requests
    assert np.array_equal(finished, ~np.isnan(q.finish_s))
    assert np.all(q.num_emitted[finished] == q.output_tokens[finished]) and np.all(q.num_emitted <= q.output_tokens)
    assert np.all(q.first_token_s[finished] >= q.arrival_s[finished])
    assert np.all(q.finish_s[finished] >= q.first_token_s[finished])
    if s.stopped_reason is None:
        assert s.num_finished == s.num_requests
    for part in [x.result for x in res.instances] if getattr(res, "instances", None) else [res]:
        tl = part.timeline
        assert tl.num_ticks <= lim.max_ticks
        assert np.all(np.diff(tl.t_start_s) >= 0) and np.all(tl.duration_s >= 0)
        assert np.all(tl.kv_blocks_used <= part.memory.num_blocks)
        assert tl.num_ticks == 0 or tl.t_start_s[-1] < lim.max_sim_time_s  # every tick starts before the limit
    again = run_simulation(cfg)
    assert not _same(_arrays(res), _arrays(again))
    assert s.model_dump_json() == again.summary.model_dump_json()
    dep = cfg.deployment
    if dep is not None and dep.disaggregation is None and dep.replicas == 1:  # README: the single engine bit for bit
        solo = run_simulation(cfg.model_copy(update={"deployment": None}))
        ours = _arrays(res)
        assert not _same(ours, {k: v for k, v in _arrays(solo).items() if k in ours}, ties=True)
        assert_same_summary(s.model_dump(exclude={"stopped_reason"}), solo.summary.model_dump(exclude={"stopped_reason"}))


@pytest.mark.parametrize("limit_s", [1.5, 3.0])
def test_an_xpyd_run_past_one_instances_time_limit_starts_nothing_after_the_limit(limit_s):
    # (review) After one instance stopped at its time limit the loop ran the others on, then went on taking cluster
    # events at or after the limit: transfers started at 3.05 and 3.11 s into decode 0, stopped at 3 s, with idle
    # rows on it from 3.02 to 3.11 s (the deployment's timeline and makespan ran past the limit it reports)
    data = read_preset_data("scenarios", "cluster-splitwise-llama70b-4xdgx-ha-3p1d")
    data["workload"]["num_requests"] = 300
    data["limits"] = {**data.get("limits", {}), "max_sim_time_s": limit_s}
    res = run_simulation(config_from_dict(data))
    assert f"stopped at {limit_s:g} s of simulated time" in res.summary.stopped_reason
    for x in res.instances:
        assert not np.any(x.result.timeline.t_start_s >= limit_s), x.label
    assert not np.any(res.kv_transfer_start_s >= limit_s)


def test_a_budget_stop_after_one_instances_time_limit_is_the_reason_the_deployment_gives():
    # (review) 1P1D: prefill 0 idles to the 5 s limit and stops; decode 0 runs on and the server's budget stops it
    # at its 300 ticks (about 2 s): the deployment said "prefill 0: stopped at 5 s of simulated time", hiding the budget
    from sim_core.budget import BudgetMeter, RunBudget
    from sim_core.cluster import run_deployment

    trace = {"arrival_s": [0.0, 100.0], "prompt_tokens": [100, 100], "output_tokens": [3000, 5]}
    cfg = config_from_dict({"workload": {"num_requests": 2, "trace": trace}, "limits": {"max_sim_time_s": 5.0},
                            "deployment": {"disaggregation": {}}})  # fmt: skip
    res = run_deployment(cfg, meter=BudgetMeter(RunBudget(max_ticks=600, max_wall_s=600)))  # (300 for each instance)
    assert res.summary.stopped_reason.startswith("decode 0: stopped after 300 ticks, the server's budget of 600 ticks per "
                                                 "run, 300 for each of its 2 instances")  # fmt: skip
    assert res.instances[0].result.summary.stopped_reason.startswith("stopped at 5 s of simulated time")
    unbounded = run_deployment(cfg)  # (without the budget the prefill instance's time limit is the reason)
    assert unbounded.summary.stopped_reason.startswith("prefill 0: stopped at 5 s of simulated time")


def test_a_tick_that_ends_past_the_time_limit_is_said_with_where_it_ended():
    # at 0.001 GB/s of HBM one tick runs to 32,161 s: the run said it stopped at 3,600 s beside a Finished card of
    # 32,161 s (the tick began before the limit; the guard stops the next one)
    from tests.conftest import make_config

    res = run_simulation(make_config(hardware__hbm_bandwidth_gb_per_s=0.001, workload__num_requests=4))
    reason = res.summary.stopped_reason
    assert reason.startswith("stopped at 3600 s of simulated time (limits.max_sim_time_s); its last tick, begun before it, ended at ")
    ended_s = float(reason.split("ended at ")[1].split(" s")[0].replace(",", ""))
    assert ended_s == pytest.approx(res.summary.simulated_time_s, rel=1e-5) and ended_s > 3600
