"""Several engines on one clock: N replicas behind a router, or a prefill pool and a decode pool.

NOTE: every instance is a full `Engine` (own TP group, KV cache, scheduler, recorder) started empty;
the router adds each request to one instance (`Engine.add_request`: slot k of an instance is the
k-th request routed there, so an instance sees its own requests arrive exactly as a single engine
sees its workload). Round robin ignores state, so its choices are made up front and each replica
runs undisturbed: N replicas cost N single engines. The cluster is a discrete-event loop over
  * arrivals, for state-aware routers (least outstanding, least KV, prefix affinity),
  * hand-offs (a prefill instance emitted a first token), KV-transfer completions and retries of
    waiting hand-offs (a decode instance may have freed blocks),
  * closed-loop session turns, released when the previous turn finishes on any instance (turns.py),
and it always steps the busy instance whose clock is earliest (ties: lowest index). An event at t is
processed once every busy instance's clock has reached t, so each instance has run every tick that
starts before t and none after. Each instance's `horizon_s` (the earliest time new input can reach
it) stops its coalesced runs and idle jumps there, which is what a single engine does at its next
arrival. A state-aware router reads the replicas at its routing instants: for least_kv, prefix_affinity and
weighted_score the refresh instants of `deployment.state_refresh_s` (all arrivals of an interval are routed at its start
from the state then, router.py), or every arrival when it is 0. prefix_affinity and weighted_score read every replica
at each instant: the others wait there, paused, and the last to reach it routes inside its run (`_route_mid_run_exact`;
the fast path tells it its queue, `Engine.horizon_reached`). least_outstanding, cache_aware and least_kv over replicas settle most
choices from bounds on what they read (counts, KV usage: `Engine.outstanding_bounds`, `kv_usage_bounds`;
`Router.choose_by_bounds`), so only the replicas whose exact state could change the choice run up to the
instant; and a replica whose fast-path run reaches an instant routes it there without ending the run
(`Engine.horizon_reached` -> `_route_mid_run`: its own state is exact then), so its run goes on unless another
replica must catch up first. In xPyD a prefill instance holding no handed-off KV runs past cluster events
(nothing but a release of such KV can reach it), and a decode instance reaches only the events that need it
(`lazy_decode`): a transfer into it, and a dispatch that may choose it (round robin takes the first eligible
instance in turn; a lagging instance whose bounds rule it out is skipped, `decode_fits_by_bounds`); while
hand-offs wait for a slot every decode instance keeps up (each decode tick retries them). Otherwise instances
are independent between events.

Pausing (`pause_runs`, issue 13: cost): a fast-path run that reaches its horizon and must wait there for another
instance (a replica under a state-aware router or closed-loop sessions, a decode instance) pauses instead of ending
(`Engine.may_pause`, `fastpath.run_ticks`): ending a run writes every request's state back to the arrays and the next run sets it up
again, O(running) each, once per arrival or transfer. While it is paused its clock and counts are the run's (the
router reads them: `_seen`, `Engine.num_outstanding`, `outstanding_bounds`, `live_counts`); requests routed to it
are added as usual, and a transfer into a paused decode run joins it as a new run would set it up
(`Engine.inject_prefilled`); anything else ends it first (`Engine.settle`), as does the end of the loop. A prefill
instance runs on the fast path too (`fastpath.hands_off`): its run pauses after every row, where a general step ends,
or, holding no handed-off KV (`Engine.runs_to_horizon`), at its horizon or the earliest release of KV it hands off in the
run (`_earliest_release_s`; the same rows, about one step per request), hands requests off at their first token
inside the run, and takes the release of their blocks while paused (`Engine.release`); the loop reads it through
`Engine.has_work`, `is_busy` and `next_arrival_s`. Its idle steps extend one idle row while its state stays the same
(`Engine.merge_idle_rows`): a row ends where its own state changes (an arrival, a release of its blocks, a limit), not
at a horizon, which depends on the loop's order of steps.

With one replica this reproduces `Engine.run` exactly: the same ticks, idle gaps and request times
(tests assert it). Disaggregation follows DistServe and Splitwise: a prefill instance hands a request off at its
first token, keeping its KV blocks; the request waits (FIFO, holding those blocks) until some decode
instance has a sequence slot and the blocks for its context (reserved before the transfer); the KV is
sent over the link (transfer.py; each instance's side of it carries one transfer at a time, in dispatch order:
`LinkSides`); the prefill blocks are freed and the request joins the decode instance's running batch when the
transfer completes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from functools import partial

import numpy as np

from sim_core.budget import BudgetMeter
from sim_core.cluster.router import Router
from sim_core.cluster.transfer import KVTransfer, LinkSides
from sim_core.cluster.turns import RefreshedViews, TurnFeed
from sim_core.config import DeploymentConfig, SimConfig, pool_config, pool_field
from sim_core.costmodel import MemoryPlanError, plan_memory
from sim_core.engine import Engine
from sim_core.presets import config_with
from sim_core.sessions import SlotState
from sim_core.types import Event
from sim_core.workload import copy_workload, generate_workload

# Requests routed up front between two asks of a server's budget (`BudgetMeter.over_between_steps` looks at the clock
# every 32nd ask: every ~4,000 requests, ~20 ms)
UP_FRONT_CHUNK = 128

HANDOFF, XFER_DONE, RETRY = 0, 1, 2  # cluster event kinds (heap entries: time, seq, kind, payload)
# The kinds of `Deployment.events` as plain ints (the result reads them as int8). Each event is one int, request << 4 |
# kind (`EVENT_KIND_BITS`), in the order they happen: its time is the one its kind records for the request (kv_wait_start_s,
# kv_transfer_start_s, kv_transfer_end_s, written at the event), which the result reads from those arrays. (A
# (request, time, kind) tuple per event cost ~1,350 instructions each to read into an array, these ints and times ~430:
# issue 13, cost. And plain ints, no IntEnum members: a tuple holding one never left the garbage collector's lists, so
# each full collection walked every request's event tuples, ~80 ms in a 1.4 s run of 2P2D at 10k requests.)
KV_WAIT, KV_TRANSFER_START, KV_TRANSFER_DONE = int(Event.KV_WAIT), int(Event.KV_TRANSFER_START), int(Event.KV_TRANSFER_DONE)
EVENT_KIND_BITS = 4  # (every Event kind is below 16)


class _Running:
    """What a router reads of a replica inside its fast-path run (`Deployment._route_mid_run`): its count and KV
    usage as the run passed them (its arrays are written back when the run ends), its prefix cache as it is."""

    def __init__(self, engine: Engine, count: int, usage: float, waiting: int | None = None):
        self.engine, self._count, self._added = engine, count, engine.num_added
        self.kv = self
        self.usage = usage
        self._waiting = waiting  # (None: a paused run, which answers it itself)

    @property
    def num_outstanding(self) -> int:  # (plus what the router sends it meanwhile)
        return self._count + self.engine.num_added - self._added

    def cached_prefix_blocks(self, source, r: int) -> int:
        return self.engine.cached_prefix_blocks(source, r)

    @property
    def num_waiting(self) -> int:  # (weighted_score; plus what the router sends it meanwhile, as `num_outstanding`)
        if self._waiting is None:  # a paused run's own (`_seen`)
            return self.engine.num_waiting
        return self._waiting + self.engine.num_added - self._added


def _seen(engine: Engine):
    """What a router reads of an engine: the engine, or for one whose fast-path run is paused (`Engine.may_pause`)
    its run's counts (its arrays are written back when the run ends). (A paused engine answers its count and prefix
    matches itself, `Engine.num_outstanding`: routers that read no KV usage read the engine, `Router.reads_kv_usage`.)"""
    return engine if engine._live is None else _Running(engine, engine.num_outstanding, engine.live_kv_usage)


class _CountsAt:
    """least_kv's count bounds at instant t (`Router.choose_by_bounds` reads a replica's only where KV usages are
    equal, mostly never): a replica's worked out when first read, kept with its usage bounds (`_count_bounds`)."""

    __slots__ = ("dep", "t")

    def __init__(self, dep: Deployment, t: float):
        self.dep, self.t = dep, t

    def __len__(self) -> int:
        return len(self.dep.front)

    def __getitem__(self, j: int) -> tuple[int, int | float]:
        dep = self.dep
        counts = dep._count_bounds[j]  # (None: not worked out yet at t, `_choose_by_bounds`)
        if counts is None:
            curve = dep._curves[j]
            if curve is None:
                curve = dep._curves[j] = dep.front[j].engine.outstanding_curve()
            counts = dep._count_bounds[j] = curve.bounds(self.t, dep._front_emit_s[j])
        return counts


@dataclass
class Instance:
    engine: Engine
    role: str  # "replica" | "prefill" | "decode"
    index: int  # position within its pool
    cfg: SimConfig  # the single-engine config of this instance


