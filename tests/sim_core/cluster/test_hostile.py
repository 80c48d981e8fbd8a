"""Generated deployment sections: either a clear error naming the field, or a run that keeps every
instance's invariants and accounts for every request."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import MemoryPlanError, PresetError, config_from_dict, run_simulation

ROUTERS = st.sampled_from(["round_robin", "least_outstanding", "least_kv", "prefix_affinity", "cache_aware", "random", 3])
POOL = st.fixed_dictionaries({}, optional={
    "replicas": st.one_of(st.integers(-1, 4), st.just(100)),
    "tensor_parallel": st.one_of(st.none(), st.sampled_from([1, 2, 0])),
    "scheduler": st.one_of(st.none(), st.fixed_dictionaries({"max_num_seqs": st.integers(1, 64),
                                                             "max_num_batched_tokens": st.sampled_from([16, 512, 2048])})),
})  # fmt: skip
LINK = st.fixed_dictionaries({}, optional={
    "bandwidth_gb_per_s": st.one_of(st.none(), st.floats(-1, 1000), st.just(float("nan"))),
    "latency_us": st.floats(0, 5000), "layerwise_pipelining": st.booleans(),
})  # fmt: skip
DEPLOYMENT = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"replicas": st.integers(-2, 5), "router": ROUTERS,
                                        "state_refresh_s": st.one_of(st.floats(-1, 70), st.just(float("nan")))}),
    st.fixed_dictionaries({"disaggregation": st.fixed_dictionaries({}, optional={"prefill": POOL, "decode": POOL, "link": LINK,
                                                                                  "first_token_from": st.sampled_from(["prefill", "decode", "client"])})},
                          optional={"router": ROUTERS, "replicas": st.integers(1, 2)}),
    st.text(max_size=5), st.lists(st.integers(), max_size=2),
)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dep=DEPLOYMENT, seed=st.integers(0, 50), prefix=st.booleans())
def test_generated_deployments_run_or_explain(dep, seed, prefix):
    data = {"seed": seed, "workload": {"num_requests": 12, "arrival": {"rate_per_s": 30.0},
                                       "prompt_tokens": {"dist": "uniform", "mean": 300, "min": 10, "max": 800},
                                       "output_tokens": {"dist": "uniform", "mean": 20, "min": 1, "max": 40}},
            "deployment": dep}  # fmt: skip
    if prefix:  # prefix caching per replica / prefill instance, prompts sharing 2 system prompts
        data["kv_cache"] = {"enable_prefix_caching": True}
        data["workload"]["shared_prefix"] = {"num_system_prompts": 2, "share_ratio": 0.8,
                                             "system_prompt_tokens": {"dist": "fixed", "mean": 256}}  # fmt: skip
    try:
        cfg = config_from_dict(data)
    except PresetError as err:
        assert "deployment" in str(err)
        return
    try:
        res = run_simulation(cfg, check_invariants=True)
    except MemoryPlanError as err:
        assert str(err)
        return
    s = res.summary
    assert s.num_finished + s.num_unfinished == 12
    assert np.all(res.requests.num_emitted <= res.requests.output_tokens)
