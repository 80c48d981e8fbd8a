"""Hypothesis strategies for the hostile-input and valid-config property suites.

Case counts: each property has a small CI default; `SIM_PROPERTY_CASES=N` raises cheap properties
to N cases and expensive ones (a whole page run per case) to N // 20.
"""

from __future__ import annotations

import base64
import json
import math
import os
import zlib
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sim_core import list_presets, load_preset
from sim_core.config import tp_degrees_allowed
from tests.conftest import EXPLORE_FACTOR, PROFILE, SCALED_BY_CASES

CASES_ENV = "SIM_PROPERTY_CASES"


def cases(ci_default: int, expensive: bool = False) -> settings:
    """Hypothesis settings: `ci_default` examples, or the switch's number (a twentieth for expensive), drawn as the
    profile draws them (CI: the same every run), new ones when the switch raises them. The soak's explore profile
    multiplies them here (they may decorate a test's inner function, which the collection hook in tests/conftest.py
    does not see) and files them in SCALED_BY_CASES, so that the hook does not multiply them again."""
    wanted = os.environ.get(CASES_ENV)
    n = ci_default if not wanted else max(ci_default, int(wanted) // (20 if expensive else 1))
    explore = PROFILE == "explore"
    own = settings(max_examples=n * (EXPLORE_FACTOR if explore else 1), deadline=None, print_blob=True,
                   derandomize=settings.default.derandomize and not wanted and not explore,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])  # fmt: skip
    if explore:
        SCALED_BY_CASES.append(own)
    return own


# ---------------------------------------------------------------- hostile values
SURROGATES = st.sampled_from(["x\ud800y", "\udfff", "a\udc80"])
MARKDOWN_BAITS = st.sampled_from([
    "[Session expired - log in here](https://example.invalid/login)", "![](https://example.invalid/p.png)",
    "<https://example.invalid>", "www.example.invalid", "# big", ":red[alarm] :material/warning:", "$x^2$",
    "**bold** _it_ `code`", "<img src=x onerror=alert(1)>", "| a | b |\n|---|---|", "> quote\n- item\n1. one",
])  # fmt: skip
NUMBER_TEXT = st.sampled_from(["12", "١٢٣", "1_000", "0x10", "1e3", " 7 ", "", "-0", "+5", "٣.٥", "1,5"])
BAD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -5, -1e-9, 0, 2**70, -(2**70)])


def nested_text(depth: int) -> str:
    """JSON text nested `depth` levels (built as text: json.dumps itself would recurse too deep)."""
    opens = "".join('{"a":' if i % 2 == 0 else "[" for i in range(depth))
    return opens + "1" + "".join("}" if i % 2 == 0 else "]" for i in reversed(range(depth)))


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


# A whole number past Python's 4,300-digit limit for int() of text (a 61-character ?cfg= link of {"seed": 9...9}
# crashed every page), written as JSON text: json.dumps cannot write such an int either
LONG_DIGITS = st.tuples(st.sampled_from(["", "-"]), st.integers(4301, 6000)).map(lambda s: s[0] + "9" * s[1])

HOSTILE_VALUES = st.one_of(
    st.booleans(), st.none(), BAD_NUMBERS, NUMBER_TEXT, SURROGATES, MARKDOWN_BAITS, st.text(max_size=30),
    st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.integers(min_value=33, max_value=3000).map(nested),
)  # fmt: skip


def leaf_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in leaf_paths(v, prefix + (k,))] or [prefix]
    return [prefix]


def set_path(data: dict, path: tuple, value: Any) -> None:
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


