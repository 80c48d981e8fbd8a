"""The router: picks an instance for each request, once, from state it can observe at that moment.

Policies (`deployment.router`):
  round_robin        instances in turn, whatever their load (request counts differ by at most 1)
  least_outstanding  fewest requests queued, running or swapped out (vLLM production stack; not llm-d, whose
                     default picker weighs queue, KV and prefix scores: weighted_score)
  least_kv           lowest fraction of KV blocks in use; ties to least outstanding
  prefix_affinity    SGLang router's cache-aware policy with its launcher's defaults (config.py, beside CACHE_THRESHOLD:
                     0.3 / 64 / 1.5, as `sglang-router` and `python -m sglang_router.launch_router` start it): when
                     the load is imbalanced (max - min outstanding > BALANCE_ABS_THRESHOLD and max >
                     BALANCE_REL_THRESHOLD x min) the least outstanding instance; otherwise the instance holding the
                     longest cached prefix of the prompt if it covers more than CACHE_THRESHOLD of the prompt's full
                     blocks, else the least outstanding (SGLang: the smallest tree of routed prompts, as cache_aware).
                     The match is read from each engine's actual prefix cache (`Engine.cached_prefix_blocks`), not
                     from an approximate tree of routed prompts. Without prefix caching every match is 0: least
                     outstanding.
  cache_aware        SGLang's router as built (sgl-router policies/cache_aware.rs `select_worker`), on the
                     router's own approximate tree: per instance the prompt blocks it sent there
                     (`prefix_cache.block_keys`), matched without asking any engine and blind to the engines'
                     evictions; bounded at the instance's GPU KV blocks: on overflow the least recently routed
                     blocks go, in one batch down to half the bound (SGLang evicts its tree every 120 s down to
                     max_tree_size, 2**26 characters by its launcher: ~16M tokens at ~4 characters a token, more
                     than a replica's KV holds, so this bound is the tighter one). The same load test and match
                     rule as prefix_affinity, but without a long enough match the instance whose tree holds the
                     fewest blocks (SGLang's `tree.get_smallest_tenant()`: fewest characters; ties here to the next in turn, SGLang's order
                     among equal tenants being a hash map's), not the least outstanding. Every prompt goes into its
                     instance's tree, whichever rule chose it. Needs no engine state but the outstanding counts
                     (the tree sizes are its own), which `choose_by_bounds` settles as far as the load test needs.
  session            sticky sessions, as vLLM production-stack's `--routing-logic session` (SessionRouter: the
                     session id of a request header, hashed onto a consistent-hash ring of the endpoints, whatever
                     their load): every turn of a conversation (workload `content_id`) goes to the instance its
                     session hashes to (a fixed integer hash mod the instance count: a ring over a fixed set of
                     instances is a fixed map). Requests without a session (no session of several turns in the
                     workload, or the decode pool's choice) go to the least outstanding instance (production-stack:
                     the lowest QPS).
                     llm-d keeps conversations together through its prefix-cache scorer instead (weighted_score).
  weighted_score     llm-d's default endpoint picker (llm-d-inference-scheduler, commit 520af47: the default profile of
                     config/charts/epplib/templates/_config.yaml, scorers summed by scheduling/scheduler_profile.go
                     `runScorerPlugins`, the highest taken by picker/maxscore/picker.go): the highest
                     QUEUE_SCORE_WEIGHT x queue + KV_SCORE_WEIGHT x kv + PREFIX_SCORE_WEIGHT x prefix (config.py,
                     2 / 2 / 3), each score in [0, 1]. queue (scorer/queuedepth/queue.go `Score`): (most waiting -
                     its waiting) / (most - fewest) over the candidates, 1 for all when every count is equal; waiting
                     = requests queued, swapped out or sent since the refresh, not running (`Engine.num_waiting`; llm-d
                     reads vLLM's num_requests_waiting from its metrics scrape, without the requests sent since). kv
                     (scorer/kvcacheutilization): 1 - KV usage. prefix: the leading full prompt blocks cached there
                     over the prompt's full blocks, both at most MAX_PREFIX_BLOCKS (approximateprefix/types.go
                     defaultMaxPrefixBlocks; 0 for a prompt without a full block), read from each engine's actual
                     prefix cache as prefix_affinity does: llm-d's precise prefix-cache scorer, which follows the
                     engines' KV events. Its default prefix-cache-scorer instead matches an approximate index of the
                     prompts it routed (as cache_aware's tree) and counts a prompt's trailing partial block too.
                     Ties go to the next in turn (llm-d's picker shuffles first: a random one). The decode pool's
                     choice (no prompt to match) is least outstanding, as prefix_affinity's.
Remaining ties go to the next instance in turn (round robin among the tied), so an idle deployment
spreads requests instead of piling them on instance 0; a run stays deterministic.

Staleness (`deployment.state_refresh_s`, default 0.05 s): least_kv, prefix_affinity and weighted_score read what
engines publish (KV usage, waiting queues, cached prefixes), which real routers get by periodic scrapes (llm-d's
endpoint picker: every 50 ms; vLLM production-stack: every 30 s) or event streams. The router then sees each instance as it
was at the last refresh instant (a multiple of the interval) plus the requests it sent since (a router
counts what it dispatched); every arrival of one interval is routed from that one view, so the cluster
routes them together at the interval's start and instances pause once per interval, not once per arrival.
Stale KV usage herds: a burst piles onto the instance that looked emptiest at the refresh (on top of KV usage
lagging: a prompt routed holds no KV until it is prefilled). 0 = the exact
state at each arrival (below). least_outstanding reads only the router's own counts (sent minus finished,
which a router sees as responses end): always exact.

NOTE: "observable then" is tick-granular: each instance shows its state after the tick in flight at
the arrival (at most one tick of look-ahead, as a real engine reports its queues between iterations),
and its outstanding count includes requests the router sent that the engine has not yet taken in (a
router counts what it dispatched). The cluster gets there either by running every busy instance up to
the arrival, or, for least_outstanding, by `choose_by_bounds`: the same choice from bounds on the
counts, so that only the instances whose exact count matters run up to the arrival.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import compress, repeat
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from sim_core.config import (BALANCE_ABS_THRESHOLD, BALANCE_REL_THRESHOLD, CACHE_THRESHOLD, KV_SCORE_WEIGHT, MAX_PREFIX_BLOCKS,
                             PREFIX_SCORE_WEIGHT, QUEUE_SCORE_WEIGHT, STATE_ROUTERS)
from sim_core.prefix_cache import SystemChains, block_keys, system_prompt_blocks

if TYPE_CHECKING:
    from sim_core.engine import Engine
    from sim_core.workload import Workload


_HIGH = itemgetter(1)  # a (low, high) bound's high end
_OUT = (math.inf, math.inf)  # bounds no choice takes (`choose_by_bounds`: an instance out of the running)
MAX_OWED = 256  # cache_aware: leading runs whose stamps an instance's tree may owe at once (each holds a prompt's keys)


class Router:
    def __init__(self, policy: str, num_instances: int, workload: Workload | None = None, block_size: int = 16,
                 tree_blocks: int = 1 << 16):  # fmt: skip
        self.policy = policy
        self.num_instances = num_instances
        self.workload = workload  # the deployment's requests (prefix identities for prefix_affinity)
        self.block_size = block_size
        self.turn = 0  # the instance whose turn it is: round robin's pick, and every policy's tie-break
        # per turn, the other instances in turn order after it (`choose_by_bounds`' walk)
        self._after = [tuple((nxt + s) % num_instances for s in range(1, num_instances)) for nxt in range(num_instances)]
        # cache_aware: per instance, the block keys of the prompts routed there (LRU, at most tree_blocks each)
        self.tree_blocks = tree_blocks
        # (key -> when last routed, in requests routed so far: a dict, whose C-level update is the bulk of the cost)
        self._tree: list[dict[int, int]] | None = (
            [{} for _ in range(num_instances)] if policy == "cache_aware" and workload is not None else None
        )
        self._stamp = 0
        # cache_aware: per instance, the stamps its tree owes the blocks a routed prompt found there (`_remember`), by
        # the last key of that leading run: (stamp, keys, run length), written into the tree before an eviction reads
        # the stamps, or once MAX_OWED runs are owed (`_settle_stamps`)
        self._owed: list[dict[int, tuple[int, list[int], int]]] = [{} for _ in range(num_instances)]
        # cache_aware: the key chains of pool system prompts, shared by many requests (bounded, as the prefix cache's)
        self._system_chain = SystemChains()
        # the request being routed, its keys, matches and private blocks: an unsettled choice is retried with the
        # tree unchanged
        self._memo: tuple[int, list[int], list[int] | None, int] = (-1, [], None, 0)
        # cache_aware: where no two requests share content (no session of several turns, no trace hashes: each request's
        # content is its own), a prompt's content blocks can be found by no later prompt; the tree counts them, with their stamps,
        # without their keys (`_keys`: per instance, (stamp, blocks) in routing order and their total)
        # Whether some session has several turns (requests sharing a content id), asked only by the two policies below
        cid = None if workload is None else getattr(workload, "content_id", None)  # (a stub workload may have none)
        shared = cid is not None and policy in ("cache_aware", "session") and np.unique(cid).size < cid.size
        self._own_content = self._tree is not None and workload.block_hash_ids is None and not shared
        self._private: list[list[tuple[int, int]]] = [[] for _ in range(num_instances)]
        self._num_private = [0] * num_instances
        # session: each request's session where some session has several turns. A workload of single requests gives
        # each its own content id (shared system prompts and nothing else: `workload.content_id`), which is no session
        # a client would send, so it goes to the least outstanding, as production-stack routes a request without a
        # session header (hashing those ids spread them at random, whatever the load)
        self._session_ids = cid if policy == "session" and shared else None

    @property
    def is_state_free(self) -> bool:
        """Round robin, and session over a session workload, ignore instance state: choices can be made ahead of time."""
        return self.policy == "round_robin" or self._sessions is not None

    @property
    def _sessions(self) -> np.ndarray | None:
        """session: the session of each request (None: no session of several turns, or another policy)."""
        return self._session_ids

    def up_front_plan(self, num_requests: int) -> np.ndarray:
        """Instance of each request for a state-free router: round robin i mod N, session its session's instance."""
        if self._sessions is not None:
            return session_instance(self._sessions[:num_requests], self.num_instances)
        return self.round_robin_plan(num_requests)

    @property
    def reads_engine_state(self) -> bool:
        """least_kv, prefix_affinity and weighted_score read what engines publish (KV usage, waiting queues, cached
        prefixes), which a real router gets by periodic scrapes or event streams (`deployment.state_refresh_s`)."""
        return self.policy in STATE_ROUTERS

    @property
    def reads_kv_usage(self) -> bool:
        """least_kv and weighted_score (over a workload's prompts: not the decode pool's choice) read each instance's
        KV usage (`choose`); the other policies read counts and prefix matches."""
        return self.policy == "least_kv" or self.policy == "weighted_score" and self.workload is not None

    def round_robin_plan(self, num_requests: int) -> np.ndarray:
        """Instance of each request under round robin (request i -> i mod N)."""
        return np.arange(num_requests, dtype=np.int64) % self.num_instances

    def took_turn(self, pick: int, n: int) -> None:
        """Instance `pick` (of n) was chosen: the turn passes to the one after it."""
        self.turn = (pick + 1) % n

    def choose(self, engines: Sequence[Engine], request: int, eligible: Sequence[int] | None = None) -> int:
        """Index (into `engines`) of the instance for `request`, among `eligible` (default: all)."""
        cand = list(range(len(engines))) if eligible is None else list(eligible)
        if not cand:
            raise ValueError("no eligible instance")
        if self.policy == "round_robin":
            n = len(engines)
            pick = min(cand, key=lambda i: (i - self.turn) % n)
            self.took_turn(pick, n)
            return pick
        n = len(engines)
        if self._sessions is not None:  # session: its instance if eligible (decode back-pressure), else least outstanding
            home = int(session_instance(self._sessions[request : request + 1], n)[0])
            if home in cand:
                return home
        turn = [(i - self.turn) % n for i in cand]  # ties go to the next instance in turn, not always to 0
        load = [engines[i].num_outstanding for i in cand]
        keys = self._keys(request)
        if self.policy == "least_kv":
            key = [(engines[i].kv.usage, load[j], turn[j]) for j, i in enumerate(cand)]
        elif self.policy == "weighted_score" and self.workload is not None:
            score = self._weighted_scores(engines, request, cand)
            key = [(-score[j], turn[j]) for j in range(len(cand))]
        elif self.policy in ("prefix_affinity", "cache_aware") and not _imbalanced(min(load), max(load)):
            hit = [self._match(engines, request, i, keys) for i in cand]
            if self._follows_cache(request, max(hit)):
                key = [(-hit[j], load[j], turn[j]) for j in range(len(cand))]
            elif self._tree is not None:  # cache_aware without a long enough match: the smallest tree
                key = [(self._tree_size(i), turn[j]) for j, i in enumerate(cand)]
            else:
                key = [(load[j], turn[j]) for j in range(len(cand))]
        else:  # least_outstanding (and the cache rules under imbalance; prefix_affinity without a long enough match;
            # weighted_score and prefix_affinity over a decode pool)
            key = [(load[j], turn[j]) for j in range(len(cand))]
        pick = cand[min(range(len(cand)), key=key.__getitem__)]
        self.took_turn(pick, n)
        self._remember(pick, keys)
        return pick

    @property
    def decides_on_counts(self) -> bool:
        """least_outstanding reads only request counts, which bounds can settle (`choose_by_bounds`)."""
        return self.policy in ("least_outstanding", "cache_aware")

    @property
    def decides_on_bounds(self) -> bool:
        """Bounds on what it reads can settle its choices (`choose_by_bounds`): the count rules, and least_kv
        (KV usage, then counts)."""
        return self.decides_on_counts or self.policy == "least_kv"

    def choose_by_bounds(self, bounds: Sequence[tuple[int, int]], request: int = -1,
                         usage: Sequence[tuple[float, float]] | None = None) -> tuple[int | None, list[int]]:
        """least_outstanding, cache_aware or least_kv from (low, high) bounds on each instance's count (and, for
        least_kv, on its KV usage, `usage`): (the instance `choose` would pick whatever the values within their
        bounds, []) or (None, the instances whose exact values could change the choice: the ones that could beat
        the best upper key, and the best if it is not exact; for cache_aware also every inexact one while the
        bounds leave the balance test open; balanced without a long enough match, its smallest tree, settled).
        least_kv indexes `bounds` only where usage bounds are equal (a sequence that works counts out when indexed
        will do: `Deployment._CountsAt`). One bound per instance of this router, in its order."""
        n = len(bounds)
        # The best is the first holder of the least upper key in turn order from `nxt`: a walk in that order (`_after`:
        # the others after the turn) keeps it with plain comparisons, no turn worked out per instance (this runs at
        # every arrival, ~1.7 times: loops, not comprehensions, which are calls of their own)
        nxt = self.turn
        after = self._after[nxt]  # (bounds: one per instance, as every caller passes them)
        if self.policy == "least_kv":  # keys (usage, count, turn), as `choose`: compared in that order
            # (a count is read only where usages are equal: `bounds` may work them out when asked, `Deployment`)
            best, top_u, top_c = nxt, usage[nxt][1], None
            for i in after:
                u = usage[i][1]
                if u < top_u:
                    best, top_u, top_c = i, u, None
                elif u == top_u:
                    if top_c is None:
                        top_c = bounds[best][1]
                    c = bounds[i][1]
                    if c < top_c:
                        best, top_c = i, c
            top_turn = (best - nxt) % n
            rivals = []
            for j in range(n):
                if j == best:
                    continue
                u = usage[j][0]
                if u > top_u:
                    continue
                if u == top_u:
                    if top_c is None:
                        top_c = bounds[best][1]
                    c = bounds[j][0]
                    if c > top_c or (c == top_c and (j - nxt) % n > top_turn):
                        continue
                rivals.append(j)
            if not rivals:
                self.took_turn(best, n)
                return best, []
            if usage[best][0] != usage[best][1] or bounds[best][0] != bounds[best][1]:  # (the best is not exact)
                rivals.append(best)
            return None, rivals
        if self._tree is not None and request >= 0:  # cache_aware's tree (none: the count rule, the decode pool's choice)
            cand, settled = self._cache_rule_by_bounds(bounds, request)
            if settled is not None:
                return settled
            if len(cand) < n:  # (the instances holding the longest match: the others get bounds no choice can take)
                bounds = list(bounds)
                for i in range(n):
                    if i not in cand:
                        bounds[i] = _OUT
        # The least upper bound, ties to the next in turn (the walk above), and the rivals whose (low bound, turn) is
        # below its: the keys `choose` compares; a turn is worked out only where a rival's low bound equals that bound.
        best, top_hi = nxt, bounds[nxt][1]
        for i in after:
            hi = bounds[i][1]
            if hi < top_hi:
                best, top_hi = i, hi
        rivals = []
        j = 0
        for lo, _ in bounds:
            if lo <= top_hi and j != best and (lo < top_hi or (j - nxt) % n < (best - nxt) % n):
                rivals.append(j)
            j += 1
        if not rivals:
            self.took_turn(best, n)
            if self._tree is not None:
                self._remember(best, self._keys(request))
            return best, []
        if bounds[best][0] < top_hi:
            rivals.append(best)
        return None, rivals

    def _cache_rule_by_bounds(self, bounds: Sequence[tuple[int, int]], request: int) -> tuple[Sequence[int] | None, tuple | None]:
        """cache_aware's load test and match rule in `choose_by_bounds` (a method of its own: its comprehensions and key
        function would make the count rule's locals closure cells, dearer at every arrival): (the instances the count
        rule then chooses among, None), or (None, `choose_by_bounds`' answer) when the bounds leave the load test open
        or its smallest tree settles the choice."""
        n = len(bounds)
        keys = self._keys(request)
        # (C-level: (low, high) pairs order by their low bound first)
        balanced = not _imbalanced(min(bounds)[0], max(bounds, key=_HIGH)[1])  # even at the widest spread allowed
        if not balanced and not _imbalanced(min(bounds, key=_HIGH)[1], max(bounds)[0]):
            return None, (None, [i for i in range(n) if bounds[i][0] < bounds[i][1]])
        if not balanced:
            return range(n), None
        hit = self._memo[2]
        if hit is None:
            hit = [self._match((), request, i, keys) for i in range(n)]
            self._memo = (request, keys, hit, self._memo[3])
        top = max(hit)
        if self._follows_cache(request, top):
            return [i for i in range(n) if hit[i] == top], None
        # the smallest tree: the router's own exact state, settled whatever the counts
        nxt = self.turn
        best = min(range(n), key=lambda i: (self._tree_size(i), (i - nxt) % n))
        self.took_turn(best, n)
        self._remember(best, keys)
        return None, (best, [])

    def _weighted_scores(self, engines: Sequence[Engine], request: int, cand: list[int]) -> list[float]:
        """weighted_score: each candidate's weighted sum of llm-d's queue, KV and prefix scores (module docstring)."""
        waiting = [engines[i].num_waiting for i in cand]
        fewest, most = min(waiting), max(waiting)
        # (queue.go: every count equal scores 1 for all, "a neutral score")
        queue = [1.0] * len(cand) if most == fewest else [(most - w) / (most - fewest) for w in waiting]
        full = min((int(self.workload.prompt_tokens[request]) - 1) // self.block_size, MAX_PREFIX_BLOCKS)
        return [QUEUE_SCORE_WEIGHT * queue[j] + KV_SCORE_WEIGHT * (1.0 - engines[i].kv.usage)
                + (PREFIX_SCORE_WEIGHT * min(self._match(engines, request, i, []), full) / full if full > 0 else 0.0)
                for j, i in enumerate(cand)]  # fmt: skip

    # ------------------------------------------------------------ prefix matches
    def _keys(self, request: int) -> list[int]:
        """cache_aware: the keys of the request's full prompt blocks (what its tree stores and matches); where
        requests share no content, only those of its pool system prompt (the rest are private blocks: `_memo[3]`)."""
        if self._tree is None or request < 0:
            return []
        if self._memo[0] == request:
            return self._memo[1]
        wl = self.workload
        full = (int(wl.prompt_tokens[request]) - 1) // self.block_size
        private = 0
        if self._own_content and full > 0:  # (only the system prompt's keys: `block_keys` of its blocks)
            shared = system_prompt_blocks(wl, request, full, self.block_size)
            full, private = shared, full - shared
        keys = block_keys(wl, request, full, self.block_size, self._system_chain) if full > 0 else []
        self._memo = (request, keys, None, private)
        return keys

    def _match(self, engines: Sequence[Engine], request: int, i: int, keys: list[int]) -> int:
        """Leading full prompt blocks instance i holds: in the router's tree (cache_aware), else in the engine."""
        if self._tree is None:
            return engines[i].cached_prefix_blocks(self.workload, request) if self.workload is not None else 0
        # A prompt that routes a block's key routes all the keys before it (keys chain on their prefix), with the
        # same stamp (once owed stamps are written: an eviction writes them first), so no block is older than one
        # after it and eviction keeps each tree prefix-closed: the
        # keys present are a leading run, found by bisection (test_cache_aware checks it against a scan).
        tree = self._tree[i]
        if not keys or keys[0] not in tree:
            return 0
        if keys[-1] in tree:  # (the usual answers first: none, or the whole pool system prompt)
            return len(keys)
        return bisect_left(keys, True, key=lambda k: k not in tree)

    def _tree_size(self, i: int) -> int:
        """cache_aware: the blocks instance i's tree holds (keyed and private, after eviction): SGLang's tenant size,
        which counts characters (`Tree::get_smallest_tenant`), in the tree's unit, full prompt blocks."""
        return len(self._tree[i]) + self._num_private[i]

    def _follows_cache(self, request: int, best_hit: int) -> bool:
        """Some instance holds more than CACHE_THRESHOLD of the prompt's full blocks."""
        if self.workload is None:
            return False
        full = (int(self.workload.prompt_tokens[request]) - 1) // self.block_size
        return full > 0 and best_hit / full > CACHE_THRESHOLD

    def _remember(self, i: int, keys: list[int]) -> None:
        """cache_aware: the prompt sent to instance i is in its tree now (least recently used blocks go first).

        Its blocks not in the tree go in with this prompt's stamp; the leading run that was there (a pool system
        prompt, mostly: the same blocks for many prompts) gets it later, before an eviction reads the stamps: the
        run's last key names the run (keys chain on their prefix), so a run found again owes only its latest stamp
        (issue 13: cost; a stamp written into a large dict for each block of each prompt was the tree's main cost).
        Its private blocks (`_keys`) count towards the bound with its stamp, keyless."""
        memo = self._memo
        private = memo[3] if memo[1] is keys else 0
        if self._tree is None or not (keys or private):
            return
        hit = memo[2][i] if memo[2] is not None and memo[1] is keys else self._match((), -1, i, keys)
        self._memo = (-1, [], None, 0)
        tree = self._tree[i]
        stamp = self._stamp
        self._stamp += 1
        if hit < len(keys):
            tree.update(zip(keys[hit:] if hit else keys, repeat(stamp)))
        if hit:
            owed = self._owed[i]
            owed[keys[hit - 1]] = (stamp, keys, hit)
            if len(owed) > MAX_OWED:
                self._settle_stamps(i)
        if private:
            self._private[i].append((stamp, private))
            self._num_private[i] += private
        if len(tree) + self._num_private[i] > self.tree_blocks:  # evict in one batch, least recently routed first,
            self._settle_stamps(i)  # down to half the bound
            kept = self._private[i]
            stamps = np.fromiter(tree.values(), dtype=np.int64, count=len(tree))
            if kept:
                every = np.concatenate([stamps, np.repeat(*np.array(kept, dtype=np.int64).T)])
            else:
                every = stamps
            keep = self.tree_blocks // 2
            newest = np.partition(every, every.size - keep - 1)[every.size - keep - 1] if keep else every.max()
            self._tree[i] = dict(compress(tree.items(), (stamps > newest).tolist()))  # (ties go too: at most `keep` stay)
            if kept:  # (in routing order: stamps ascending)
                del kept[:bisect_right(kept, (int(newest), math.inf))]
                self._num_private[i] = sum(n for _, n in kept)

    def _settle_stamps(self, i: int) -> None:
        """Write the stamps instance i's tree owes (`_remember`), oldest first: each block ends with the latest
        stamp of the prompts that routed it, as if each had been written when its prompt was routed."""
        owed = self._owed[i]
        tree = self._tree[i]
        for stamp, keys, hit in sorted(owed.values(), key=lambda x: x[0]):
            tree.update(zip(keys[:hit], repeat(stamp)))
        owed.clear()


def _imbalanced(min_load: int, max_load: int) -> bool:
    """SGLang's load test: max - min above the absolute threshold and max above the relative one x min."""
    return max_load - min_load > BALANCE_ABS_THRESHOLD and max_load > BALANCE_REL_THRESHOLD * min_load


def session_instance(session: np.ndarray, num_instances: int) -> np.ndarray:
    """Instance of each session for the `session` router: the splitmix64 finalizer of the session id (a fixed,
    well-mixed integer hash, so neighbouring ids spread like a hash ring's keys) mod the instance count."""
    x = session.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(num_instances)).astype(np.int64)
