"""Several engines on one clock: N replicas behind a router, or a prefill pool and a decode pool.

NOTE: every instance is a full `Engine` (own TP group, KV cache, scheduler, recorder) whose requests
arrive only through the cluster (`Engine.inject`). The cluster is a discrete-event loop over
  * arrivals (from the one workload of the config, in arrival order),
  * hand-offs (a prefill instance emitted a first token), KV-transfer completions and retries of
    waiting hand-offs (a decode instance may have freed blocks),
and it always steps the busy instance whose clock is earliest (ties: lowest index). An event at t is
processed once every busy instance's clock has reached t, so each instance has run every tick that
starts before t and none after. Each instance's `horizon_s` (the earliest time new input can reach
it) stops its coalesced runs and idle jumps there, which is what a single engine does at its next
arrival. Between events the instances are independent, so N replicas cost about N engines' ticks.

With one replica this reproduces `Engine.run` exactly: the same ticks, idle gaps and request times
(tests assert it). Disaggregation follows DESIGN.md §8: a prefill instance hands a request off at its
first token, keeping its KV blocks; the request waits (FIFO, holding those blocks) until some decode
instance has a sequence slot and the blocks for its context (reserved before the transfer); the KV is
sent over the link (transfer.py); the prefill blocks are freed and the request joins the decode
instance's running batch when the transfer completes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from sim_core.cluster.router import Router
from sim_core.cluster.transfer import kv_transfer_bytes, kv_transfer_s
from sim_core.config import DeploymentConfig, SimConfig, pool_config
from sim_core.costmodel import MemoryPlanError
from sim_core.engine import Engine
from sim_core.types import Event

HANDOFF, XFER_DONE, RETRY = 0, 1, 2  # cluster event kinds (heap entries: time, seq, kind, payload)


@dataclass
class Instance:
    engine: Engine
    role: str  # "replica" | "prefill" | "decode"
    index: int  # position within its pool
    cfg: SimConfig  # the single-engine config of this instance


class Deployment:
    def __init__(self, cfg: SimConfig, check_invariants: bool = False):
        self.cfg = cfg
        dep = cfg.deployment or DeploymentConfig()
        self.dep = dep
        dis = dep.disaggregation
        if dis is None:
            specs = [("replica", cfg.model_copy(update={"deployment": None}), dep.replicas)]
        else:
            specs = [("prefill", pool_config(cfg, "prefill"), dis.prefill.replicas),
                     ("decode", pool_config(cfg, "decode"), dis.decode.replicas)]  # fmt: skip
        self.front: list[Instance] = []  # instances that receive arrivals
        self.back: list[Instance] = []  # decode pool (empty without disaggregation)
        for role, pcfg, count in specs:
            for k in range(count):
                try:
                    eng = Engine(pcfg)
                except MemoryPlanError as err:
                    raise MemoryPlanError(f"{role} pool: {err}" if dis else str(err)) from None
                eng.take_arrivals_externally()
                eng.hand_off_prefilled = role == "prefill"
                eng.check_invariants = check_invariants
                (self.back if role == "decode" else self.front).append(Instance(eng, role, k, pcfg))
        self.instances = self.front + self.back
        wl = self.front[0].engine.workload
        self.num_requests = R = wl.num_requests
        self.arrival_s = wl.arrival_s
        self.router = Router(dep.router, len(self.front))
        self.back_router = Router(dep.router, max(len(self.back), 1))
        self.link = dis.link if dis else None
        self.num_layers = cfg.model.num_layers
        # Round robin needs no state: its plan is known, so a replica only stops at its own arrivals.
        self.plan = self.router.round_robin_plan(R) if self.router.is_state_free else None
        if self.plan is not None:
            self.own_ids = [np.flatnonzero(self.plan == i) for i in range(len(self.front))]
            self.own_ptr = [0] * len(self.front)
        # Per request: where it ran and its KV transfer (NaN / -1 when not applicable).
        self.instance_of = np.full(R, -1, dtype=np.int64)  # front instance (index into self.instances)
        self.decode_of = np.full(R, -1, dtype=np.int64)  # decode instance (index into self.instances)
        self.injected = np.zeros(R, dtype=bool)  # joined its decode instance
        self.kv_wait_start_s = np.full(R, np.nan)
        self.kv_transfer_start_s = np.full(R, np.nan)
        self.kv_transfer_end_s = np.full(R, np.nan)
        self.kv_transfer_bytes = np.full(R, np.nan)
        self.events: list[tuple[int, float, int]] = []  # (request, time, Event) of the cluster
        self._heap: list[tuple[float, int, int, tuple]] = []
        self._seq = 0
        self._pending: deque[tuple[int, int, float]] = deque()  # (request, prefill instance, ready time)
        self._incoming = [0] * len(self.back)  # reserved, transfer in flight
        self.stopped_reason: str | None = None

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        R = self.num_requests
        ptr = 0
        stalled: set[int] = set()
        insts = self.instances
        while True:
            t_arr = float(self.arrival_s[ptr]) if ptr < R else math.inf
            t_heap = self._heap[0][0] if self._heap else math.inf
            t_ev = min(t_arr, t_heap)
            i = self._earliest(stalled)
            t_e = insts[i].engine.st.now_s if i is not None else math.inf
            if t_ev <= t_e:
                if not math.isfinite(t_ev):
                    break
                if t_heap <= t_arr:
                    self._pop_event()
                else:
                    self._route(ptr, t_arr)
                    ptr += 1
                stalled.clear()
                continue
            inst = insts[i]
            eng = inst.engine
            eng.horizon_s = self._horizon(i, t_arr, t_heap)
            before = (eng.st.now_s, eng.rec.num_ticks)
            if not eng.step():
                name = f"{inst.role} {inst.index}" if len(insts) > 1 else inst.role
                self.stopped_reason = f"{name}: {eng.stopped_reason or 'stopped'}"
                break
            if (eng.st.now_s, eng.rec.num_ticks) == before:
                stalled.add(i)  # waits for another instance or an event
                continue
            stalled.clear()
            if eng.handed_off:
                for ids, t in eng.handed_off:
                    self._push(t, HANDOFF, (i, ids))
                eng.handed_off.clear()
            if inst.role == "decode" and self._pending:
                self._push(eng.st.now_s, RETRY, ())
        if self.stopped_reason is None and self._pending:
            self.stopped_reason = (f"stopped: {len(self._pending):,} prefilled requests wait for a decode slot that "
                                   "never frees (decode pool KV cache or max_num_seqs too small)")  # fmt: skip
        elif self.stopped_reason is None and any(x.engine.has_work for x in insts):
            self.stopped_reason = "stopped: waiting requests can never be admitted (KV cache or limits too small)"

    def _earliest(self, stalled: set[int]) -> int | None:
        best, best_t = None, math.inf
        for i, inst in enumerate(self.instances):
            if i in stalled or not inst.engine.has_work:
                continue
            t = inst.engine.st.now_s
            if t < best_t:
                best, best_t = i, t
        return best

    def _horizon(self, i: int, t_arr: float, t_heap: float) -> float:
        """Earliest time new input may reach instance i: the next arrival (a replica under round robin:
        its own next arrival), the next cluster event, and the clock of any busy instance of the other
        pool (whose next tick may hand off a request or free decode blocks)."""
        inst = self.instances[i]
        h = t_heap
        if self.plan is not None and inst.role == "replica":
            own, p = self.own_ids[i], self.own_ptr[i]
            h = min(h, float(self.arrival_s[own[p]]) if p < own.size else math.inf)
        else:  # any arrival may reach it (or, for a decode instance, an idle prefill instance)
            h = min(h, t_arr)
        if self.back:
            other = self.back if inst.role == "prefill" else self.front
            for o in other:
                if o.engine.has_work:
                    h = min(h, o.engine.st.now_s)
        return h

    def _push(self, t: float, kind: int, payload: tuple) -> None:
        heapq.heappush(self._heap, (t, self._seq, kind, payload))
        self._seq += 1

    # ------------------------------------------------------------------ events
    def _route(self, r: int, t: float) -> None:
        if self.plan is not None:
            i = int(self.plan[r])
            self.own_ptr[i] += 1
        else:
            i = self.router.choose([x.engine for x in self.front], r)
        self.instance_of[r] = i
        self.front[i].engine.inject(np.array([r], dtype=np.int64), t)

    def _pop_event(self) -> None:
        t, _, kind, payload = heapq.heappop(self._heap)
        if kind == HANDOFF:
            i, ids = payload
            for r in ids.tolist():
                self._pending.append((r, i, t))
                self.kv_wait_start_s[r] = t
                self.events.append((r, t, Event.KV_WAIT))
        elif kind == XFER_DONE:
            i, d, r = payload
            ids = np.array([r], dtype=np.int64)
            self.instances[i].engine.release(ids)
            dec = self.back[d].engine
            dec.inject_prefilled(ids, t, self.instances[i].engine.st.first_token_s[ids])
            self._incoming[d] -= 1
            self.injected[r] = True
            self.events.append((r, t, Event.KV_TRANSFER_DONE))
        self._dispatch(t)

    def _dispatch(self, t: float) -> None:
        """Start transfers for waiting hand-offs, oldest first, while some decode instance has a slot
        and the blocks (reserved now); the first that does not fit waits with everything behind it."""
        decs = [x.engine for x in self.back]
        while self._pending:
            r, i, ready = self._pending[0]
            pre = self.instances[i].engine
            ctx = int(pre.st.computed[r])
            need = [int(e.kv.blocks_for(ctx, e.st.prompt[r])) for e in decs]
            eligible = [d for d, e in enumerate(decs)
                        if e.st.running.size + self._incoming[d] < e.sched.batch_cap
                        and e.kv.can_allocate(need[d], e.sched.watermark_blocks)]  # fmt: skip
            if not eligible:
                return  # back-pressure: the request keeps its prefill blocks
            d = self.back_router.choose(decs, r, eligible)
            self._pending.popleft()
            decs[d].reserve(np.array([r], dtype=np.int64), np.array([need[d]], dtype=np.int64))
            self._incoming[d] += 1
            nbytes = kv_transfer_bytes(self.cfg, ctx)
            dt = kv_transfer_s(self.link, nbytes, self.num_layers, pipelined=t == ready)
            self.decode_of[r] = len(self.front) + d
            self.kv_transfer_start_s[r], self.kv_transfer_end_s[r] = t, t + dt
            self.kv_transfer_bytes[r] = nbytes
            self.events.append((r, t, Event.KV_TRANSFER_START))
            self._push(t + dt, XFER_DONE, (i, d, r))