@st.composite
def malformed_config_dicts(draw) -> tuple[dict, tuple, Any]:
    """A preset's JSON with one hostile change: (data, path changed, new value)."""
    data = load_preset(draw(st.sampled_from(list_presets()))).model_dump(mode="json")
    data["workload"].pop("trace", None)
    kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "unknown_key", "section", "drop"]))
    paths = [p for p in leaf_paths(data) if p]
    path = draw(st.sampled_from(paths))
    if kind == "leaf":
        value = draw(HOSTILE_VALUES)
        set_path(data, path, value)
        return data, path, value
    if kind == "unknown_key":
        key = draw(st.one_of(st.text(min_size=1, max_size=20), MARKDOWN_BAITS, SURROGATES))
        set_path(data, path[:-1] + (key,), 1) if len(path) > 1 else data.__setitem__(key, 1)
        return data, path[:-1] + (key,), 1
    if kind == "section":
        section = draw(st.sampled_from(["hardware", "model", "workload", "scheduler", "kv_cache", "limits", "calibration"]))
        value = draw(st.one_of(HOSTILE_VALUES, st.sampled_from(list_presets("hardware") + list_presets("engines"))))
        data[section] = value
        return data, (section,), value
    node = data
    for part in path[:-1]:
        node = node[part]
    node.pop(path[-1])
    return data, path, None


def to_json(obj: Any) -> str:
    try:
        return json.dumps(obj)
    except RecursionError:  # a deeply nested value from `nested`
        return nested_text(3000)


def encode_json(obj: Any) -> str:
    """What a tampered `?cfg=` carries: urlsafe base64 of zlib of JSON (surrogates escaped)."""
    text = obj if isinstance(obj, str) else to_json(obj)
    return base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8", "surrogatepass"), 9)).decode().rstrip("=")


DEPLOYMENT_KEYS = ["deployment", "deployment.replicas", "deployment.router", "deployment.state_refresh_s",
                   "deployment.disaggregation.prefill.replicas", "deployment.disaggregation.decode.replicas",
                   "deployment.disaggregation.prefill.tensor_parallel", "deployment.disaggregation.decode.hardware",
                   "deployment.disaggregation.link.bandwidth_gb_per_s", "deployment.disaggregation.link.latency_us"]  # fmt: skip
CONFIG_KEYS = ["hardware.name", "hardware.memory_gb", "hardware.num_gpus", "workload.num_requests", "workload.num_samples",
               "scheduler.name", "scheduler.max_num_seqs", "workload.arrival.rate_per_s", "limits.max_ticks",
               "limits.num_recorded_batches", "model.num_layers", "kv_cache.block_size", "seed", "scheduler.nope",
               "hardware", "nope.deeper", "workload.arrival", *DEPLOYMENT_KEYS]  # fmt: skip
PAGE_KEYS = ["sweep", "start", "stop", "n", "vs", "lesson", "a_preset", "b_preset", "a_cfg", "b_cfg", "a_seed", "foo"]


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else to_json(value)


@st.composite
def link_params(draw) -> dict[str, str]:
    """A tampered query string: a preset or cfg, config overrides and page parameters, all hostile."""
    params: dict[str, str] = {}
    base = draw(st.sampled_from(["preset", "cfg", "none"]))
    if base == "preset":
        params["preset"] = draw(st.one_of(st.sampled_from(list_presets()), MARKDOWN_BAITS, st.text(max_size=20),
                                          st.sampled_from(["/etc/passwd", "../presets/scenarios/x"])))  # fmt: skip
    elif base == "cfg":
        data, _, _ = draw(malformed_config_dicts())
        params["cfg"] = draw(st.one_of(
            st.just(encode_json(data)), st.just(encode_json(nested_text(draw(st.integers(40, 5000))))),
            LONG_DIGITS.map(lambda digits: encode_json(f'{{"seed": {digits}}}')),
            st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC-_=!", max_size=60),
        ))  # fmt: skip
    # (a name from the link is shown too, in "ignored link parameter(s)": a Markdown bait as a name)
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS + PAGE_KEYS) | MARKDOWN_BAITS, max_size=4, unique=True)):
        value = draw(st.one_of(HOSTILE_VALUES, st.sampled_from(["rate", "chunk", "num_gpus", "max_num_seqs", "vllm-v1",
                                                                  "chat-h100-llama8b", "inf", "-5", "abc", "nan", "1e300"]),
                               LONG_DIGITS))  # fmt: skip
        text = _param_text(value)
        if key == "a_cfg" or key == "b_cfg":
            text = encode_json(nested_text(draw(st.integers(40, 3000)))) if draw(st.booleans()) else text
        params[key] = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")[:8000]  # as a browser sends it
    return params


