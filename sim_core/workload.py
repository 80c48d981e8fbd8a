"""Generate the requests of a run: arrival times, prompt and output lengths, priorities.

Uses only the generator passed in. Each quantity draws from its own child stream, so changing the
arrival rate leaves the lengths of request i unchanged (fair A/B comparisons on the same workload).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sim_core.config import LengthDist, WorkloadConfig
from sim_core.types import FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests of one run, sorted by arrival; index = request id."""

    arrival_s: FloatArray  # (R,) inf for closed-loop requests (and later session turns) not yet released
    prompt_tokens: IntArray  # (R,)
    output_tokens: IntArray  # (R,) per sample
    priority: IntArray  # (R,) 0 = highest
    class_idx: IntArray  # (R,) index into WorkloadConfig.classes (-1 for traces)
    num_samples: int  # n parallel samples per request
    closed_loop_think_s: float | None  # not None: release request i+N when one finishes
    # Prefix identity (prefix caching). The first prefix_len[r] prompt tokens are system
    # prompt prefix_group[r] (-1: none); the rest belong to content_id[r], which is shared by every
    # turn of a session (turn t+1's prompt extends turn t's prompt and reply). Traces may instead
    # give explicit per-block hash ids, one per hash_block_tokens tokens.
    prefix_group: IntArray | None = None  # (R,)
    prefix_len: IntArray | None = None  # (R,)
    content_id: IntArray | None = None  # (R,)
    block_hash_ids: tuple[IntArray, ...] | None = None  # R ragged arrays
    hash_block_tokens: int = 0
    # Closed-loop sessions (sim_core/sessions.py): request r's reply, then think_s[r], then request
    # next_turn[r] is sent (-1: r is its session's last turn in this run).
    next_turn: IntArray | None = None  # (R,)
    think_s: FloatArray | None = None  # (R,)

    @property
    def releases_on_finish(self) -> bool:
        """Some requests are sent only when another finishes (closed-loop clients or session turns)."""
        return self.closed_loop_think_s is not None or self.next_turn is not None

    @property
    def num_requests(self) -> int:
        return int(self.arrival_s.shape[0])


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> IntArray:
    if dist.dist == "fixed":
        return np.full(n, dist.mean, dtype=np.int64)
    if dist.dist == "uniform":
        return rng.integers(dist.min, dist.max + 1, size=n, dtype=np.int64)
    # lognormal with the requested mean: E[X] = exp(mu + sigma^2 / 2)
    mu = np.log(dist.mean) - dist.sigma**2 / 2
    raw = rng.lognormal(mu, dist.sigma, size=n)
    return np.clip(np.rint(raw), dist.min, dist.max).astype(np.int64)


def sample_arrivals(cfg: WorkloadConfig, n: int, rng: np.random.Generator, rate_per_s: float | None = None) -> FloatArray:
    """`n` arrival times of `cfg`'s arrival process, at `rate_per_s` when given (sessions start at rate / turns, which
    may be below the smallest rate a config takes), else at workload.arrival.rate_per_s."""
    arr = cfg.arrival
    rate = arr.rate_per_s if rate_per_s is None else rate_per_s
    if arr.process == "offline":
        return np.zeros(n)
    if arr.process == "closed_loop":
        out = np.full(n, np.inf)
        out[: arr.num_clients] = 0.0
        return out
    if arr.process == "constant":
        return np.arange(n) / rate
    if arr.process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    else:  # gamma: shape k = 1/CV^2 keeps the mean gap 1/rate and sets the burstiness
        shape = 1.0 / arr.burstiness_cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    return np.cumsum(gaps)


def copy_workload(wl: Workload) -> Workload:
    """A workload whose arrays are copies (each engine of a deployment writes its own). Cheaper than drawing the
    same workload again: a 64-instance deployment of 200k requests spent ~4 s doing that before its run budget
    could stop it. (block_hash_ids: a tuple of arrays nothing writes into.)"""
    return dataclasses.replace(wl, **{f.name: v.copy() for f in dataclasses.fields(wl)
                                      if isinstance(v := getattr(wl, f.name), np.ndarray)})  # fmt: skip


