"""Beyond one engine (docs/cluster.md): replicas behind a router, disaggregated prefill/decode pools.

`run_deployment(cfg)` simulates `cfg.deployment` and returns a `ClusterResult` (a `SimResult` over the
whole deployment, plus one `SimResult` per instance). `run_simulation` calls it when a config has a
deployment section, so every caller of the single engine (CLI, sweeps, capacity search, the app)
accepts deployments unchanged.

  router.py      routing policies (round robin, least outstanding, least KV, cache-aware prefix affinity, session)
  turns.py       closed-loop multi-turn sessions: turns released by completions, routed in time order
  transfer.py    KV-transfer bytes and time over the prefill->decode link
  deployment.py  the event loop that steps several engines on one clock
  result.py      per-instance and deployment results
  trends.py      published disaggregation claims (DistServe, Splitwise, Dynamo) as trends
  measured_runs.py  DistServe's measured serving runs replayed request by request (its trend's calibrations are fitted on them)
  step_profiles.py  DistServe's published step-time profiles vs the cost model (slower than its measured vLLM)
  report.py      text for the CLI; knobs.py: the P:D split knob for sweeps

Engine hooks this package relies on (small and additive; re-apply them on a rewritten engine):
  Engine.step() -> bool       one loop iteration (guards, arrivals, tick / coalesced run / idle jump)
  Engine.horizon_s            runs and the fast path stop before it, idle jumps go no further
                              (engine: `idle_end_s`; fastpath: `max_time = min(limit, horizon_s)`)
  Engine.start_empty(), add_request(...), SimState.add_request(...)   requests added by the router
  Engine.take_arrivals_externally(), inject_prefilled(...), reserve(...), release(...)   decode side
  Engine.hand_off_prefilled / handed_off / _hand_off   prefill side: leave at the first token, KV kept
  Engine.has_work, num_outstanding (counts added, not yet arrived requests); kv.usage;
      cost.tick(0, 0, 0, 0, 0) (shortest tick, lookahead; tick_overhead_s where a swap-only tick may run)
  Engine.outstanding_bounds(t, min_tick), kv_usage_bounds(t, min_tick), kv_used_bounds(t, min_tick)   routers settle
      choices without ending runs (and the decode-side dispatch skips decode instances that cannot fit); release,
      reserve and inject_prefilled reset their memos (they change an engine's state without a tick)
  Engine.on_horizon / horizon_reached(now, num_in_run, next_arrival, num_free, num_queued): the fast path asks the cluster at
      its horizon (fastpath: `if now >= max_time: ... engine.horizon_reached(...)`) and runs on if it moves it
  Engine.may_pause / _run_fast / settle: a fast-path run paused at its horizon (fastpath.run_ticks, a generator:
      yields at the horizon, takes (horizon, decoders joined, blocks reserved)); while paused, num_outstanding,
      outstanding_bounds, kv_used_bounds, live_counts() and live_kv_usage read the run's counts, reserve and
      inject_prefilled hand their requests to the run (fastpath._join_decoders), and step() resumes it
  Engine.add_request(..., source=(workload, r)), Engine.cached_prefix_blocks(workload, r)
      -> PrefixCache.bind_slot / cached_prefix_blocks: prefix caching per replica, the cache-aware router
  Engine._finish -> st.release_next_turns(done, t_end) when workload.next_turn is set: a deployment's
      instances get a `sessions.SlotState`, which collects (slots, finish times) for turns.py (no engine edit);
      a workload that releases on finish also stops coalesced runs at each completion and skips the fast path
  Engine.result()             the single-engine result of each instance
  run_simulation(cfg)         calls run_deployment when cfg.deployment is set
"""

from __future__ import annotations

from sim_core.cluster.deployment import Deployment
from sim_core.cluster.result import ClusterResult, InstanceResult, build_result
from sim_core.config import SimConfig


def run_deployment(cfg: SimConfig, check_invariants: bool = False, meter=None) -> ClusterResult:
    """Simulate a deployment (a config without one is a single replica). Same config and seed,
    same result.

    Raises:
        MemoryPlanError: an instance does not fit in its GPUs (the message names the pool).
    """
    dep = Deployment(cfg, check_invariants)
    dep.meter = meter  # the server's budget (sim_core/budget.py), one clock for every instance and the routing between
    for inst in dep.instances:
        inst.engine.meter = meter
    if meter is not None:  # (the result is built from every instance's ticks: the meter keeps room for it)
        engines = [inst.engine for inst in dep.instances]
        meter.count_ticks = lambda: sum(e.rec.num_ticks for e in engines)
        meter.num_instances = len(engines)  # (each gets its part of the run's ticks and rows)
    dep.run()
    return build_result(dep)


__all__ = ["ClusterResult", "Deployment", "InstanceResult", "run_deployment"]