@st.composite
def valid_configs(draw) -> dict:
    """A config dict across every knob's range, sized to run in well under a second."""
    data = load_preset(draw(st.sampled_from(list_presets()))).model_dump(mode="json")
    data["model"] = load_preset("chat-h100-llama8b").model_dump(mode="json")["model"] | _model(draw(st.sampled_from(list_presets("models"))))
    data["seed"] = draw(st.integers(0, 2**32 - 1))
    hw = data["hardware"]
    m = data["model"]  # (a TP degree the model's heads split evenly over: Qwen2.5-7B's 28 heads do not go over 8 GPUs)
    tps = [t for t in (1, 2, 4, 8) if t in tp_degrees_allowed(m["num_heads"], m["num_kv_heads"])]
    hw.update(num_gpus=draw(st.sampled_from(tps)), memory_gib=draw(st.floats(16, 320)),
              peak_tflops=draw(st.floats(50, 5000)), hbm_bandwidth_gb_per_s=draw(st.floats(300, 10000)),
              interconnect_gb_per_s=draw(st.floats(10, 2000)), pcie_gb_per_s=draw(st.floats(4, 256)))  # fmt: skip
    data["model"]["weight_dtype"] = draw(st.sampled_from(["fp16", "bf16", "fp8", "int8", "int4"]))
    wl = data["workload"]
    wl["trace"] = None
    wl["num_requests"] = draw(st.integers(1, 40))
    wl["num_samples"] = draw(st.integers(1, 4))
    wl["arrival"] = dict(process=draw(st.sampled_from(["poisson", "gamma", "constant", "offline", "closed_loop"])),
                         rate_per_s=draw(st.floats(0.1, 1000)), burstiness_cv=draw(st.floats(0.1, 10)),
                         num_clients=draw(st.integers(1, 64)), think_time_s=draw(st.floats(0, 5)))  # fmt: skip
    for key, hi in (("prompt_tokens", 4096), ("output_tokens", 256)):
        lo_v = draw(st.integers(1, hi))
        hi_v = draw(st.integers(lo_v, hi))
        wl[key] = dict(dist=draw(st.sampled_from(["fixed", "uniform", "lognormal"])), min=lo_v, max=hi_v,
                       mean=draw(st.integers(lo_v, hi_v)), sigma=draw(st.floats(0, 4)))  # fmt: skip
    num_classes = draw(st.integers(1, 3))
    weights = draw(st.lists(st.integers(1, 9), min_size=num_classes, max_size=num_classes))
    shares = [w / sum(weights) for w in weights]
    shares[-1] = 1.0 - sum(shares[:-1])
    wl["classes"] = [dict(name=f"c{i}", share=s, priority=draw(st.integers(0, 9))) for i, s in enumerate(shares) if s > 0]
    data["model"]["max_model_len"] = 8192
    kv = data["kv_cache"]
    kv.update(layout=draw(st.sampled_from(["paged", "contiguous"])), block_size=draw(st.sampled_from([1, 8, 16, 32, 256])),
              gpu_memory_utilization=draw(st.floats(0.5, 0.98)), kv_dtype=draw(st.sampled_from(["fp16", "bf16", "fp8", "int4"])),
              kv_compression=draw(st.floats(0.05, 1)), swap_space_gb=draw(st.floats(0, 64)), watermark=draw(st.floats(0, 0.5)))  # fmt: skip
    sc = data["scheduler"]
    seqs = draw(st.integers(1, 512))
    sc.update(batching=draw(st.sampled_from(["continuous", "static", "exclusive"])),
              prefill_mode=draw(st.sampled_from(["prefill_first", "decode_first", "time_slice", "quota"])),
              enable_chunked_prefill=draw(st.booleans()), mix_decodes=draw(st.booleans()),
              queue_order=draw(st.sampled_from(["fcfs", "priority", "shortest_prompt_first"])), max_num_seqs=seqs,
              max_num_batched_tokens=draw(st.integers(max(seqs, 4096), 16384)) if draw(st.booleans()) else draw(st.integers(seqs, 16384)),
              admission=draw(st.sampled_from(["watermark", "reserve", "greedy", "new_token_ratio"])),
              preemption=draw(st.sampled_from(["recompute", "swap"])),
              preemption_victim=draw(st.sampled_from(["last_admitted", "fewest_written", "latest_arrival"])),
              preemption_headroom_steps=draw(st.integers(1, 8)),
              preemption_requeue=draw(st.sampled_from(["by_key", "append"])),
              chunk_short_of_blocks=draw(st.sampled_from(["preempt", "shrink"])))  # fmt: skip
    if draw(st.integers(0, 3)) == 0:  # speculative decoding (one sample per request)
        wl["num_samples"] = 1
        sc["speculative"] = dict(enabled=True, num_draft_tokens=draw(st.integers(1, 8)), acceptance_rate=draw(st.floats(0, 1)),
                                 draft=draw(st.sampled_from(["head", "model"])), draft_cost_fraction=draw(st.floats(0, 0.5)))  # fmt: skip
    if draw(st.booleans()):
        kv.update(enable_prefix_caching=draw(st.booleans()), eviction_policy=draw(st.sampled_from(["lru", "lfu"])))
    sc["time_slice"] = dict(prefill_slice_ms=draw(st.floats(1, 200)), decode_slice_ms=draw(st.floats(1, 200)))
    sc["quota"] = dict(prefill_share=draw(st.floats(0.05, 0.95)), window_ms=draw(st.floats(10, 10000)),
                       max_prefill_ms=draw(st.floats(1, 1000)), decode_min_tokens_per_s=draw(st.floats(0, 1e5)))  # fmt: skip
    sc["dynamic_batch"] = dict(enabled=draw(st.booleans()), target_tick_ms=draw(st.floats(1, 500)))
    sc["smart_preemption"] = dict(enabled=draw(st.booleans()), threshold_ms=draw(st.floats(1, 500)),
                                  decode_queue_limit=draw(st.integers(0, 64)))  # fmt: skip
    data["calibration"].update(
        gemm_efficiency=draw(st.floats(0.01, 1)), attention_efficiency=draw(st.floats(0.01, 1)),
        memory_efficiency=draw(st.floats(0.01, 1)), tick_overhead_ms=draw(st.floats(0, 50)),
        per_seq_overhead_us=draw(st.floats(0, 100)), interconnect_efficiency=draw(st.floats(0.01, 1)),
        allreduce_latency_us=draw(st.floats(0, 200)), fp8_gemm_efficiency=draw(st.floats(0.01, 1)),
    )  # fmt: skip
    data["slo"] = dict(ttft_s=draw(st.floats(0.01, 60)), tpot_s=draw(st.floats(0.001, 1)))
    # (each limit drawn over its range or left far off: drawn always, five in six runs stopped at one)
    data["limits"] = dict(max_sim_time_s=draw(st.floats(0.01, 1e4) | st.just(3600.0)), max_ticks=draw(st.integers(1, 5000) | st.just(10**6)),
                          num_recorded_batches=draw(st.integers(0, 300)), coalesce_ticks=draw(st.booleans()))  # fmt: skip
    room = draw(st.none() | st.floats(1.0, 2.0))
    if room is None:
        return data
    # KV pressure where it happens (continuous batching over paged blocks, admission that lets the pool fill, a few
    # requests at once): pre-emption, swapping, back-pressure, which the knobs drawn over their whole range never reach
    sc.update(batching="continuous", admission=draw(st.sampled_from(["watermark", "greedy", "new_token_ratio"])))
    kv.update(layout="paged", watermark=min(kv["watermark"], 0.02))
    wl["num_requests"] = max(wl["num_requests"], 8)
    wl["arrival"]["rate_per_s"] = max(wl["arrival"]["rate_per_s"], 50.0)
    data["limits"]["max_ticks"] = min(data["limits"]["max_ticks"], 20_000)  # (pre-empted work is done again: bounded)
    return _with_kv_room(data, room)


