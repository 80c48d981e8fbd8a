"""The scalar tick price keeps a tick's context-free terms per (tokens, samples) (`costmodel.MEMO_TOKEN_TERMS`; issue
13: the decode instances of 2P2D price their ticks one by one; issue 11: speculative draft steps and verify passes,
chunked prefill's composed ticks): every price the same as the array path's and as without the memo, bit for bit,
within its bound, and whole runs (one engine, speculation, chunked prefill, random engine configs, xPyD under decode
back-pressure, vLLM's first token from the decode side) give the same arrays with the memo on and off, with the memo
used."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from scripts.cluster_digest import _update
from sim_core import costmodel
from sim_core.engine import Engine, run_simulation
from sim_core.sweep import with_value
from tests.conftest import make_config
from tests.sim_core.test_equivalence import ENGINE_SCENARIOS, random_config


def _digest(res) -> str:
    m = hashlib.sha256()
    _update(res, m)
    for x in getattr(res, "instances", ()):
        _update(x.result, m)
        m.update(x.request_ids.tobytes())
    for f in ("instance_of", "decode_instance_of", "kv_wait_start_s", "kv_transfer_start_s", "kv_transfer_end_s"):
        a = getattr(res, f, None)
        if a is not None:
            m.update(np.ascontiguousarray(a).tobytes())
    return m.hexdigest()


def _prices(cost, calls):
    return [tuple(cost._tick_scalar(*c)) for c in calls]


def _calls(seed: int = 7, num_calls: int = 400) -> list[tuple]:
    """Scalar tick prices' arguments of every kind, in random order."""
    rng = random.Random(seed)
    calls = []
    for _ in range(num_calls):
        b = rng.choice([0, 1, 2, 3, 7, 16, 64, 255])
        ctx = rng.randint(0, 200_000)
        kind = rng.random()
        if kind < 0.4:  # all-decode: tokens = samples = sequences
            calls.append((b, b, ctx + b, ctx, b, 0.0))
        elif kind < 0.45:  # a draft step (`Speculator._tick_draft_s`): no sequences priced
            calls.append((b, b, ctx + b, ctx, 0, 0.0))
        elif kind < 0.5:  # a verify pass of width w (`speculative.verify_aggregates`): w tokens and samples a sequence
            w = rng.randint(2, 5)
            calls.append((w * b, w * b, w * ctx + b * w * (w + 1) // 2, ctx, b, 0.0))
        elif kind < 0.6:  # a swap-only tick, then an empty one of the same count (no swap)
            calls.append((0, 0, 0, 0, 0, float(rng.randint(1, 10**9))))
            calls.append((0, 0, 0, 0, 0, 0.0))
        elif kind < 0.65:  # as many tokens as sequences, fewer samples
            calls.append((b + 1, 1, ctx + b + 1, ctx, b + 1, 0.0))
        elif kind < 0.7:  # decodes with a swap
            calls.append((b, b, ctx + b, ctx, b, float(rng.randint(1, 10**9))))
        else:  # composed: tokens, samples and sequences apart (a few chunk sizes, as a chunked-prefill run repeats them)
            p = rng.choice([rng.randint(1, 8192), 512, 2048 - b])
            calls.append((p + b, b + 1, ctx + p * (p + 1) // 2, ctx, b + 1, 0.0))
    return calls


@pytest.mark.parametrize("preset", ["chat-h100-llama8b", *ENGINE_SCENARIOS[:6]])
def test_prices_equal_the_array_path_and_the_unkept_terms(monkeypatch, preset):
    """Every scalar price, all-decode ticks kept and not, swaps, empty ticks and composed ticks in any order, equals
    `CostModel.tick`'s array path and the price with the memo off, bit for bit; all-decode ticks were kept."""
    cost = Engine(make_config(preset)).cost
    calls = _calls()
    kept = _prices(cost, calls)
    by_tokens, by_pair = cost._token_terms
    assert by_tokens and by_pair, "all-decode and composed ticks' terms were kept"
    assert all(t == s for t, s in [(k, k) for k in by_tokens]) and all(t != s for t, s in by_pair)
    arrays = [tuple(x.item() if hasattr(x, "item") else x for x in cost.tick(*(np.asarray(v) for v in c))) for c in calls]
    monkeypatch.setattr(costmodel, "MEMO_TOKEN_TERMS", False)
    fresh = Engine(make_config(preset)).cost
    unkept = _prices(fresh, calls)
    assert not any(fresh._token_terms)
    assert kept == unkept
    assert [tuple(map(float, k[:3])) + (bool(k[3]),) for k in kept] == [
        tuple(map(float, a[:3])) + (bool(a[3]),) for a in arrays]


def _xpyd(seed: int, decode_first: bool = False, tight: bool = False):
    cfg = make_config(seed=seed, workload__num_requests=60, workload__arrival__rate_per_s=[10.0, 20.0, 6.0][seed % 3],
                      workload__prompt_tokens={"dist": "lognormal", "mean": 1500, "min": 100, "max": 3000},
                      workload__output_tokens={"dist": "lognormal", "mean": 300, "min": 1, "max": 600})
    hw = cfg.hardware.model_dump()
    dis = {"prefill": {"replicas": 1 + seed % 2}, "decode": {"replicas": 2}}
    if tight:  # decode back-pressure: transfers wait for decode blocks
        dis["prefill"]["hardware"] = hw | {"memory_gib": 19.0}
        dis["decode"]["hardware"] = hw | {"memory_gib": 19.5}
    if decode_first:
        dis["first_token_from"] = "decode"
    return with_value(cfg, "deployment", {"router": ["round_robin", "least_outstanding"][seed % 2], "disaggregation": dis})


def _configs():
    out = [("one engine", make_config(workload__num_requests=120)),
           ("2P2D", with_value(make_config(workload__num_requests=200, workload__arrival__rate_per_s=24.0), "deployment",
                               {"disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}}))]  # fmt: skip
    out += [("chunked prefill", make_config("engine-sarathi-serve", workload__num_requests=120)),
            ("speculation", with_value(make_config(workload__num_requests=80), "scheduler.speculative.enabled", True)),
            ("speculation, draft model", with_value(with_value(make_config(workload__num_requests=80), "scheduler.speculative.enabled", True),
                                                     "scheduler.speculative.draft", "model"))]  # fmt: skip
    out += [(f"random {k}", random_config(k)) for k in range(0, 24, 3)]
    out += [(f"xPyD {s} tight={t} decode_first={f}", _xpyd(s, f, t)) for s in range(3) for t in (False, True)
            for f in (False, True)]  # fmt: skip
    return out


@pytest.mark.parametrize("name,cfg", _configs(), ids=[name for name, _ in _configs()])
def test_runs_equal_with_and_without_the_kept_terms(monkeypatch, name, cfg):
    """Every array of a run the same with the memo on and off; the run priced all-decode ticks from it."""
    used = []
    make = costmodel.CostModel._make_scalar_tick

    def noting(self):  # (every cost model the run builds: each instance's)
        fn = make(self)
        used.append(self._token_terms)
        return fn

    monkeypatch.setattr(costmodel.CostModel, "_make_scalar_tick", noting)
    on = _digest(run_simulation(cfg))
    if not name.startswith("random"):  # (a random config may price no all-decode tick alone: exclusive batches...)
        assert any(by_tokens for by_tokens, _ in used), "some all-decode tick was priced from kept terms"
    if name in ("chunked prefill", "speculation, draft model"):
        assert any(by_pair for _, by_pair in used), "composed ticks were priced from kept terms"
    monkeypatch.setattr(costmodel, "MEMO_TOKEN_TERMS", False)
    used.clear()
    off = _digest(run_simulation(cfg))
    assert not any(a or b for a, b in used)
    assert on == off


@pytest.mark.parametrize("max_entries", [0, 1, 5])
def test_a_full_memo_prices_the_same_and_keeps_no_more(monkeypatch, max_entries):
    """Past `MEMO_MAX_ENTRIES` a tick's terms are computed and not kept (a bound in bytes for a long run's many chunk
    mixes): the same prices, and no more entries of either kind."""
    calls = _calls(seed=11)
    free = _prices(Engine(make_config()).cost, calls)
    monkeypatch.setattr(costmodel, "MEMO_MAX_ENTRIES", max_entries)
    cost = Engine(make_config()).cost
    assert _prices(cost, calls) == free
    assert [len(m) for m in cost._token_terms] == [max_entries, max_entries]
