import numpy as np
import pytest

from sim_core.config import WorkloadConfig
from sim_core.workload import generate_workload


def gen(seed=0, **kw):
    return generate_workload(WorkloadConfig.model_validate({"num_requests": 20000} | kw), np.random.default_rng(seed))


def test_same_seed_same_workload_and_other_seed_differs():
    a, b, c = gen(1), gen(1), gen(2)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_changing_the_rate_keeps_the_lengths():
    a, b = gen(arrival={"rate_per_s": 5}), gen(arrival={"rate_per_s": 50})
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens) and np.array_equal(a.output_tokens, b.output_tokens)


def test_poisson_rate_and_gamma_burstiness():
    p = gen(arrival={"process": "poisson", "rate_per_s": 10})
    g = gen(arrival={"process": "gamma", "rate_per_s": 10, "burstiness_cv": 3})
    gp, gg = np.diff(p.arrival_s), np.diff(g.arrival_s)
    assert gp.mean() == pytest.approx(0.1, rel=0.05) and gg.mean() == pytest.approx(0.1, rel=0.1)
    assert gp.std() / gp.mean() == pytest.approx(1, rel=0.1) and gg.std() / gg.mean() == pytest.approx(3, rel=0.15)


def test_constant_offline_and_closed_loop_arrivals():
    assert np.allclose(np.diff(gen(arrival={"process": "constant", "rate_per_s": 4}).arrival_s), 0.25)
    assert not gen(arrival={"process": "offline"}).arrival_s.any()
    cl = gen(arrival={"process": "closed_loop", "num_clients": 8}).arrival_s
    assert (cl[:8] == 0).all() and np.isinf(cl[8:]).all()


def test_lognormal_mean_and_clipping():
    w = gen(prompt_tokens={"dist": "lognormal", "mean": 500, "min": 10, "max": 100000, "sigma": 0.5})
    assert w.prompt_tokens.mean() == pytest.approx(500, rel=0.03)
    clipped = gen(prompt_tokens={"dist": "lognormal", "mean": 500, "min": 100, "max": 600, "sigma": 1.0})
    assert clipped.prompt_tokens.min() >= 100 and clipped.prompt_tokens.max() <= 600


def test_uniform_and_fixed_lengths():
    u = gen(output_tokens={"dist": "uniform", "mean": 50, "min": 10, "max": 90})
    assert u.output_tokens.min() >= 10 and u.output_tokens.max() <= 90
    assert (gen(output_tokens={"dist": "fixed", "mean": 7, "min": 1, "max": 7}).output_tokens == 7).all()


def test_classes_assign_priorities_by_share():
    w = gen(classes=[{"name": "hi", "share": 0.2, "priority": 0}, {"name": "lo", "share": 0.8, "priority": 3}])
    assert (w.priority == 0).mean() == pytest.approx(0.2, abs=0.02)


def test_shared_system_prompts_prefix_the_prompts_at_the_share_ratio():
    plain = gen(num_requests=4000)
    w = gen(num_requests=4000, shared_prefix={"num_system_prompts": 5, "share_ratio": 0.6,
                                              "system_prompt_tokens": {"dist": "fixed", "mean": 700}})  # fmt: skip
    shared = w.prefix_group >= 0
    assert shared.mean() == pytest.approx(0.6, abs=0.03) and set(w.prefix_group[shared]) == set(range(5))
    assert (w.prefix_len[shared] == 700).all() and (w.prefix_len[~shared] == 0).all()
    # the user part is the same draw as without the pool: the system prompt is added in front
    assert np.array_equal(w.prompt_tokens - w.prefix_len, plain.prompt_tokens)
    assert np.array_equal(w.arrival_s, plain.arrival_s)


def test_sessions_extend_the_previous_turn_by_its_reply_and_new_user_tokens():
    w = gen(num_requests=3000, arrival={"rate_per_s": 6}, sessions={"turns": 4, "think_time_s": 30})
    first = np.isfinite(w.arrival_s)  # later turns are sent by the engine when the previous reply is done
    assert np.all(np.diff(w.arrival_s[first]) >= 0)
    starts = w.arrival_s[first]
    assert ((starts >= 100) & (starts < 400)).sum() / 300 == pytest.approx(6 / 4, rel=0.15)  # sessions at rate / turns
    for s in np.unique(w.content_id)[:50]:
        turns = np.flatnonzero(w.content_id == s)  # ids follow the open-loop order: turns in order
        p, o = w.prompt_tokens[turns], w.output_tokens[turns]
        assert np.all(p[1:] > p[:-1] + o[:-1])  # previous prompt + reply + at least one new user token
        assert first[turns[0]] and not first[turns[1:]].any()
        assert w.next_turn[turns[:-1]].tolist() == turns[1:].tolist() and w.next_turn[turns[-1]] == -1
    assert np.all(w.think_s[w.next_turn >= 0] >= 0) and w.think_s[w.next_turn >= 0].mean() == pytest.approx(30, rel=0.1)


def test_plain_workloads_are_unchanged_by_the_new_fields():
    w = gen()
    assert w.prefix_group is None and w.content_id is None and w.block_hash_ids is None