def _with_kv_room(data: dict, room: float) -> dict:
    """`data` with the GPU memory that leaves KV room for about `room` of its longest requests (KV pressure: pre-emption,
    swapping, back-pressure; drawn over every knob's range a config reaches none, its KV room being hundreds of
    requests): the memory share that does, else (outside 5-100 %) the GPU memory at which a 90 % share does; `data`
    unchanged where it does not validate (the test's to refuse)."""
    from sim_core import config_from_dict
    from sim_core.costmodel import kv_bytes_per_token_per_gpu
    from tests.sim_core.test_equivalence import _utilisation_for_kv

    try:
        cfg = config_from_dict(data)
        wl = cfg.workload
        kv = room * (wl.max_prompt_tokens + wl.max_output_tokens) * kv_bytes_per_token_per_gpu(cfg) * wl.num_samples
        util = _utilisation_for_kv(cfg, kv)
        if not 0.05 <= util <= 1.0:  # the memory (GiB) at which 90 % leaves that room: the share falls as it grows
            lo, hi = 1.0, 4096.0
            for _ in range(40):
                mid = (lo + hi) / 2
                hw = cfg.hardware.model_copy(update={"memory_gib": mid})
                lo, hi = (mid, hi) if _utilisation_for_kv(cfg.model_copy(update={"hardware": hw}), kv) > 0.9 else (lo, mid)
            data["hardware"]["memory_gib"], util = hi, 0.9
    except Exception:  # noqa: BLE001
        return data
    data["kv_cache"]["gpu_memory_utilization"] = util
    return data


