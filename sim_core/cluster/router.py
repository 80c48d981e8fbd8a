"""The router: picks an instance for each request, once, from state it can observe at that moment.

Policies (DESIGN.md §8; `deployment.router`):
  round_robin        instances in turn, whatever their load (request counts differ by at most 1)
  least_outstanding  fewest requests queued, running or swapped out (vLLM production stack, llm-d)
  least_kv           lowest fraction of KV blocks in use; ties to least outstanding
  prefix_affinity    most cached prefix blocks for this prompt, ties to least outstanding. The score
                     comes from `Engine.cached_prefix_blocks(request)` when the engine has prefix
                     caching (hook for the prefix-cache module); without it every score is 0 and the
                     policy is least_outstanding.
Remaining ties go to the next instance in turn (round robin among the tied), so an idle deployment
spreads requests instead of piling them on instance 0; a run stays deterministic.

NOTE: "observable then" is tick-granular. The cluster routes an arrival once every busy instance's
clock has reached it, so each instance shows its state after the tick in flight at the arrival
(at most one tick of look-ahead, as a real engine reports its queues between iterations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim_core.engine import Engine


def prefix_score(engine: Engine, request: int) -> int:
    """Cached prefix blocks of `request` on `engine` (0 without prefix caching)."""
    probe = getattr(engine, "cached_prefix_blocks", None)
    return int(probe(request)) if probe is not None else 0


class Router:
    def __init__(self, policy: str, num_instances: int):
        self.policy = policy
        self.num_instances = num_instances
        self._next = 0  # round robin: the instance whose turn it is

    @property
    def is_state_free(self) -> bool:
        """Round robin ignores instance state: its choices can be made ahead of time."""
        return self.policy == "round_robin"

    def round_robin_plan(self, num_requests: int) -> np.ndarray:
        """Instance of each request under round robin (request i -> i mod N)."""
        return np.arange(num_requests, dtype=np.int64) % self.num_instances

    def choose(self, engines: Sequence[Engine], request: int, eligible: Sequence[int] | None = None) -> int:
        """Index (into `engines`) of the instance for `request`, among `eligible` (default: all)."""
        cand = list(range(len(engines))) if eligible is None else list(eligible)
        if not cand:
            raise ValueError("no eligible instance")
        if self.policy == "round_robin":
            n = len(engines)
            pick = min(cand, key=lambda i: (i - self._next) % n)
            self._next = (pick + 1) % n
            return pick
        n = len(engines)
        turn = [(i - self._next) % n for i in cand]  # ties go to the next instance in turn, not always to 0
        load = [engines[i].num_outstanding for i in cand]
        if self.policy == "least_kv":
            key = [(engines[i].kv.usage, load[j], turn[j]) for j, i in enumerate(cand)]
        elif self.policy == "prefix_affinity":
            key = [(-prefix_score(engines[i], request), load[j], turn[j]) for j, i in enumerate(cand)]
        else:  # least_outstanding
            key = [(load[j], turn[j]) for j, i in enumerate(cand)]
        pick = cand[min(range(len(cand)), key=key.__getitem__)]
        self._next = (pick + 1) % n
        return pick