def generate_workload(cfg: WorkloadConfig, rng: np.random.Generator) -> Workload:
    n = cfg.num_requests
    think = cfg.arrival.think_time_s if cfg.arrival.process == "closed_loop" else None
    if cfg.trace is not None:
        tr = cfg.trace
        prio = np.asarray(tr.priority[:n] if tr.priority is not None else [0] * n, dtype=np.int64)
        hashes = None
        if tr.block_hash_ids is not None:
            hashes = tuple(np.asarray(h, dtype=np.int64) for h in tr.block_hash_ids[:n])
        return Workload(
            arrival_s=np.asarray(tr.arrival_s[:n], dtype=np.float64),
            prompt_tokens=np.asarray(tr.prompt_tokens[:n], dtype=np.int64),
            output_tokens=np.asarray(tr.output_tokens[:n], dtype=np.int64),
            priority=prio,
            class_idx=np.full(n, -1, dtype=np.int64),
            num_samples=cfg.num_samples,
            closed_loop_think_s=None,
            block_hash_ids=hashes,
            hash_block_tokens=tr.hash_block_tokens if hashes is not None else 0,
        )
    rng_arrival, rng_prompt, rng_output, rng_class = rng.spawn(4)
    if cfg.shared_prefix.enabled or cfg.sessions.turns > 1:
        # Separate child streams, spawned after the first four: plain workloads stay bit-identical.
        return _prefix_workload(cfg, n, rng_arrival, rng_prompt, rng_output, rng_class, *rng.spawn(3))
    shares = np.array([c.share for c in cfg.classes])
    class_idx = rng_class.choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int64)
    class_prio = np.array([c.priority for c in cfg.classes], dtype=np.int64)
    return Workload(
        arrival_s=sample_arrivals(cfg, n, rng_arrival),
        prompt_tokens=sample_lengths(cfg.prompt_tokens, n, rng_prompt),
        output_tokens=sample_lengths(cfg.output_tokens, n, rng_output),
        priority=class_prio[class_idx],
        class_idx=class_idx,
        num_samples=cfg.num_samples,
        closed_loop_think_s=think,
    )


def _prefix_workload(cfg: WorkloadConfig, n: int, rng_arrival, rng_prompt, rng_output, rng_class, rng_pool,
                     rng_user, rng_think) -> Workload:  # fmt: skip
    """Sessions of `turns` turns whose first prompt may start with a pooled system prompt.

    Session starts follow the arrival process at rate / turns (so requests arrive at about the
    configured rate). Closed-loop sessions (the default): turn t+1 is sent an exponential think time
    after turn t's reply is complete (the engine releases it, sim_core/sessions.py), so its arrival is
    unknown (inf) until then. Open loop (`sessions.closed_loop` false): it is sent that think time
    after turn t's send. Ids follow the open-loop order (start + think times): the run keeps the
    first `n` in that order, a prefix of each session's turns.
    """
    sp, ses = cfg.shared_prefix, cfg.sessions
    T = ses.turns
    S = -(-n // T)
    starts = sample_arrivals(cfg, S, rng_arrival, cfg.arrival.rate_per_s / T)  # (S,)
    think = rng_think.exponential(ses.think_time_s, size=(S, T - 1)) if ses.think_time_s > 0 else np.zeros((S, T - 1))
    arrival = starts[:, None] + np.concatenate([np.zeros((S, 1)), np.cumsum(think, axis=1)], axis=1)  # (S, T)
    group = np.full(S, -1, dtype=np.int64)
    sys_len = np.zeros(S, dtype=np.int64)
    if sp.enabled:
        pool_len = sample_lengths(sp.system_prompt_tokens, sp.num_system_prompts, rng_pool)
        shares = rng_pool.random(S) < sp.share_ratio
        picks = rng_pool.integers(0, sp.num_system_prompts, size=S)
        group = np.where(shares, picks, -1)
        sys_len = np.where(shares, pool_len[picks], 0)
    first = sample_lengths(cfg.prompt_tokens, S, rng_prompt)
    out = sample_lengths(cfg.output_tokens, S * T, rng_output).reshape(S, T)
    user = sample_lengths(ses.user_tokens, S * (T - 1), rng_user).reshape(S, T - 1)
    prompt = np.empty((S, T), dtype=np.int64)
    prompt[:, 0] = sys_len + first
    for t in range(1, T):  # the previous prompt and its reply, then the new user message
        prompt[:, t] = prompt[:, t - 1] + out[:, t - 1] + user[:, t - 1]
    order = np.argsort(arrival.ravel(), kind="stable")[:n]  # ids follow the open-loop arrival order
    session = np.repeat(np.arange(S, dtype=np.int64), T)[order]
    turn = np.tile(np.arange(T, dtype=np.int64), S)[order]
    slot = np.full(S * T, -1, dtype=np.int64)
    slot[order] = np.arange(n, dtype=np.int64)  # (S*T,) id of each (session, turn) kept, else -1
    later = np.concatenate([slot.reshape(S, T)[:, 1:], np.full((S, 1), -1, dtype=np.int64)], axis=1).ravel()
    gaps = np.concatenate([think, np.zeros((S, 1))], axis=1).ravel()  # (S*T,) think time after each turn
    shares = np.array([c.share for c in cfg.classes])
    class_idx = rng_class.choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int64)
    class_prio = np.array([c.priority for c in cfg.classes], dtype=np.int64)
    closed = T > 1 and ses.closed_loop
    return Workload(
        arrival_s=np.where(turn == 0, arrival.ravel()[order], np.inf) if closed else arrival.ravel()[order],
        prompt_tokens=prompt.ravel()[order],
        output_tokens=out.ravel()[order],
        priority=class_prio[class_idx],
        class_idx=class_idx,
        num_samples=cfg.num_samples,
        closed_loop_think_s=None,
        prefix_group=group[session],
        prefix_len=sys_len[session],
        content_id=session,
        next_turn=later[order] if closed else None,
        think_s=gaps[order] if closed else None,
    )