def _model(name: str) -> dict:
    from sim_core.presets import read_preset_data

    raw = read_preset_data("models", name)
    raw.pop("description", None)
    return raw


CLUSTER_PRESETS = [p for p in list_presets() if p.startswith("cluster-")]
# values a deployment knob takes at and past its bounds: counts, bandwidths, times (as a link carries them)
DEPLOYMENT_VALUES = {
    "deployment.replicas": st.sampled_from(["1", "2", "8", "64", "65", "0", "-1", "1e3", "nan"]),
    "deployment.router": st.sampled_from(["round_robin", "least_kv", "prefix_affinity", "cache_aware", "session", "weighted_score",
                                          "nope"]),
    "deployment.state_refresh_s": st.sampled_from(["0", "1e-6", "5e-324", "60", "1e300", "nan", "-0.0"]),
    "deployment.disaggregation.prefill.replicas": st.sampled_from(["1", "7", "63", "64", "0", "inf"]),
    "deployment.disaggregation.decode.replicas": st.sampled_from(["1", "9", "63", "64", "-3", "null"]),
    "deployment.disaggregation.prefill.tensor_parallel": st.sampled_from(["1", "3", "7", "64", "null", "0"]),
    "deployment.disaggregation.decode.hardware": st.sampled_from(['"l4"', '"a100-40gb"', '"nope"', "null", "{}"]),
    "deployment.disaggregation.link.bandwidth_gb_per_s": st.sampled_from(["0", "5e-324", "1e-310", "1e-6", "0.001",
                                                                          "100000", "Infinity", "NaN", "null", "-1"]),
    "deployment.disaggregation.link.latency_us": st.sampled_from(["0", "1000000", "1e300", "-1"]),
    "workload.num_requests": st.sampled_from(["1", "200", "5000", "200000", "0"]),
    "workload.arrival.rate_per_s": st.sampled_from(["1e-6", "100000", "0"]),
    "kv_cache.enable_prefix_caching": st.sampled_from(["true", "false"]),
}


@st.composite
def deployment_link_params(draw) -> dict[str, str]:
    """A link to a preset (mostly a cluster one) with 1-4 deployment knobs (and workload size) at and past their bounds:
    absurd replica counts and P:D ratios, links of zero, subnormal or infinite bandwidth, 200k requests."""
    params = {"preset": draw(st.sampled_from(CLUSTER_PRESETS + ["chat-h100-llama8b"]))}
    for key in draw(st.lists(st.sampled_from(sorted(DEPLOYMENT_VALUES)), min_size=1, max_size=4, unique=True)):
        params[key] = draw(DEPLOYMENT_VALUES[key])
    return params