class Deployment:
    def __init__(self, cfg: SimConfig, check_invariants: bool = False, route_early: bool = True,
                 mid_run_routing: bool = True, tight_horizons: bool = True, lazy_decode: bool = True,
                 pause_runs: bool = True):
        self.cfg = cfg
        self.route_early = route_early  # False: every replica reaches each arrival (the reference for tests)
        self.mid_run_routing = mid_run_routing  # False: a routing instant ends the run of the replica that reached it
        # False: every instance stops at every cluster event and one shortest tick past the other pool's clocks
        # (xPyD; the reference for tests of `_horizon`)
        self.tight_horizons = tight_horizons
        # False: every decode instance reaches every cluster event (xPyD; the reference for tests of `_dispatch_needs`)
        self.lazy_decode = lazy_decode
        # False: a fast-path run that must wait at its horizon for another instance ends there (its state written
        # back) instead of pausing (`Engine.may_pause`; the reference for tests of pausing)
        self.pause_runs = pause_runs
        dep = cfg.deployment or DeploymentConfig()
        self.dep = dep
        dis = dep.disaggregation
        self.first_token_on_decode = dis is not None and dis.first_token_from == "decode"
        if dis is None:
            specs = [("replica", config_with(cfg, {"deployment": None}, "a replica's config"), dep.replicas)]
        else:
            specs = [("prefill", pool_config(cfg, "prefill"), dis.prefill.replicas),
                     ("decode", pool_config(cfg, "decode"), dis.decode.replicas)]  # fmt: skip
        self.front: list[Instance] = []  # instances that receive arrivals
        self.back: list[Instance] = []  # decode pool (empty without disaggregation)
        # The one workload of the config (every pool's config has the same workload section and seed), drawn once:
        # each engine gets a copy instead of drawing it again (64 draws of 200k requests outlasted the run budget)
        drawn = generate_workload(cfg.workload, np.random.default_rng(cfg.seed))
        for role, pcfg, count in specs:
            for k in range(count):
                try:
                    eng = Engine(pcfg, copy_workload(drawn))
                except MemoryPlanError as err:
                    if not dis:
                        raise MemoryPlanError(str(err)) from None
                    try:  # (the same plan, its advice naming the pool's fields: its tensor_parallel, its hardware's)
                        plan_memory(pcfg, lambda path, role=role: pool_field(cfg, role, path))
                    except MemoryPlanError as named:
                        err = named
                    raise MemoryPlanError(f"{role} pool: {err}") from None
                if k == 0 and role != "decode":
                    self.workload = eng.workload  # the one workload of the config (same seed everywhere)
                eng.start_empty()
                if eng.workload.next_turn is not None:  # closed-loop sessions: finished turns go to the deployment
                    eng.st = SlotState(eng.workload, pcfg.scheduler.queue_order, pcfg.scheduler.preemption_requeue)
                if role == "decode":
                    eng.take_arrivals_externally()
                eng.hand_off_prefilled = role == "prefill"
                eng.sched.resets_token_full = role == "prefill"  # (SGLang's disaggregated prefill loop: every step)
                eng.idle_to_own_input = role == "replica"
                eng.merge_idle_rows = role == "prefill"  # (its idle rows end where its own state changes)
                eng.release_bound_s = self._earliest_release_s  # (`Engine.runs_to_horizon`)
                eng.check_invariants = check_invariants
                (self.back if role == "decode" else self.front).append(Instance(eng, role, k, pcfg))
        self.instances = self.front + self.back
        self._engines = [x.engine for x in self.instances]  # (`_earliest`: the loop's scan, every pass)
        self._all_ids = tuple(range(len(self.instances)))
        self._front_ids = tuple(range(len(self.front)))
        self._back_ids = [(len(self.front) + d,) for d in range(len(self.back))]  # (`_gating_back`: a transfer's)
        # Lookahead: no tick is shorter than an empty one (the cost model is monotone in the batch), so an
        # instance at `now` cannot emit anything before now + this; the other pool may run that far ahead.
        # (A scheduler that pre-empts by swapping may run a tick that only swaps KV: no forward pass, its fixed
        # overhead plus PCIe time, `CostModel.tick`; the fixed overhead bounds it.)
        self.min_tick_s = [x.engine.cost.tick_overhead_s if x.engine.sched.use_swap else float(x.engine.cost.tick(0, 0, 0, 0, 0)[0])
                           for x in self.instances]  # fmt: skip
        # A request emits a token only in a tick that computes one token for one sequence at least, so the ticks that
        # bring a request to its finish are each no shorter than this one (Engine.outstanding_bounds).
        self.min_emit_tick_s = [float(x.engine.cost.tick(1, 1, 1, 0, 1)[0]) for x in self.instances]
        wl = self.workload
        self.num_requests = R = wl.num_requests
        self.arrival_s = wl.arrival_s
        # cache_aware's tree of routed prompts holds at most as many blocks per instance as its GPU KV cache
        self.router = Router(dep.router, len(self.front), wl, cfg.kv_cache.block_size,
                             tree_blocks=min(x.engine.kv.num_blocks for x in self.front))  # fmt: skip
        self.back_router = Router(dep.router, max(len(self.back), 1))
        self.link = dis.link if dis else None
        self.num_layers = cfg.model.num_layers
        # (`_dispatch`: bytes and time; the bytes per token are the sender's, a prefill instance's, draft layers included)
        self._transfer = KVTransfer(self.front[0].cfg, self.link, self.num_layers) if dis else None
        # Each instance's side of the link, shared by the transfers it sends or receives (transfer.py; None: each
        # transfer gets the whole bandwidth, link.contention = none)
        self._sides = LinkSides(self._transfer, len(self.instances)) if dis and dis.link.contention == "fifo" else None
        # Per request: where it ran (instance and slot there) and its KV transfer (-1 / NaN: not applicable).
        self.instance_of = np.full(R, -1, dtype=np.int64)  # front instance (index into self.instances)
        self.decode_of = np.full(R, -1, dtype=np.int64)  # decode instance (index into self.instances)
        self.slot_of = np.full(R, -1, dtype=np.int64)  # slot on its front instance
        self.decode_slot_of = np.full(R, -1, dtype=np.int64)
        self.ids_of: list[list[int]] = [[] for _ in self.instances]  # per instance: request id of each slot
        self.injected = np.zeros(R, dtype=bool)  # joined its decode instance
        self.kv_wait_start_s = np.full(R, np.nan)
        self.kv_transfer_start_s = np.full(R, np.nan)
        self.kv_link_start_s = np.full(R, np.nan)  # its bytes start moving: later than the start when the link was busy
        self.kv_transfer_end_s = np.full(R, np.nan)
        self.kv_transfer_bytes = np.full(R, np.nan)
        self.events: list[int] = []  # the cluster's events, request << EVENT_KIND_BITS | kind, in order (above)
        self._heap: list[tuple[float, int, int, tuple]] = []
        self._seq = 0
        self._pending: deque[tuple[int, int, float]] = deque()  # (request, prefill instance, ready time)
        self._incoming = [0] * len(self.back)  # reserved, transfer in flight
        self._decs = [x.engine for x in self.back]  # (`_dispatch`: the decode engines, listed once)
        # Blocks a context needs are the same on every decode instance when their block managers are alike (one pool
        # config: always, today); `_dispatch` then asks one of them
        self._same_blocks = len({(e.kv.block_size, e.kv.num_samples, e.kv._contiguous_blocks) for e in self._decs}) == 1
        # (request, blocks it needs on each decode instance, its slot, context and prompt on its prefill instance): `_dispatch`
        self._head_need: tuple[int, list[int], int, int, int] = (-1, [], -1, 0, 0)
        self._held = [0] * len(self.instances)  # prefill instance: handed-off requests whose KV blocks it still holds
        self.stopped_reason: str | None = None
        self.meter: BudgetMeter | None = None  # the server's budget (run_deployment); its engines' steps ask it, and routing
        # A dispatch at `_dispatch_t` waits for the decode instances in `_dispatch_need` to reach it (`_dispatch`)
        self._dispatch_t: float | None = None
        self._dispatch_need: list[int] = []
        self.state_free = self.router.is_state_free
        # least_kv / prefix_affinity / weighted_score see engine state as of the last refresh instant (deployment.state_refresh_s):
        # every arrival of one refresh interval is routed at its start, and replicas pause once per interval
        self.refresh_s = dep.state_refresh_s if self.router.reads_engine_state else 0.0
        # Closed-loop sessions (turns.py): every arrival is routed at its time, in time order with the first turns
        # (a turn can be released into an interval whose other arrivals would already be routed), and round robin's
        # plan cannot be made up front (release times are unknown). least_kv routes each on the engines as they
        # were at the last refresh instant (turns.RefreshedViews: each instance's KV usage and finished count there,
        # plus the requests sent since); prefix_affinity and weighted_score on the exact state: their view at a refresh instant is each
        # engine's whole prefix cache, which would have to be copied at every refresh (docs/cluster.md, Beyond one engine).
        self.turns = TurnFeed(wl) if wl.next_turn is not None else None
        self.views: RefreshedViews | None = None
        # Per replica slot (closed-loop sessions): the think time after which its request's finish sends the session's
        # next turn, inf for a session's last turn (`_first_release_after_s`)
        self._slot_think_s: list[np.ndarray] | None = None
        self._release_memo: list[tuple | None] = [None] * len(self.instances)  # (`_first_release_after_s`)
        # Closed-loop sessions over replicas behind a router that reads no state (round robin, session): the next
        # arrival is routed as soon as no turn still to be released can come before it (`_release_bounds_s` over every
        # replica), not once every replica has reached it, so a replica's runs stop only at its own arrivals and where
        # another replica may release a turn (lesson 14's 4 replicas: each arrival cut all four runs)
        self._turns_ahead = self.turns is not None and not self.back and self.router.is_state_free and route_early
        self._pass_bounds: list[float] | None = None  # (`_release_bounds_s` of this loop pass: turns or views ahead, early choice)
        if self.turns is not None:
            self.state_free = False
            if self.refresh_s and self.router.policy == "least_kv":
                self.views = RefreshedViews([x.engine for x in self.front], self.refresh_s)
            self.refresh_s = 0.0
            if not self.back:
                self._sends_after_s = np.where(wl.next_turn >= 0, wl.think_s, np.inf).tolist()
                self._slot_think_s = [np.full(R, np.inf) for _ in self.front]
        # least_kv's views over replicas: an arrival is routed once every replica has reached the refresh instant it is
        # routed on and no turn still to be released can come before it, not once every replica has reached the
        # arrival itself (each replica stopped twice per arrival, at the instant and at the arrival: `_views_reached`)
        self._views_ahead = self.views is not None and not self.back and route_early
        # xPyD: a decode instance runs up to a cluster event only when the event needs it (a transfer into it, a
        # dispatch that may choose it); the others lag behind, their runs uncut (`_gating_back`, `_dispatch`).
        # (Closed-loop sessions: a decode instance's completions release turns, so every instance keeps up.)
        self._lazy = bool(self.back) and lazy_decode and self.turns is None
        # Per instance: the instant of the bounds last worked out for it (`_choose_by_bounds`), in `_count_bounds` and
        # `_usage_bounds`; dropped (None)
        # when it steps or is sent a request (nothing else changes a replica under a router that reads bounds). A
        # choice that stays open is tried again at the same instant once a rival reaches it: the others' bounds then
        # are these (issue 13: cost).
        self._bounds_at: list[float | None] = [None] * len(self.instances)
        # Per front instance, its bounds at that instant: (low, high) on its count (least_kv: None until the router
        # reads them, `_CountsAt`) and, for least_kv, on its KV usage; the lists the router is given at every choice
        # (kept, not made again at each: an instance's entries change only where its bounds do)
        self._count_bounds: list = [(0, 0)] * len(self.front)
        self._usage_bounds: list = [(0.0, 0.0)] * len(self.front)
        # Per front instance: its count bounds at every instant (`Engine.outstanding_curve`), kept until it steps;
        # a request sent to it joins them (`_add`)
        self._curves: list = [None] * len(self.instances)
        self._front_emit_s = self.min_emit_tick_s[: len(self.front)]
        # least_kv: per front instance whose run is paused, its KV bounds at every instant (`Engine.live_kv_curve`;
        # False: the engine's own), kept as `_curves`
        self._kv_curves: list = [None] * len(self.instances)
        self._num_blocks = [x.engine.kv.num_blocks for x in self.front]
        self._bound_fns = [(x.engine.outstanding_bounds, x.engine.kv_usage_bounds, self.min_emit_tick_s[j])
                           for j, x in enumerate(self.instances)]  # (`_choose_by_bounds`)  # fmt: skip
        # Without closed-loop sessions arrival times are fixed: each request's routing instant, listed once (the
        # loop and the mid-run router read them at every arrival; issue 13: cost)
        self._instants: list[float] | None = None
        self._requests: list[tuple] | None = None  # (arrival, prompt, output, priority, class) per request (`_add`)
        if self.turns is None:
            times = self.arrival_s.tolist()
            self._instants = [self._instant(t) for t in times] if self.refresh_s else times
            self._requests = list(zip(times, wl.prompt_tokens.tolist(), wl.output_tokens.tolist(), wl.priority.tolist(),
                                      wl.class_idx.tolist()))  # fmt: skip

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        R = self.num_requests
        self._ptr = 0  # next request to route (the mid-run router, `_route_mid_run`, advances it too)
        if self.state_free:  # round robin, session: every choice now (they read no state), arrivals stay in order
            plan = self.router.up_front_plan(R).tolist()
            # (under a server's budget, in chunks that ask it between them: at the largest set-up it admits this loop took
            # 1-1.8 s of a 5 s budget before the first tick's check; a budget check every UP_FRONT_CHUNK requests at most)
            chunk = R if self.meter is None else UP_FRONT_CHUNK
            for start in range(0, R, chunk):
                for r in range(start, min(start + chunk, R)):
                    self._add(r, plan[r])
                self._ptr = min(start + chunk, R)
                if self._routing_over_budget():
                    break
        self._time_stopped = False  # an instance stopped at limits.max_sim_time_s (the others run on to theirs)
        self._stops: list[tuple[float, int, str]] = []  # (clock, instance, reason) of each instance stopped at its limit
        # instance -> why it cannot go on now: requests wait that it cannot admit and nothing can reach it (its horizon is
        # infinite). It waits as a stalled one does (another instance's hand-off may still bring an event), and names the
        # run's stop if nothing else moves (`run`)
        self._never: dict[int, str] = {}
        stalled: set[int] = set()
        self._stalled = stalled  # (`_dispatch`: a stalled decode instance's state is its state at the instant)
        insts = self.instances
        # least_outstanding and cache_aware over replicas settle a choice from count bounds where they can (Router.choose_by_bounds):
        # only the replicas whose exact count matters run up to the arrival, the others keep their coalesced runs.
        # Under closed-loop sessions too, for an arrival no turn still to be released can come before (`_pass_bounds`;
        # lesson 14's 4 replicas under least_outstanding: every arrival cut all four runs), though not least_kv on
        # refreshed views (they are made at the instants, `_views_ahead`)
        self._early = self.route_early and not self.back and self.router.decides_on_bounds and self.views is None
        # prefix_affinity and weighted_score read every replica at each instant: the last to reach it routes there without
        # ending its run
        self._mid_exact = (self.route_early and not self.back and self.turns is None
                           and self.router.policy in ("prefix_affinity", "weighted_score"))  # fmt: skip
        # (the mid-run router reads the listed arrival instants: none under closed-loop sessions, whose turns are
        # routed by the loop; their runs end at their first finished turn anyway, `fastpath` turn_out)
        if (self._early or self._mid_exact) and self.mid_run_routing and self.turns is None:
            route = self._route_mid_run_exact if self._mid_exact else self._route_mid_run  # (chosen once, not at each call)
            for j, x in enumerate(insts):  # without ending its run, and waits there for the others without ending it
                x.engine.on_horizon = partial(route, j)
                x.engine.may_pause = self.pause_runs
        if self.back and self.turns is None:  # a decode instance's run waits at its horizon for events without ending
            for x in insts:  # (requests injected meanwhile join it: Engine.inject_prefilled), and a prefill instance's
                x.engine.may_pause = self.pause_runs  # across its hand-offs and idle gaps (fastpath.hands_off)
        if self.turns is not None and not self.back:
            # Closed-loop sessions over replicas: a run cut where another replica may release a turn first, or at the
            # next turn's arrival, pauses there (the loop routes the turn; the replica it goes to takes it when its run
            # goes on). Ended, lesson 14's 4 replicas under prefix_affinity wrote back and set up 4,479 runs of ~12
            # ticks for 1,000 turns. A run still ends at its first finished turn (`fastpath` turn_out), where the
            # session's next turn is released (least_kv's refreshed views note a paused run's KV usage and queue).
            for x in insts:
                x.engine.may_pause = self.pause_runs and x.engine.spec is None
        focus: list[int] = []  # replicas that must reach the next arrival before its choice is settled
        focus_for = -1  # (closed-loop sessions: the request that focus is for; a turn released meanwhile may come first)
        self._hint: tuple[int, list[int]] | None = None  # (request, rivals): `_route_mid_run`'s unsettled try
        instants = self._instants  # (listed without closed-loop sessions: read here without a call, every pass)
        if self.stopped_reason is not None:  # the server's budget stopped the up-front routing: no instance has stepped
            return
        while True:
            ptr = self._ptr
            t_arr = math.inf if ptr >= R else instants[ptr] if instants is not None else self._routing_instant(ptr)
            r_next, ptr_ahead = ptr, ptr < R  # (the request routed next, and whether the early choice may route it)
            if self.turns is not None:
                nxt = self.turns.peek()
                t_arr = nxt[0] if nxt is not None else math.inf
                # (each replica's bound, worked out once per pass: `_horizon` reads them for the replica this pass
                # steps, whose state is the same; routing starts a new pass)
                self._pass_bounds = (self._release_bounds_s() if self._turns_ahead or self._views_ahead or self._early
                                     else None)  # fmt: skip
                ahead = self._pass_bounds is not None and t_arr < min(self._pass_bounds)  # (no later release comes first)
                if ahead and (self._turns_ahead or self._views_ahead and self._views_reached(t_arr)):
                    self._ptr = self._route(ptr)
                    stalled.clear()
                    if self._routing_over_budget():
                        break
                    continue
                # (the early choice below: only for the next arrival known, nothing released before it)
                r_next, ptr_ahead = (nxt[1], True) if ahead else (-1, False)
                if r_next != focus_for:
                    focus, focus_for = [], r_next
            t_heap = self._heap[0][0] if self._heap else math.inf
            if self._time_stopped and self.back and min(t_arr, t_heap, math.inf if self._dispatch_t is None else self._dispatch_t) >= (
                    lim_s := self.cfg.limits.max_sim_time_s) and not self._busy_before(lim_s):  # fmt: skip
                # (an instance stopped at its time limit and every other has reached it: input at or after the limit,
                # or a dispatch waiting there, starts nothing, as when one engine stops there; taking it started
                # transfers after the limit into a stopped decode instance, with idle rows past its stop. Not for
                # replicas (review 24): routing from bounds takes arrivals past the limit before any replica has
                # stopped, so ending here left them routed or not by the loop's order of steps; a replica's state past
                # the limit is its state at its stop, so every arrival is routed, the same in every order)
                break
            if self._early and ptr_ahead:  # (no cluster events without a decode pool)
                if focus:  # (none after a mid-run routing: no call for nothing)
                    focus = self._behind(focus, t_arr, stalled)
                if not focus:
                    hint, self._hint = self._hint, None
                    # (the mid-run router's last unsettled try at this arrival, in the step just made: nothing has
                    # changed since, so the same choice from the same bounds would be unsettled with these rivals)
                    pick, focus = (None, hint[1]) if hint is not None and hint[0] == r_next else self._choose_by_bounds(r_next, t_arr)
                    if pick is not None:
                        if self.turns is not None:
                            self.turns.pop()
                        self._add(r_next, pick)
                        self._ptr += 1
                        stalled.clear()
                        if self._routing_over_budget():
                            break
                        continue
                    focus = self._behind(focus, t_arr, stalled)
                    if not focus:  # a stalled replica keeps its bounds open (idle_stopped): every replica reaches arrivals now
                        self._early = False
                        continue
                i = focus[0] if len(focus) == 1 else min(focus, key=self._clock_order)
            elif self._dispatch_t is not None:  # a dispatch waits for decode instances to reach its instant
                t_d = self._dispatch_t
                i = self._dispatch_waits_for(stalled)
                if i is None:
                    self._dispatch(t_d)
                    stalled.clear()
                    continue
            else:
                t_ev = min(t_arr, t_heap)
                back = self._gating_back(t_arr, t_heap)
                i = self._earliest(stalled, back)
                if i is None and back is not None and not math.isfinite(t_ev):  # nothing can bring input any more
                    i = self._earliest(stalled)
                t_e = insts[i].engine.st.now_s if i is not None else math.inf
                if t_ev <= t_e:
                    if not math.isfinite(t_ev):
                        break
                    if t_heap > t_arr:
                        self._ptr = self._route(ptr)
                        stalled.clear()
                        if self._routing_over_budget():
                            break
                        continue
                    self._pop_event()
                    stalled.clear()
                    if self._dispatch_t is None or self._time_stopped:
                        continue
                    # The event's dispatch waits for decode instances (a hand-off, mostly): the next pass would step
                    # the first of them (the branch above), so this one does (one loop pass fewer per such hand-off)
                    i = self._dispatch_waits_for(stalled)
                    if i is None:
                        self._dispatch(self._dispatch_t)
                        continue
                    t_heap = self._heap[0][0] if self._heap else math.inf
            inst = insts[i]
            eng = inst.engine
            if self.views is not None and inst.role != "decode":
                self.views.note(i)  # its state now is its state at the refresh instants it has passed
            eng.horizon_s = self._horizon(i, t_arr, t_heap)
            if inst.role == "prefill":  # (its horizon holds until its own hand-offs: its run may go on across rows)
                eng.runs_to_horizon = self._free_running(i) and self.turns is None
            before = (eng.st.now_s, eng.rec.num_ticks)
            self._bounds_at[i] = self._curves[i] = self._kv_curves[i] = None
            self._hint = None
            if not eng.step():
                reason = self._stop_reason(inst)
                if eng.idle_stopped and not (i in self._never and i in stalled):
                    # "waiting requests can never be admitted" as far as it can see now: it waits as a stalled instance
                    # does, and the run ends there only when it is asked again with nothing moved since. Ending the run
                    # at once left the others wherever the loop's order of steps had taken them (a 2P2D under
                    # limits.max_ticks: with paused runs the other prefill instance had run its last chunk and handed
                    # off, unpaused it had not, and that request's first token was there or not)
                    self._never[i] = reason
                    eng.reopen()
                    stalled.add(i)
                    continue
                if not _stops_alone(eng):  # the server's wall-clock or memory budget: the whole run stops now
                    self.stopped_reason = reason
                    break
                # Its own limit (simulated time or ticks): it has no work now (Engine.has_work) and every other instance
                # runs on to its own, so where each stops follows from the config, not from the loop's order of steps
                # (ending the whole run at the first cap left the others wherever that order had taken them)
                self._stops.append((eng.st.now_s, i, reason))
                if eng.st.now_s >= eng.cfg.limits.max_sim_time_s:
                    self._time_stopped = True
                stalled.clear()
                continue
            if i in self._never:  # (it moved: an event reached it)
                del self._never[i]
                eng.stopped_reason = None
            if (eng.st.now_s, eng.rec.num_ticks) == before:
                if not eng.run_ended:
                    stalled.add(i)  # waits for another instance or an event
                    continue
                # (the unpaused reference: a step that ended a run where a paused one would end, with nothing to run;
                # that paused run's end writes its rows back, a step that moved: it is one here too, `Engine.run_ended`)
                eng.run_ended = False
            stalled.clear()
            if self._ptr != ptr:  # routed mid-run: the focus was for an arrival now settled
                focus = []
            if self.turns is not None and eng.st.finished_turns:
                self._release_turns(i)
            if eng.handed_off:
                for slots, t in eng.handed_off:
                    self._push(t, HANDOFF, (i, slots))
                    self._held[i] += slots.size
                eng.handed_off.clear()
            if inst.role == "decode" and self._pending and self._dispatch_t is None:
                self._push(eng.st.now_s, RETRY, ())  # (not while catching up with a dispatch: it was before it)
            elif self._dispatch_t is not None and self._dispatch_waits_for(stalled) is None:
                # (the catch-up a dispatch waited for is done: the next pass would make it and nothing else, so it is
                # made in this one; one loop pass fewer per hand-off that waits for a decode instance)
                self._dispatch(self._dispatch_t)
        for x in insts:  # (a run paused at its horizon when the loop ended: its state goes to the arrays)
            x.engine.settle()
        if self._time_stopped and self.stopped_reason is None:
            # (xPyD: the loop ends once every instance has reached the time limit; one that reached it with work left
            # stops there at its next step, as every other did: it is stopped now, whether or not the loop's order of
            # steps had it take that step, so each instance's stop and the run's name do not depend on that order)
            lim_s = self.cfg.limits.max_sim_time_s
            for i, x in enumerate(insts):
                eng = x.engine
                if eng.has_work and eng.st.now_s >= lim_s and not eng.step():
                    self._stops.append((eng.st.now_s, i, self._stop_reason(x)))
        if self.stopped_reason is None and self._never:  # (the lowest-numbered instance left waiting for good)
            self.stopped_reason = self._never[min(self._never)]
        if self.stopped_reason is None and self._stops:  # the earliest stop names the run's (ties: lowest index)
            self.stopped_reason = min(self._stops)[2]
        if self.stopped_reason is None and self._pending:
            self.stopped_reason = (f"stopped: {len(self._pending):,} prefilled requests wait for a decode slot that "
                                   "never frees (decode pool KV cache or max_num_seqs too small)")  # fmt: skip
        elif self.stopped_reason is None and any(e.has_work for e in self._engines):
            self.stopped_reason = "stopped: waiting requests can never be admitted (KV cache or limits too small)"

    def _stop_reason(self, inst: Instance) -> str:
        """An instance's stopped_reason, named as the run's ("decode 1: stopped after ...")."""
        name = f"{inst.role} {inst.index}" if len(self.instances) > 1 else inst.role
        return f"{name}: {inst.engine.stopped_reason or 'stopped'}"

    def _routing_over_budget(self) -> bool:
        """After a routing step: whether the server's budget stops the run (its wall time or memory). Routing makes no
        engine step, so the engines' own checks never see it, and replicas that all stopped at their time limit still
        route every later arrival (200k of them: seconds); its reason is then the run's."""
        if self.meter is None:
            return False
        over = self.meter.over_between_steps(lambda: sum(e.rec.num_ticks for e in self._engines))
        if over is not None:
            self.stopped_reason = f"routing: {over}"
        return over is not None

    # (The loop's scans are methods, not comprehensions or lambdas in `run`: those would make its locals, `self` among
    # them, closure cells, read and written more dearly at every pass)
    def _behind(self, ids: list[int], t: float, stalled: set[int]) -> list[int]:
        """Of the instances `ids` (in that order), those that must still reach t: busy, not stalled, clock before t."""
        engines, out = self._engines, []
        for j in ids:
            eng = engines[j]
            if eng.st.now_s < t and j not in stalled and eng.has_work:  # (the clock first: the cheapest test, and an
                out.append(j)  # instance that stepped to t fails it)
        return out

    def _clock_order(self, j: int) -> tuple[float, int]:
        """Instance j's place in the loop's order of steps: earliest clock first, ties to the lowest index."""
        return self._engines[j].st.now_s, j

    def _busy_before(self, t: float) -> bool:
        """Some instance has work and a clock before t."""
        for eng in self._engines:
            if eng.has_work and eng.st.now_s < t:
                return True
        return False

    def _choose_by_bounds(self, r: int, t: float):
        """`Router.choose_by_bounds` for request r routed at t, from every replica's bounds at t (kept in `_count_bounds`
        and `_usage_bounds`, at the instants in `_bounds_at`: a replica whose exact state is known there, `_route_mid_run`'s,
        has its exact values there); the router is given those lists themselves, each replica's entry worked out again
        only where its instant is not t (issue 13: cost; a list and a tuple per replica made at each choice before)."""
        curves, cache = self._curves, self._bounds_at
        # (each replica's count curve and shortest emitting tick, kept: this runs at every arrival)
        if self.router.policy != "least_kv":
            bounds = self._count_bounds
            for j in self._front_ids:
                if cache[j] != t:  # (an open choice's retry at t: the bounds of the others unchanged since)
                    curve = curves[j]
                    if curve is None:
                        curve = curves[j] = self._engines[j].outstanding_curve()
                    bounds[j] = curve.bounds(t, self._front_emit_s[j])
                    cache[j] = t
            return self.router.choose_by_bounds(bounds, r)
        kv_curves, num_blocks = self._kv_curves, self._num_blocks
        counts, usage = self._count_bounds, self._usage_bounds
        for j, (_, g, m) in enumerate(self._bound_fns):
            if cache[j] != t:
                # No cheap bound on a replica's usage (None): its usage from 0 up beats any other's but an exact 0,
                # so it must reach t all but always, and its count bounds are not worked out: (0, inf) holds too
                # (weaker bounds cost catch-ups, never a choice)
                kv_curve = kv_curves[j]
                if kv_curve is None:  # (False: not a paused run's, the engine's bounds: `kv_usage_bounds`)
                    kv_curve = kv_curves[j] = self.front[j].engine.live_kv_curve() or False
                if kv_curve:  # (`kv_usage_bounds` from the paused run's curve, kept until it steps)
                    used = kv_curve.bounds(t, m)
                    u = None if used is None else (used[0] / num_blocks[j], used[1] / num_blocks[j])
                else:
                    u = g(t, m)
                # (its count bounds only if the router asks: where usages are equal, `_CountsAt`)
                counts[j], usage[j] = ((0, math.inf), (0.0, math.inf)) if u is None else (None, u)
                cache[j] = t
        return self.router.choose_by_bounds(_CountsAt(self, t), r, usage)

    def _route_mid_run(self, i: int, eng: Engine, now_s: float, count: int, usage: float, waiting: int) -> float:
        """`Engine.on_horizon` of replica i (least_outstanding, cache_aware): its fast-path call has run every tick
        that starts before `now_s`, so `count` is its exact count at every routing instant up to `now_s` (its next
        tick starts then). Routes those arrivals while the other replicas' count bounds settle each choice (as the
        loop does, `choose_by_bounds`; the choice may be i itself: the request joins before its next tick) and
        returns i's next horizon: the next arrival, or `now_s` (stop) when another replica must reach one first.
        (prefix_affinity and weighted_score: `_route_mid_run_exact` instead.)"""
        R = self.num_requests
        instants, cache = self._instants, self._bounds_at  # (no closed-loop sessions here: listed)
        counts, usages = self._count_bounds, self._usage_bounds
        # (an added request holds no block: its KV usage at every instant up to now_s; read by least_kv only)
        exact_usage = (usage, usage)
        while self._early and self._ptr < R:
            r = self._ptr
            t = instants[r]
            if t > now_s:
                return t
            # its exact values at t, where the choice reads its bounds (kept until it steps or is sent a request, as any
            # replica's: a rival that catches up with an open choice reads them there instead of making its count curve)
            counts[i], usages[i], cache[i] = (count, count), exact_usage, t
            pick, rivals = self._choose_by_bounds(r, t)
            if pick is None:
                self._hint = (r, rivals)  # (the loop takes these as its focus: `run`)
                break
            self._add(r, pick)
            self._ptr += 1
            count += pick == i
        return math.inf if self._ptr >= R else now_s

    def _route_mid_run_exact(self, i: int, eng: Engine, now_s: float, count: int, usage: float, waiting: int) -> float:
        """`_route_mid_run` for prefix_affinity and weighted_score, which read every replica's exact state (weighted_score:
        i's `waiting` requests queued, swapped out or added and not arrived, the run's own count): the arrivals up to `now_s` once
        every other busy replica has reached them (a method of its own: its comprehensions would make the other's
        locals closure cells, dearer at every stop)."""
        R = self.num_requests
        instants = self._instants
        # (a paused replica answers its count and prefix matches itself, `Engine.num_outstanding`: a view of its run,
        # `_seen`, only for a router that reads KV usage; ~300 instructions fewer per paused replica and instant)
        seen = [_seen(e) for e in self._engines[: len(self.front)]] if self.router.reads_kv_usage else self._engines[: len(self.front)]
        while self._ptr < R:
            t = instants[self._ptr]
            if t > now_s:
                return t
            if self._busy_before_except(i, t):
                return now_s
            live = seen[i] = _Running(eng, count, usage, waiting)
            self._ptr = self._route(self._ptr, seen)
            count, waiting = live.num_outstanding, live.num_waiting
        return math.inf

    def _busy_before_except(self, i: int, t: float) -> bool:
        """Some front instance but i has work and a clock before t (a loop, not `any` over a generator: a frame fewer
        per instance, at every instant a replica reaches)."""
        j = 0
        for eng in self._engines[: len(self.front)]:
            # (the clock first: the cheapest test, and the one that fails once every replica has reached t)
            if eng.st.now_s < t and j != i and eng.has_work:
                return True
            j += 1
        return False

    def _earliest(self, stalled: set[int], back: tuple[int, ...] | None = None) -> int | None:
        """The busy instance with the earliest clock (ties: lowest index), among the front instances and the
        decode instances in `back` (None: all)."""
        best, best_t = None, math.inf
        engines = self._engines
        # (the candidates in index order, listed once: with lazy_decode most passes leave every decode instance out)
        for i in self._all_ids if back is None else self._front_ids + back if back else self._front_ids:
            eng = engines[i]
            t = eng.st.now_s  # (the clock first: the cheapest test, and most instances fail it)
            if t < best_t and i not in stalled and eng.has_work:
                best, best_t = i, t
        return best

    def _gating_back(self, t_arr: float, t_heap: float) -> tuple[int, ...] | None:
        """The decode instances that must reach the next cluster event before it is processed (None: all). Without
        lazy_decode, or with hand-offs waiting (their retries follow every decode tick): all. Otherwise only a
        transfer's decode instance (it joins the batch there; none when no event is left: the busy front instances
        run first, as they may hand off); a hand-off's dispatch asks for the instances it needs (`_dispatch`), and
        arrivals reach only front instances. A decode instance left behind
        gets no input before the instant it next has to reach (its runs until then are what they would be). An event
        at or past limits.max_sim_time_s: all (the run ends there once every instance has reached the limit; routing
        it with decode instances behind took input the reference never takes)."""
        if not self._lazy or self._pending or self.cfg.limits.max_sim_time_s <= min(t_arr, t_heap) < math.inf:
            return None
        if t_heap <= t_arr and self._heap:
            _, _, kind, payload = self._heap[0]
            if kind == XFER_DONE:
                return self._back_ids[payload[1]]
        return ()

    def _horizon(self, i: int, t_arr: float, t_heap: float) -> float:
        """Earliest time new input may reach instance i: the next arrival still to be routed (reaches
        a replica, or an idle prefill instance that may hand off soon after), the next cluster event,
        and the clock of any busy instance of the other pool plus its shortest possible tick (its next
        tick may hand off a request or free decode blocks, no earlier)."""
        if not self.back and self.turns is None:  # (replicas: nothing below applies to them; at every pass of the loop)
            return t_arr if t_arr < t_heap else t_heap
        inst = self.instances[i]
        # A prefill instance's only input from the cluster is the release of the KV blocks of requests it handed
        # off (at their transfer's end; a dispatch at any event may start one, and a decode instance's next tick
        # may free blocks for one): holding none, it runs to its next routed arrival whatever the events.
        free_running = self._free_running(i)
        if free_running and self.turns is None:  # (nothing below bounds it then: most prefill steps)
            return t_arr
        h = t_arr if free_running else min(t_heap, t_arr)  # t_arr: a state-aware router's next choice (inf once all are routed)
        st = inst.engine.st
        if self.turns is not None:
            # (the earliest another busy instance may release a session's next turn, this loop pass's bounds when worked
            # out; instance i itself stops its runs at its first completion)
            bounds = self._pass_bounds if self._pass_bounds is not None else self._release_bounds_s()
            others = min((b for j, b in enumerate(bounds) if j != i), default=math.inf)
            if others < h:
                h = others
            if self.views is not None and inst.role != "decode":  # stop where the router's view is refreshed
                stop = self.views.next_instant_s(inst.engine)
                if not self.back and self.route_early:  # (route_early False: every instant, the tests' reference)
                    # Replicas: only at an instant an arrival can still be routed on. None comes before the next turn
                    # known or any replica's next release, its own included (a turn released by its run's last tick),
                    # so the instants before the one at or before that bound are never read (lesson 14 under least_kv:
                    # its four replicas stopped at every 0.05 s, 14,000 runs and 9 s of CPU for 1,000 requests)
                    stop = max(stop, self.views.instant_at_or_before_s(min(t_arr, others, bounds[i])))
                if stop < h:
                    h = stop
        if inst.role == "decode" and self._dispatch_t is not None:
            h = min(h, self._dispatch_t)  # (the dispatch was popped off the heap: it waits for this instance)
        elif inst.role == "decode" and self._pending and inst.engine.num_in_run():  # (something runs: ticks to come)
            # Hand-offs wait for decode room (back-pressure; not a dispatch waiting for catch-ups, above): a retry
            # follows each decode step (`run`), and any tick may free blocks or a batch slot; a run of several ticks
            # retried only at its end, later than one tick at a time (the tick-by-tick deployment): later transfers
            # and finish times (review 22).
            h = min(h, math.nextafter(st.now_s, math.inf))  # (one tick: the tick that starts now)
        # A decode tick matters to a prefill instance only through retries of waiting hand-offs (lazy_decode: with
        # none waiting every KV it holds is in flight, its release on the heap; and lagging decode clocks say nothing)
        decode_ticks_matter = inst.role != "prefill" or not self._lazy or self._pending
        eng = inst.engine
        # (A prefill instance holding KV while hand-offs wait for a decode slot is bounded idle too: the next decode tick may
        # free the slot, and the release at the transfer's end changes its blocks in use, where its idle row ends. Without
        # the bound its idle row ran past the release, holding the blocks to wherever the loop's order of steps cut it)
        if self.back and not free_running and decode_ticks_matter and (eng.is_busy or eng.next_arrival_s() <= st.now_s or (
                inst.role == "prefill" and self._pending)):  # fmt: skip
            # (an instance with nothing queued only waits for its next arrival: other clocks cannot matter. One whose
            # next arrival is at its clock has it queued in this step (review 24): a prefill instance whose held KV
            # leaves no room for it stopped there with an infinite horizon, "waiting requests can never be admitted",
            # ending the deployment while the decode tick that frees that KV was still to come. `is_busy`, `next_arrival_s`:
            # a paused run's state)
            first, other = (len(self.front), self.back) if inst.role == "prefill" else (0, self.front)
            for j, o in enumerate(other, start=first):
                e = o.engine
                # (a bound is never before its instance's clock, `_next_output_bound_s`: one whose clock has reached h
                # cannot lower it, so neither `has_work` nor the bound is asked; while a dispatch waits for a decode
                # instance, every busy prefill instance has reached the dispatch's instant: once per hand-off)
                if e.st.now_s < h and e.has_work:
                    b = self._next_output_bound_s(j)
                    if b < h:  # (min(h, b) without the call: the same value)
                        h = b
        return h

    def _free_running(self, i: int) -> bool:
        """Instance i is a prefill instance holding no handed-off KV (with tight horizons): nothing from the cluster can
        reach it before a release of KV it hands off later (`_horizon`, `Engine.runs_to_horizon`)."""
        return self.tight_horizons and self.instances[i].role == "prefill" and not self._held[i]

    def _earliest_release_s(self, t_s: float, context_tokens: int) -> float:
        """The earliest end of the KV transfer of a request handed off at `t_s` with `context_tokens` of context: a
        dispatch at its hand-off with the slot reserved then (pipelined) over a prefill long enough to hide all but the
        last layer's share; `_dispatch` prices it so or later (a shorter prefill on a slow link, a later dispatch, one
        without pipelining, or one behind other transfers on the link)."""
        return t_s + self._transfer.seconds(self._transfer.bytes(context_tokens), pipelined=True)

    def _next_output_bound_s(self, j: int) -> float:
        """No tick of instance j that starts before its clock, or (for a prefill instance with nothing queued,
        running or swapped: only arrivals to come) before its next arrival, can end sooner than one shortest
        tick after that: the earliest time j can hand a request off or free decode blocks. (Arrivals still to
        be routed, and cluster events, bound every horizon separately.) Never before j's clock (`_horizon` relies
        on it: no shortest tick is negative)."""
        inst = self.instances[j]
        eng = inst.engine
        t = eng.st.now_s
        if self.tight_horizons and inst.role == "prefill" and not eng.is_busy:  # (a paused run's state: `Engine.is_busy`)
            t_next = eng.next_arrival_s()
            if t_next > t:  # (max(t, t_next) without the call)
                t = t_next
        return t + self.min_tick_s[j]

    def _views_reached(self, t_s: float) -> bool:
        """Every replica has reached the refresh instant an arrival at t_s is routed on (its state there is noted, or is
        its state now: no tick of it starts between; `RefreshedViews`), or has no work (its state then is its state now).
        A replica's runs stop at that instant (`_horizon`), so none has run a tick starting at or after it."""
        at_s = self.views.instant_at_or_before_s(t_s)
        return all(x.engine.st.now_s >= at_s or not x.engine.has_work for x in self.front)

    def _release_bounds_s(self) -> list[float]:
        """Per instance, the earliest time it may release a session's next turn (inf: idle or stopped)."""
        return [o.engine.st.now_s + self._first_release_after_s(j) if o.engine.has_work else math.inf
                for j, o in enumerate(self.instances)]

    def _first_release_after_s(self, j: int) -> float:
        """Replicas: no request of instance j finishes in fewer ticks than its remaining tokens (per tick: one, or
        one plus the draft tokens with speculative decoding), as in `Engine.outstanding_bounds`, each at least the
        shortest tick, and its finish sends its session's next turn its own think time later (a session's last turn
        sends none): the least of those sums over its requests (lesson 14's 4 replicas: one tick plus the shortest
        think time of any turn cut their runs at ~10 ticks). With a decode pool one shortest tick plus the shortest
        think time: requests waiting for a decode slot or in transfer are in no engine's state. Where replicas stop
        changes only where their runs are cut, not the result (tests compare with that bound: route_early False)."""
        eng = self.instances[j].engine
        if self._slot_think_s is None or not self.route_early:  # (route_early False: the reference for tests)
            return self.min_tick_s[j] + self.turns.min_think_s
        # (kept until the replica steps or is sent a request, `Engine._state_key`: the loop asks for every replica's at
        # each pass, and most passes step one replica; lesson 14 under prefix_affinity: 17,261 calls for 5,142 states.
        # Replicas only: `release` / `reserve` / `inject_prefilled` change a pool instance's state without changing the
        # key, but that does not happen here: with a decode pool the bound is the constant above. A paused run's state
        # is the run's, not the arrays': `_first_release_in_run_s`)
        key = eng._state_key()
        memo = self._release_memo[j]
        if memo is not None and memo[0] == key:
            return memo[1]
        after_s = self._first_release_after_now_s(j, eng) if eng._live is None else self._first_release_in_run_s(j, eng)
        self._release_memo[j] = (key, after_s)
        return after_s

    def _first_release_after_now_s(self, j: int, eng: Engine) -> float:
        """`_first_release_after_s` worked out from replica j's state now."""
        st = eng.st
        R = st.num_requests
        ids = np.concatenate([st.running, st.waiting_keys % R, st.swapped_keys % R,
                              np.arange(st.next_arrival, eng.num_added, dtype=np.int64)])  # fmt: skip
        if not ids.size:
            return self.min_tick_s[j] + self.turns.min_think_s
        per_tick = 1 + (eng.cfg.scheduler.speculative.num_draft_tokens if eng.spec is not None else 0)
        ticks = np.maximum(1, -(-(st.output[ids] - st.emitted[ids]) // per_tick))
        return float((ticks * self.min_tick_s[j] + self._slot_think_s[j][ids]).min())

    def _first_release_in_run_s(self, j: int, eng: Engine) -> float:
        """`_first_release_after_s` of replica j whose run is paused: the same sums from the run's state (the arrays hold
        the state at the run's start, fewer tokens emitted). A decoder in `finish_at[f]` emits its last token in
        decoding tick f: f - d + 1 ticks from decoding tick d; a request prefilling, queued or added and not arrived
        has its output less what it emitted before (the arrays': unchanged in the run). No turn has finished in the
        run (it ends at its first: `fastpath` turn_out). Speculative runs do not pause here (a tick emits several
        tokens), so one token a tick."""
        _, _, ptr, _, _, d, finish_at, prefilling, waiting, head, _, _ = eng._live
        st, think = eng.st, self._slot_think_s[j]
        min_tick = self.min_tick_s[j]
        best, seen = math.inf, bool(finish_at)
        for f, ids in finish_at.items():
            first_s = (f - d + 1) * min_tick
            for r in ids:
                if first_s + think.item(r) < best:
                    best = first_s + think.item(r)
        R = st.num_requests
        rest = [*prefilling, *(w % R for w in waiting[head:]), *range(ptr, getattr(eng, "num_added", ptr))]
        if rest:
            ids = np.array(rest, dtype=np.int64)
            ticks = np.maximum(1, st.output[ids] - st.emitted[ids])
            best = min(best, float((ticks * min_tick + think[ids]).min()))
        return best if seen or rest else min_tick + self.turns.min_think_s

    def _release_turns(self, i: int) -> None:
        """Turns that finished on instance i send their sessions' next turns (routed when they arrive)."""
        ids = self.ids_of[i]
        for slots, ends in self.instances[i].engine.st.finished_turns:
            self.turns.release([ids[k] for k in slots.tolist()], ends.tolist())
        self.instances[i].engine.st.finished_turns.clear()

    def _push(self, t: float, kind: int, payload: tuple) -> None:
        heapq.heappush(self._heap, (t, self._seq, kind, payload))
        self._seq += 1

    # ------------------------------------------------------------------ events
    def _window(self, r: int) -> int | float:
        q = float(self.arrival_s[r]) / self.refresh_s
        return math.floor(q) if math.isfinite(q) else q  # (an arrival at ~1e308 s: its window is inf, not OverflowError)

    def _routing_instant(self, r: int) -> float:
        """When request r is routed from the engines' state: its arrival, or with a refresh interval the
        refresh instant at or before it (the state the router holds then is what it routes r on)."""
        if self._instants is not None:
            return self._instants[r]
        return self._instant(float(self.arrival_s[r]))

    def _instant(self, t: float) -> float:
        """The routing instant of an arrival at time t (`_routing_instant`)."""
        q = t / self.refresh_s if self.refresh_s else math.inf
        # (q infinite: no refresh interval, an unreleased turn, or t / refresh_s beyond floats: an arrival at 1e308 s)
        return t if not math.isfinite(q) else min(math.floor(q) * self.refresh_s, t)

    def _route(self, r: int, engines: list | None = None) -> int:
        """Route request r, and with a refresh interval every later arrival of its interval (the router's view
        of the engines is the same for all of them, apart from the requests it sends meanwhile, which each
        engine counts as soon as they are added); returns the next request to route. (`engines`: what the router
        reads of each, by default the engines.)"""
        if engines is None:  # (a view of a paused run only for KV usage: `_seen`; 2P2D's prefill pool, every arrival)
            engines = [_seen(x.engine) for x in self.front] if self.router.reads_kv_usage else self._engines[: len(self.front)]
        if self.turns is not None:  # closed-loop sessions: the next arrival in time order, first or released turn
            q = self.turns.pop()
            seen = engines if self.views is None else self.views.at(float(self.arrival_s[q]))
            self._add(q, self.router.choose(seen, q))
            return r + 1
        end = r + 1
        if self.refresh_s:
            k = self._window(r)
            while end < self.num_requests and self._window(end) == k:
                end += 1
        for q in range(r, end):
            self._add(q, self.router.choose(engines, q))
        return end

    def _add(self, r: int, i: int) -> None:
        """Request r goes to front instance i (it arrives there at its arrival time)."""
        wl = self.workload
        if self._requests is not None:  # (Python values listed once: this runs at every arrival)
            k = self.front[i].engine.add_request(*self._requests[r], source=(wl, r))
        else:  # (closed-loop sessions: arrival times are written as turns are released)
            k = self.front[i].engine.add_request(float(self.arrival_s[r]), int(wl.prompt_tokens[r]), int(wl.output_tokens[r]),
                                                 int(wl.priority[r]), int(wl.class_idx[r]), source=(wl, r))  # fmt: skip
        self.instance_of[r], self.slot_of[r] = i, k
        self.ids_of[i].append(r)
        if self._slot_think_s is not None:
            self._slot_think_s[i][k] = self._sends_after_s[r]
        self._bounds_at[i] = None
        curve, kv_curve = self._curves[i], self._kv_curves[i]
        if curve is not None or kv_curve:  # (its curves take the request: all its tokens left, no block held)
            if self._requests is not None:
                _, prompt, output, _, _ = self._requests[r]
            else:  # (closed-loop sessions)
                prompt, output = int(wl.prompt_tokens[r]), int(wl.output_tokens[r])
            if curve is not None:
                curve.add(output)
            if kv_curve:
                kv_curve.add(prompt, output)

    def _pop_event(self) -> None:
        t, _, kind, payload = heapq.heappop(self._heap)
        if kind == HANDOFF:
            i, slots = payload
            ids = self.ids_of[i]
            for k in slots.tolist():
                r = ids[k]
                self._pending.append((r, i, t))
                self.kv_wait_start_s[r] = t
                self.events.append(r << EVENT_KIND_BITS | KV_WAIT)
        elif kind == XFER_DONE:
            i, d, r = payload
            pre = self.instances[i].engine
            kp = self.slot_of.item(r)  # (one request: a slot as a Python int, no 1-element arrays, once per request)
            if self.views is not None:
                self.views.note(i, before_s=t)  # (its KV in use before the release, at the instants before t)
            pre.release(kp)
            self._held[i] -= 1
            # the user's first token: the prefill side's, or (first_token_from = decode) none yet: the decode side's first
            # tick emits it (`Engine.inject_prefilled`)
            first_s = math.nan if self.first_token_on_decode else pre.st.first_token_s.item(kp)
            self.back[d].engine.inject_prefilled(self.decode_slot_of.item(r), t, first_s)
            self._incoming[d] -= 1
            self.injected[r] = True
            self.events.append(r << EVENT_KIND_BITS | KV_TRANSFER_DONE)
        if self._pending:
            self._dispatch(t)
        else:  # (`_dispatch` with nothing waiting, without the call: most transfers' ends)
            self._dispatch_t = None

    def _dispatch(self, t: float) -> None:
        """Start transfers for waiting hand-offs, oldest first, while some decode instance has a slot
        and the blocks (reserved now); the first that does not fit waits with everything behind it.
        (lazy_decode: where a decode instance that has not reached t could change the choice, or is chosen, the
        dispatch stops and waits for it: `_dispatch_t`, `_dispatch_need`; the loop runs it up to t, then calls
        again.)"""
        self._dispatch_t = None
        if not self._pending:  # (most calls: every event and retry dispatches)
            return
        decs = self._decs
        first = len(self.front)
        while self._pending:
            r, i, ready = self._pending[0]
            if self._head_need[0] == r:  # (a request waiting at the head is tried again at later events: the same
                _, need, kp, ctx, prompt = self._head_need  # blocks, and its handed-off state does not change)
            else:
                pre = self.instances[i].engine
                kp = self.slot_of.item(r)  # (Python ints from one element each: no NumPy scalars)
                ctx, prompt = pre.st.computed.item(kp), pre.st.prompt.item(kp)
                # (first_token_from = decode: it joins at the prompt but its last token, which its first decode tick
                # computes again, growing its blocks as any decoder's: `Engine.inject_prefilled`)
                held = ctx - 1 if self.first_token_on_decode else ctx
                # (the decode pool's instances share one config, so their block managers agree: one call, not one each)
                need = [int(decs[0].kv.blocks_for(held, prompt))] * len(decs) if self._same_blocks else [
                    int(e.kv.blocks_for(held, prompt)) for e in decs]  # fmt: skip
                self._head_need = (r, need, kp, ctx, prompt)
            if self._lazy:
                d, behind = self._lazy_choice(r, t, need)
                if behind:
                    self._dispatch_t, self._dispatch_need = t, [first + j for j in behind]
                    return
                if d is None:
                    return  # back-pressure (every decode instance has reached t)
            else:
                eligible = [d for d in range(len(decs)) if self._fits(d, need[d])]
                if not eligible:
                    return  # back-pressure: the request keeps its prefill blocks
                d = self.back_router.choose([_seen(e) for e in decs] if self.back_router.reads_kv_usage else decs, r, eligible)
            self._pending.popleft()
            if self._requests is not None:  # (Python values listed once: `_add`)
                arrival_s, _, output, priority, class_idx = self._requests[r]
            else:
                wl = self.workload
                arrival_s, output, priority, class_idx = (float(self.arrival_s[r]), int(wl.output_tokens[r]),
                                                          int(wl.priority[r]), int(wl.class_idx[r]))  # fmt: skip
            kd = decs[d].add_request(arrival_s, prompt, output, priority, class_idx)
            self.decode_slot_of[r] = kd
            self.ids_of[first + d].append(r)
            decs[d].reserve(kd, need[d])  # (one request: Python ints, `BlockManager.grow_to` takes them as one element)
            self._incoming[d] += 1
            nbytes = self._transfer.bytes(ctx)
            # pipelined when dispatched at its hand-off: the link sent during the prefill, from the request's first
            # admission to its first token
            piped = t == ready
            overlap_s = ready - self.instances[i].engine.st.first_scheduled_s.item(kp) if piped else math.inf
            if self._sides is not None:  # (in the time the transfers before it leave free on both sides)
                moves_s, end_s, _ = self._sides.send(i, first + d, t, nbytes, piped, overlap_s)
            else:
                moves_s, end_s = t, t + self._transfer.seconds(nbytes, piped, overlap_s)
            self.decode_of[r] = first + d
            self.kv_transfer_start_s[r], self.kv_link_start_s[r], self.kv_transfer_end_s[r] = t, moves_s, end_s
            self.kv_transfer_bytes[r] = nbytes
            self.events.append(r << EVENT_KIND_BITS | KV_TRANSFER_START)
            self._push(end_s, XFER_DONE, (i, d, r))

    def _dispatch_waits_for(self, stalled: set[int]) -> int | None:
        """The instance a waiting dispatch (`_dispatch_t`) has the loop step next: the busy, unstalled one of
        `_dispatch_need` with the earliest clock before the dispatch's instant (ties: lowest index); None once every
        one has reached it."""
        t_d, engines = self._dispatch_t, self._engines
        best, best_t = None, t_d
        for j in self._dispatch_need:  # (a loop, not min over a generator with a key: the same (clock, index) minimum)
            eng = engines[j]
            t = eng.st.now_s  # (the clock first: an instance that reached the instant fails it)
            if (t < best_t or t == best_t and best is not None and j < best) and j not in stalled and eng.has_work:
                best, best_t = j, t
        return best

    def _fits(self, d: int, need: int) -> bool:
        return decode_fits(self.back[d].engine, self._incoming[d], need)

    def _reached(self, d: int, t: float) -> bool:
        """Decode instance d's state is its state at t: it ran every tick that starts before t, or it cannot run
        before new input (idle, or stalled)."""
        e = self.back[d].engine
        return e.st.now_s >= t or not e.has_work or len(self.front) + d in self._stalled

    def _fits_by_bounds(self, d: int, need: int, t: float) -> bool | None:
        return decode_fits_by_bounds(self.back[d].engine, self._incoming[d], need, t, self.min_emit_tick_s[len(self.front) + d])

    def _lazy_choice(self, r: int, t: float, need: list[int]) -> tuple[int | None, list[int]]:
        """The back router's choice for request r at t with lazy_decode: (instance, []) once it is settled and the
        chosen instance has reached t; (None, []) for back-pressure with every instance at t (its retries follow
        every decode tick from then on, as without lazy_decode); else (None, the instances that must reach t
        first). Round robin takes the first eligible instance in turn: eligibility from the exact state of those
        that reached t, from bounds for the others, which only the undecided ones ahead of the choice, and the
        choice, must settle by reaching t. The other policies read every instance (all reach t)."""
        n = len(self.back)
        router = self.back_router
        if router.policy != "round_robin":
            return self._lazy_choice_by_bounds(r, t, need, [d for d in range(n) if not self._reached(d, t)])
        start = router.turn
        for k in range(n):  # in turn from the one whose turn it is
            d = (start + k) % n
            if self._reached(d, t):
                if self._fits(d, need[d]):
                    router.took_turn(d, n)  # (`Router.choose` among [d]: its turn advances past d)
                    return d, []
                continue
            # (fitting now, it may fit at t: bounds contain the present; only bounds that rule it out spare the wait)
            fits = None if self._fits(d, need[d]) else self._fits_by_bounds(d, need[d], t)
            if fits is not False:  # it may be the choice (or is): it must reach t
                return None, [d]
        return None, [d for d in range(n) if not self._reached(d, t)]  # back-pressure, once every instance has reached t

    def _lazy_choice_by_bounds(self, r: int, t: float, need: list[int], behind: list[int]) -> tuple[int | None, list[int]]:
        """`_lazy_choice` for the back routers that read counts or KV usage (over a decode pool, without a workload,
        every policy but round robin and least_kv is least outstanding: `Router.choose`): eligibility as for round
        robin, then `Router.choose_by_bounds` over the eligible instances (an ineligible one gets bounds no choice
        can take), from exact values where an instance reached t and bounds elsewhere; the instances whose exact
        values could change the choice, and the choice, must reach t."""
        n = len(self.back)
        decs, incoming = self._decs, self._incoming
        fits, unknown = [], []
        for d in range(n):  # (`_fits` inlined: a call fewer per instance, twice per hand-off)
            f = decode_fits(decs[d], incoming[d], need[d])
            if d in behind:  # (fitting now, it may fit at t: bounds contain the present; only bounds settle it)
                f = None if f else self._fits_by_bounds(d, need[d], t)
                if f is None:
                    unknown.append(d)
            fits.append(f)
        if unknown:
            return None, unknown
        if not any(fits):
            return None, behind  # back-pressure, once every instance has reached t
        router = self.back_router
        kv_rule = router.policy == "least_kv"
        bounds, usage = [], [] if kv_rule else None
        first = len(self.front)
        for d, x in enumerate(self.back):
            e = x.engine
            if not fits[d]:
                bounds.append((math.inf, math.inf))
                if kv_rule:
                    usage.append((math.inf, math.inf))
            elif d not in behind:
                count = e.num_outstanding  # (exact: read once)
                bounds.append((count, count))
                if kv_rule:
                    kv_usage = e.live_kv_usage
                    usage.append((kv_usage, kv_usage))
            else:
                bounds.append(e.outstanding_bounds(t, self.min_emit_tick_s[first + d]))
                if kv_rule:
                    usage.append(e.kv_usage_bounds(t, self.min_emit_tick_s[first + d]) or (0.0, math.inf))
        turn = router.turn
        pick, rivals = router.choose_by_bounds(bounds, r, usage)
        if pick is None:  # (with every value exact the choice is settled: some rival lags behind)
            lag = [d for d in rivals if d in behind] or behind
            if lag:
                return None, lag
            eligible = [d for d in range(n) if fits[d]]  # (unreachable; never loop on a choice that cannot settle)
            return router.choose([x.engine for x in self.back], r, eligible), []
        if pick in behind:  # settled, but it must reach t before its blocks are reserved: chosen again then
            router.turn = turn
            return None, [pick]
        return pick, []


def decode_fits(eng: Engine, num_incoming: int, need: int) -> bool:
    """A decode instance with `num_incoming` transfers in flight has a sequence slot and `need` free blocks (above
    its watermark) for another transfer now. Its own pre-empted requests (waiting or swapped out) hold their slots:
    it re-admits them against max_num_seqs - running, so a slot lent to a transfer meanwhile would put the batch
    over its cap when the transfer lands (review 30e). Counted so, running + queued + in flight never passes the cap:
    a pre-emption, a re-admission and a landing each move a request within that sum. (vLLM's decode instance admits
    a remote-KV request from its waiting queue, behind the pre-empted requests at its head.) A paused run's count
    (`Engine.live_counts`) holds its queue already: its arrays' queues are the run's start's until it ends, and adding
    them counted its pre-empted requests twice (session 50)."""
    num_running, num_free = eng.live_counts()
    if eng._live is None:  # (a decode run holds nothing swapped out: swaps are the scheduler's there, `swaps_here`)
        st = eng.st
        num_running += st.waiting_keys.size + st.swapped_keys.size
    return num_running + num_incoming < eng.sched.batch_cap and need + eng.sched.watermark_blocks <= num_free


def decode_fits_by_bounds(eng: Engine, num_incoming: int, need: int, t_s: float, min_emit_tick_s: float) -> bool | None:
    """`decode_fits` at `t_s` (once every tick that starts before it has run) for a decode instance whose clock is
    at most `t_s` and that gets no input before then, from bounds on its batch and its blocks in use there; None
    when they leave it open. Nothing is queued or swapped and no decode can run short of a block before `t_s`
    (`Engine.kv_used_bounds`), so the batch only loses finished requests (`Engine.outstanding_bounds`), and the
    batch cap is fixed (no dynamic batch sizing)."""
    st = eng.st
    if st.waiting_keys.size or st.swapped_keys.size or eng.cfg.scheduler.dynamic_batch.enabled:
        return None
    used = eng.kv_used_bounds(t_s, min_emit_tick_s)
    if used is None:
        return None
    run_lo, run_hi = eng.outstanding_bounds(t_s, min_emit_tick_s)
    cap, room = eng.sched.batch_cap - num_incoming, need + eng.sched.watermark_blocks
    if run_hi < cap and eng.kv.num_blocks - used[1] >= room:
        return True
    if run_lo >= cap or eng.kv.num_blocks - used[0] < room:
        return False
    return None


def _stops_alone(eng: Engine) -> bool:
    """Whether an instance that stopped (its `step` said False) stopped at a limit of its own run, the config's
    limits.max_sim_time_s or max_ticks or its part of the server's tick or row budget (each a count of its own ticks,
    rows or clock), rather than at the server's wall-clock or memory budget, which stops the whole run."""
    return eng.st.now_s >= eng.cfg.limits.max_sim_time_s or eng.ticks_left() <= 0
