"""Sidebar widgets for every SimConfig knob. One spec table; help text comes from the config model.

Widgets are keyed `w.<dotted.path>`; `seed_widgets` writes a config into them (preset change, link,
upload) and `collect` reads them back into a config dict that `SimConfig` validates. The config
model stays the single source of limits: an invalid combination is reported, never clamped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.state import derived
from sim_core import PresetError, SimConfig, config_from_dict
from sim_core.config import field_bounds, field_info, tp_degrees_allowed
from sim_core.presets import list_presets, models_of_vocabulary, profile_values
from sim_core.unused import read_only_when, setting_is_read, value_at

COLLECT_KEY = "ui.collect_memo"  # (config, knob values, what `collect` made of them): see `collect`
# The knobs hidden in the last run, as the run does not read them (`_visible`). Streamlit keeps a hidden widget's last
# value, or its first one, and hands it back: swap space set to 12, hidden by pre-emption = recompute and shown again by
# swap read 4 (the preset's), and the run took 4. While hidden a knob keeps the config's value; shown again it shows it.
HIDDEN_KEY = "ui.hidden_knobs"
POW2_TOKENS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
# The batch cap's stops: every value to 16 (the article's 4-16, TensorRT-LLM's 8, the mechanism runs' 2-3), then about
# half an octave apart to vLLM's 1,024. A linear 1-1,024 slider put 1-16 in 3 px of a phone's 214-px track (a touch
# drag of 3 px jumped to 15); a value off these stops (a preset's, a link's) joins them as the token budget's does.
BATCH_CAPS = [*range(1, 17), 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]


@dataclass(frozen=True)
class Spec:
    path: str
    label: str
    kind: str  # slider | number | select | toggle | options (select_slider)
    # a slider's travel (within the config's limits, widened to hold a value outside it); a number box takes the
    # config's own limits (`field_bounds`), so they are written once, in the model
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    options: tuple = field(default_factory=tuple)
    fmt: str | None = None


def _lit(path: str) -> tuple:
    return tuple(field_info(tuple(path.split("."))).annotation.__args__)


def _bounds(path: str) -> tuple:
    return field_bounds(tuple(path.split(".")))


SECTIONS: dict[str, list[Spec]] = {
    "Hardware": [
        Spec("hardware.peak_tflops", "Peak compute (dense BF16 TFLOP/s per GPU)", "slider", 10.0, 5000.0, 10.0),
        Spec("hardware.hbm_bandwidth_gb_per_s", "HBM bandwidth (GB/s per GPU)", "slider", 100.0, 10000.0, 50.0),
        Spec("hardware.memory_gib", "Memory (GiB per GPU)", "slider", 8.0, 320.0, 1.0),
        Spec("hardware.num_gpus", "GPUs (tensor-parallel degree)", "options", options=(1, 2, 4, 8)),
        Spec("hardware.interconnect", "GPU link type", "select", options=_lit("hardware.interconnect")),
        Spec("hardware.interconnect_gb_per_s", "GPU link (GB/s, one direction)", "number", step=10.0),
        Spec("hardware.pcie_gb_per_s", "PCIe to host (GB/s, one direction)", "number", step=1.0),
    ],
    "Model": [
        Spec("model.weight_dtype", "Weight precision", "select", options=_lit("model.weight_dtype")),
        Spec("model.num_layers", "Layers", "number", step=1),
        Spec("model.hidden_size", "Hidden size", "number", step=64),
        Spec("model.num_heads", "Query heads", "number", step=1),
        Spec("model.num_kv_heads", "KV heads", "number", step=1),
        Spec("model.head_dim", "Head dimension", "number", step=8),
        Spec("model.ffn_size", "MLP size (per expert)", "number", step=64),
        Spec("model.vocab_size", "Vocabulary", "number", step=256),
        Spec("model.num_experts", "Experts (1 = dense)", "number", step=1),
        Spec("model.num_experts_per_token", "Experts per token (top-k)", "number", step=1),
        Spec("model.max_model_len", "Max sequence length (tokens)", "number", step=1024),
    ],
    "Workload": [
        Spec("workload.num_requests", "Requests", "number", step=50),
        Spec("workload.arrival.process", "Arrival process", "select", options=_lit("workload.arrival.process")),
        Spec("workload.arrival.rate_per_s", "Arrival rate (requests/s)", "slider", 0.1, 200.0, 0.1),
        Spec("workload.arrival.burstiness_cv", "Burstiness (CV of gaps)", "slider", 0.1, 10.0, 0.1),
        Spec("workload.arrival.num_clients", "Concurrent clients", "number", step=1),
        Spec("workload.arrival.think_time_s", "Think time (s)", "number", step=0.5),
        Spec("workload.prompt_tokens.dist", "Prompt length distribution", "select", options=_lit("workload.prompt_tokens.dist")),
        Spec("workload.prompt_tokens.mean", "Prompt mean (tokens)", "number", step=16),
        Spec("workload.prompt_tokens.min", "Prompt min (tokens)", "number", step=1),
        Spec("workload.prompt_tokens.max", "Prompt max (tokens)", "number", step=64),
        Spec("workload.prompt_tokens.sigma", "Prompt log-sigma", "number", step=0.1),
        Spec("workload.output_tokens.dist", "Output length distribution", "select", options=_lit("workload.output_tokens.dist")),
        Spec("workload.output_tokens.mean", "Output mean (tokens)", "number", step=16),
        Spec("workload.output_tokens.min", "Output min (tokens)", "number", step=1),
        Spec("workload.output_tokens.max", "Output max (tokens)", "number", step=64),
        Spec("workload.output_tokens.sigma", "Output log-sigma", "number", step=0.1),
        Spec("workload.num_samples", "Parallel samples / beam width n", "number", step=1),
        Spec("workload.shared_prefix.num_system_prompts", "Shared system prompts in the pool", "number", step=1),
        Spec("workload.shared_prefix.share_ratio", "Share of requests starting with one", "slider", 0.0, 1.0, 0.05),
        Spec("workload.shared_prefix.system_prompt_tokens.mean", "System prompt length (tokens)", "number", step=64),
        Spec("workload.sessions.turns", "Turns per conversation (1 = independent requests)", "number", step=1),
        Spec("workload.sessions.user_tokens.mean", "New user tokens per later turn (mean)", "number", step=16),
        Spec("workload.sessions.think_time_s", "Think time before the next turn (s, mean)", "number", step=1.0),
        Spec("workload.sessions.closed_loop", "Next turn waits for the reply (closed loop)", "toggle"),
    ],
    "Scheduler": [
        Spec("scheduler.batching", "Batching", "select", options=_lit("scheduler.batching")),
        Spec("scheduler.prefill_mode", "Prefill mode", "select", options=_lit("scheduler.prefill_mode")),
        Spec("scheduler.enable_chunked_prefill", "Chunked prefill", "toggle"),
        Spec("scheduler.mix_decodes", "Decodes join prefill ticks (mixed)", "toggle"),
        Spec("scheduler.queue_order", "Queue order", "select", options=_lit("scheduler.queue_order")),
        Spec("scheduler.max_num_seqs", "Max batch size (max_num_seqs)", "options", options=tuple(BATCH_CAPS)),
        Spec("scheduler.max_num_batched_tokens", "Token budget / chunk size (tokens per tick)", "options", options=tuple(POW2_TOKENS)),
        Spec("scheduler.admission", "Admission", "select", options=_lit("scheduler.admission")),
        Spec("scheduler.new_token_ratio.init_new_token_ratio", "New-token ratio at start / after idle", "slider", 0.01, 1.0, 0.01),
        Spec("scheduler.new_token_ratio.min_new_token_ratio_factor", "Ratio floor (fraction of the start)", "slider", 0.0, 1.0, 0.01),
        Spec("scheduler.new_token_ratio.decay_steps", "Decode steps from start to floor", "number", step=50),
        Spec("scheduler.preemption", "Pre-emption", "select", options=_lit("scheduler.preemption")),
        Spec("scheduler.preemption_victim", "Pre-emption victim (vLLM / SGLang / TensorRT-LLM rule)", "select",
             options=_lit("scheduler.preemption_victim")),
        Spec("scheduler.preemption_headroom_steps", "Pre-empt until the decodes left have room for (decode steps)", "number",
             step=1),
        Spec("scheduler.preemption_requeue", "Where a pre-empted request waits (vLLM: by its key; SGLang: appended)", "select",
             options=_lit("scheduler.preemption_requeue")),
        Spec("scheduler.chunk_short_of_blocks", "Prefill chunk short of KV blocks", "select",
             options=_lit("scheduler.chunk_short_of_blocks")),
        Spec("scheduler.time_slice.prefill_slice_ms", "Prefill slice (ms)", "slider", 1.0, 200.0, 1.0),
        Spec("scheduler.time_slice.decode_slice_ms", "Decode slice (ms)", "slider", 1.0, 200.0, 1.0),
        Spec("scheduler.quota.prefill_share", "Prefill share of GPU time", "slider", 0.05, 0.95, 0.05),
        Spec("scheduler.quota.window_ms", "Quota window (ms)", "number", step=100.0),
        Spec("scheduler.quota.max_prefill_ms", "Max prefill run (ms)", "number", step=10.0),
        Spec("scheduler.quota.decode_min_tokens_per_s", "Decode floor (tokens/s)", "number", step=10.0),
        Spec("scheduler.dynamic_batch.enabled", "Dynamic batch size (article §5.2)", "toggle"),
        Spec("scheduler.dynamic_batch.target_tick_ms", "Tick latency target (ms)", "number", step=5.0),
        Spec("scheduler.smart_preemption.enabled", "Smart pre-emption (article §5.3)", "toggle"),
        Spec("scheduler.smart_preemption.threshold_ms", "Suspend prefill after (ms)", "number", step=5.0),
        Spec("scheduler.smart_preemption.decode_queue_limit", "…while decodes waiting exceed", "number", step=1),
        Spec("scheduler.speculative.enabled", "Speculative decoding", "toggle"),
        Spec("scheduler.speculative.num_draft_tokens", "Draft tokens per step (k)", "number", step=1),
        Spec("scheduler.speculative.acceptance_rate", "Acceptance per draft token", "slider", 0.0, 1.0, 0.05),
        Spec("scheduler.speculative.draft", "Draft", "select", options=_lit("scheduler.speculative.draft")),
        Spec("scheduler.speculative.draft_cost_fraction", "Draft head cost (fraction of a target step)", "slider", 0.0, 2.0, 0.01),
        Spec("scheduler.speculative.draft_model", "Draft model (its weights and KV share the GPUs)", "select",
             options=list_presets("models")),
    ],
    "KV cache & memory": [
        Spec("kv_cache.layout", "KV layout", "select", options=_lit("kv_cache.layout")),
        Spec("kv_cache.block_size", "Block size (tokens)", "options", options=(1, 8, 16, 32, 64, 128, 256)),
        Spec("kv_cache.gpu_memory_utilization", "GPU memory utilisation", "slider", 0.05, 1.0, 0.01),
        Spec("kv_cache.memory_rule", "KV pool rule (engine)", "select", options=_lit("kv_cache.memory_rule")),
        Spec("kv_cache.kv_dtype", "KV precision", "select", options=_lit("kv_cache.kv_dtype")),
        Spec("kv_cache.kv_compression", "KV compression (fraction kept)", "slider", 0.05, 1.0, 0.05),
        Spec("kv_cache.swap_space_gb", "Host swap space per GPU (GiB)", "number", step=1.0),
        Spec("kv_cache.watermark", "Admission watermark (fraction of blocks)", "slider", 0.0, 0.5, 0.01),
        Spec("kv_cache.enable_prefix_caching", "Prefix caching (reuse cached prompt blocks)", "toggle"),
        Spec("kv_cache.eviction_policy", "Prefix-cache eviction (which cached block goes first)", "select",
             options=_lit("kv_cache.eviction_policy")),
    ],
    "Calibration": [
        Spec("calibration.profile", "Calibration profile (engine family)", "select",
             options=("default", *list_presets("calibration"))),
        Spec("calibration.gemm_efficiency", "GEMM efficiency", "slider", 0.05, 1.0, 0.01),
        Spec("calibration.fp8_gemm_efficiency", "FP8 GEMM efficiency", "slider", 0.05, 1.0, 0.01),
        Spec("calibration.attention_efficiency", "Attention efficiency", "slider", 0.05, 1.0, 0.01),
        Spec("calibration.memory_efficiency", "HBM efficiency", "slider", 0.05, 1.0, 0.01),
        Spec("calibration.layer_fixed_us", "Fixed GPU time per layer (µs)", "number", step=1.0),
        Spec("calibration.tick_overhead_ms", "Overhead per tick (ms)", "number", step=0.1),
        Spec("calibration.per_seq_overhead_us", "Overhead per sequence (µs)", "number", step=1.0),
        Spec("calibration.interconnect_efficiency", "Link efficiency", "slider", 0.05, 1.0, 0.01),
        Spec("calibration.allreduce_latency_us", "All-reduce latency (µs)", "number", step=1.0),
    ],
    "Objectives & run": [
        Spec("slo.ttft_s", "TTFT objective (s)", "number", step=0.1),
        Spec("slo.tpot_s", "TPOT objective (s)", "number", step=0.005, fmt="%.3f"),
        Spec("seed", "Random seed", "number", step=1),
        Spec("limits.max_sim_time_s", "Stop after simulated time (s)", "number", step=60.0),
        Spec("limits.max_ticks", "Stop after ticks", "number", step=10_000),
    ],
}
ALL_SPECS = [s for specs in SECTIONS.values() for s in specs]


def widget_key(path: str) -> str:
    return "w." + path


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parts, last = path.split(".")
    for part in parts:
        data = data[part]
    data[last] = value


def config_value(cfg: SimConfig, path: str) -> Any:
    """The value of one knob, read from the config itself: a whole `model_dump` for it copied an uploaded trace's
    4 million ids once per open section on every rerun."""
    value: Any = cfg
    for part in path.split("."):
        value = getattr(value, part)
    return value


def seed_widgets(cfg: SimConfig) -> None:
    """Write a config's values into the widget state (before the widgets are drawn)."""
    for spec in ALL_SPECS:
        st.session_state[widget_key(spec.path)] = config_value(cfg, spec.path)
    from app.components import deployment_form  # the optional deployment section (issue 13)

    deployment_form.seed(cfg)


def _help(path: str) -> str:
    info = field_info(tuple(path.split(".")))
    return info.description if info is not None else ""


def _draw(spec: Spec, cfg: SimConfig) -> None:
    key, label, help_ = widget_key(spec.path), spec.label, _help(spec.path)
    value = st.session_state.get(key)
    if spec.kind == "toggle":
        st.toggle(label, key=key, help=help_)
    elif spec.kind == "select" and spec.path == PROFILE_PATH:
        opts = tuple(spec.options) + ((value,) if value not in spec.options else ())  # an edited/unknown name stays
        st.selectbox(label, opts, key=key, help=help_, on_change=_load_profile)
    elif spec.kind == "select" and spec.path == DRAFT_MODEL_PATH:
        st.selectbox(label, draft_model_options(value, cfg), key=key, help=help_)
    elif spec.kind == "select":
        st.selectbox(label, spec.options, key=key, help=help_)
    elif spec.kind == "options" and spec.path == GPUS_PATH:
        st.select_slider(label, options=tp_options(spec.options, value, cfg), key=key, help=help_)
    elif spec.kind == "options":
        opts = sorted(set(spec.options) | ({value} if value is not None else set()))
        st.select_slider(label, options=opts, key=key, help=help_)
    else:
        is_int = isinstance(spec.step, int) and not isinstance(spec.step, bool)
        cast = int if is_int else float
        lo, hi = (spec.lo, spec.hi) if spec.kind == "slider" else _bounds(spec.path)
        lo, hi = (None if b is None else cast(b) for b in (lo, hi))  # (a number box without a declared limit: none)
        if value is not None and lo is not None and value < lo:  # a preset outside a slider's travel widens it
            lo = cast(value)
        if value is not None and hi is not None and value > hi:
            hi = cast(value)
        if value is not None:
            st.session_state[key] = cast(value)
        widget = st.slider if spec.kind == "slider" else st.number_input
        kwargs = {"format": spec.fmt} if spec.fmt and widget is st.number_input else {}
        if widget is st.slider and not is_int and value is not None and 0 < abs(value) < 0.01:
            # (a link's 0.001 GB/s widened the travel to hold it and showed "0.00": significant digits, not two decimals)
            kwargs["format"] = "%.3g"
        elif (widget is st.slider and not is_int and value is not None and float(value).is_integer()
              and float(spec.step).is_integer()):  # fmt: skip
            # (a whole value on a whole step: "1675.00" GB/s beside a lesson banner's "1,675"; a datasheet's 989.4
            # TFLOP/s keeps its decimals)
            kwargs["format"] = "%.0f"
        widget(label, min_value=lo, max_value=hi, step=cast(spec.step), key=key, help=help_, **kwargs)


PROFILE_PATH = "calibration.profile"
GPUS_PATH = "hardware.num_gpus"


DRAFT_MODEL_PATH = "scheduler.speculative.draft_model"


def draft_model_options(current: str | None, cfg: SimConfig) -> list[str]:
    """The model presets that can draft for this config's model: those of its vocabulary, the config's own rule
    (`SimConfig._check_draft_vocabulary`; Llama-2-7B was offered to Llama-3.1-8B). One the model change left behind
    stays listed, so the message that names it is beside the knob and nothing is lost."""
    same = list(models_of_vocabulary(cfg.model.vocab_size))
    return same + ([current] if current is not None and current not in same else [])


def tp_options(base: tuple[int, ...], current: int | None, cfg: SimConfig) -> list[int]:
    """The TP degrees a GPU-count control offers: those of `base` that the model splits its heads evenly over
    (tp_degrees_allowed: TP 8 of Qwen2.5-7B's 28 heads is not offered), the model as the Model knobs say (`cfg`'s
    while they are closed), and the current value, kept when it is not one of them (a model edited under it):
    validation then names it and the degrees there are."""
    s = st.session_state
    heads = s.get(widget_key("model.num_heads"), cfg.model.num_heads)
    kv = s.get(widget_key("model.num_kv_heads"), cfg.model.num_kv_heads)
    ok = tp_degrees_allowed(heads, kv) if isinstance(heads, int) and isinstance(kv, int) and heads >= 1 and kv >= 1 else base
    return sorted({t for t in base if t in ok} | ({int(current)} if current is not None else set()))


def _load_profile() -> None:
    """Selecting a profile writes its values into the calibration widgets (the user may edit them after)."""
    name = st.session_state.get(widget_key(PROFILE_PATH))
    if name == "default" or name in list_presets("calibration"):
        for field_name, value in profile_values(name).items():
            st.session_state[widget_key(f"calibration.{field_name}")] = value


def _visible(spec: Spec, cfg: SimConfig) -> bool:
    """Whether the setting is read under the form's current choices (`sim_core.unused.READ_ONLY_WHEN`, the rule the
    CLI and links are told by). A disaggregated pool with its own scheduler may read what the top-level one does not
    (DistServe's decode pool swaps): the config's own answer then keeps the control."""
    if all(st.session_state.get(widget_key(path), value_at(cfg, path)) in values for path, values in read_only_when(spec.path)):
        return True
    # (the pools' answer once per config object: each validates both pools' configs, ~10 ms a rerun for the 28 knobs)
    return cfg.deployment is not None and cfg.deployment.disaggregation is not None and derived(
        cfg, ("read", spec.path), lambda c: setting_is_read(c, spec.path))


def draw_section(name: str, cfg: SimConfig, slots: dict[str, Any] | None = None) -> None:
    """Draw a section's widgets; `slots` receives an empty placeholder under each (for its error)."""
    hidden: set[str] = st.session_state.setdefault(HIDDEN_KEY, set())
    for spec in SECTIONS[name]:
        key = widget_key(spec.path)
        if key not in st.session_state:  # Streamlit drops the state of widgets that were hidden
            st.session_state[key] = config_value(cfg, spec.path)
        if not _visible(spec, cfg):
            hidden.add(spec.path)
            continue
        if spec.path in hidden:  # shown again: the config's value, which it kept while hidden (not the widget's)
            st.session_state[key] = config_value(cfg, spec.path)
            hidden.discard(spec.path)
        _draw(spec, cfg)
        if slots is not None:
            slots[spec.path] = st.empty()


GROUP_LABELS = {"workload.prompt_tokens": "Prompt length", "workload.output_tokens": "Output length",
                "workload.classes": "Request classes", "workload.arrival": "Arrivals"}  # fmt: skip


def _short(label: str) -> str:
    return label.split(" (")[0]


def _leaf_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for spec in ALL_SPECS:
        leaf = spec.path.rsplit(".", 1)[-1]
        counts[leaf] = counts.get(leaf, 0) + 1
    return counts


def error_fields(message: str) -> list[str]:
    """The knobs (spec paths) a validation message is about: named by full path, by their group
    and own name ("workload.prompt_tokens ... max"), or by a name no other knob has."""
    import re

    counts = _leaf_counts()
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message))
    out = []
    for spec in ALL_SPECS:
        parent, leaf = spec.path.rsplit(".", 1) if "." in spec.path else ("", spec.path)
        if (re.search(rf"(?<![\w.]){re.escape(spec.path)}(?![\w])", message)
                or (parent and parent + " " in message + " " and leaf in words)
                or (counts[leaf] == 1 and leaf in words and len(leaf) > 4)):  # fmt: skip
            out.append(spec.path)
    for group in GROUP_LABELS:
        if group in message and not any(p.startswith(group + ".") for p in out):
            out.append(group)
    return out


def friendly_error(message: str) -> str:
    """The message in the widgets' words: config paths become the labels the sidebar shows."""
    import re

    text = message.replace("Invalid settings:", "").strip()
    text = re.sub(r"^\(config\):\s*", "", text, flags=re.M)
    text = re.sub(r" = (dict|tuple|list):", ":", text).replace(">=", "≥").replace("<=", "≤")
    counts = _leaf_counts()
    # (a class's field by its row as the editor shows it, counted from 1: "workload.classes.1.share" read
    # "“Request classes”.1.share" beside an editor whose index is hidden, a review)
    text = re.sub(r"\bworkload\.classes\.(\d+)\.(\w+)",
                  lambda m: f"workload.classes (row {int(m.group(1)) + 1}, {m.group(2)})", text)
    text = _name_paths(text, _error_names())
    for group, label in GROUP_LABELS.items():
        text = text.replace(group, f"“{label}”")
    for spec in ALL_SPECS:
        leaf = spec.path.rsplit(".", 1)[-1]
        if counts[leaf] == 1 and len(leaf) > 4:
            text = re.sub(rf"(?<![\w.“]){re.escape(leaf)}(?![\w])", f"“{_short(spec.label)}”", text)
    return text


def sidebar_words(text: str) -> str:
    """A message of the engine's (a run's notes, an out-of-memory refusal) in the sidebar's words: each setting it
    names by config path is named by its control's label and section, as a student finds it ("hardware.memory_gib =
    22.49 GiB" reads "“Memory” (Hardware) = 22.49 GiB"; the CLI prints the paths, which `--set` takes)."""
    return _name_paths(text, _sidebar_names())


def _name_paths(text: str, names: tuple) -> str:
    """`text` with each config path of `names` ((pattern, {path: words})) written as its words, in one pass."""
    pattern, words = names
    return pattern.sub(lambda m: words[m.group()], text)


def _path_names(words: dict[str, str]) -> tuple:
    """(one pattern of the paths, longest first so a path is never read as its prefix, {path: words})."""
    import re

    paths = sorted(words, key=len, reverse=True)
    return re.compile(rf"(?<![\w.])(?:{'|'.join(map(re.escape, paths))})(?![\w])"), words


@functools.cache
def _error_names() -> tuple:
    """friendly_error's: every control's path as its label."""
    return _path_names({spec.path: f"“{_short(spec.label)}”" for spec in ALL_SPECS})


@functools.cache
def _sidebar_names() -> tuple:
    """sidebar_words': dotted paths (a top-level one, "seed", is also a word of prose) and the deployment form's, as
    label and section. (Built once: the notes pass through it on every rerun.)"""
    from app.components import deployment_form  # (it imports this module)

    words = {spec.path: f"“{_short(spec.label)}” ({section})" for section, specs in SECTIONS.items() for spec in specs
             if "." in spec.path}  # fmt: skip
    words |= {path: f"“{_short(label)}” ({deployment_form.SECTION})" for path, label in deployment_form.LABELS.items()}
    return _path_names(words)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types throughout (1.0 is not the int 1 to a strict config)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _own_values(cfg: SimConfig, values: dict[str, Any]) -> bool:
    """Whether every value is the config's own (as `seed_widgets` writes them): they then describe the config itself. A
    deployment's editor value is not its config's dump: it is validated with the rest of the config less its trace."""
    for path, value in values.items():
        if path == "workload.classes":
            own: Any = [c.model_dump() for c in cfg.workload.classes]
        elif path == "deployment":
            if (value is None) != (cfg.deployment is None):
                return False
            continue
        else:
            own = config_value(cfg, path)
        if not _same(value, own):
            return False
    value = values.get("deployment")
    if value is None:
        return True
    # (the deployment is checked against every other section; the trace is only rows of the workload, not dumped)
    data = cfg.model_dump(mode="python", exclude={"workload": {"trace"}})
    data["deployment"] = value
    try:
        return config_from_dict(data, "settings").deployment == cfg.deployment
    except PresetError:
        return False


def collect(base: SimConfig, extra: dict[str, Any] | None = None) -> tuple[SimConfig | None, str | None]:
    """The config the widgets describe (hidden knobs keep their values), or the validation message.
    `extra` holds values of editors that are not simple widgets (e.g. the request classes table)."""
    hidden = st.session_state.get(HIDDEN_KEY, set())  # (a hidden knob keeps the config's value: `HIDDEN_KEY`)
    values = {spec.path: st.session_state[widget_key(spec.path)] for spec in ALL_SPECS
              if widget_key(spec.path) in st.session_state and spec.path not in hidden}  # fmt: skip
    values |= extra or {}
    # The same config and the same values give the same answer: kept for the session, so a rerun that changed no knob
    # does not validate the whole config again (an uploaded trace's took about a second each time).
    memo = st.session_state.get(COLLECT_KEY)
    if memo is not None and memo[0] is base and memo[1] == values:
        return memo[2]
    if _own_values(base, values):  # (the widgets as a new config seeded them: validating a large upload again took ~1 s)
        st.session_state[COLLECT_KEY] = (base, values, (base, None))
        return base, None
    data = base.model_dump(mode="python")
    for path, value in values.items():
        set_path(data, path, value)
    try:
        new = config_from_dict(data, "settings")
    except PresetError as err:
        out: tuple[SimConfig | None, str | None] = (None, str(err))
        st.session_state[COLLECT_KEY] = (base, values, out)
        return out
    # The answer is this config when no knob changed it (returned as `base` itself, so the page's comparison finds the
    # same object at once), and the new config is what these values give again once it is the session's config.
    new = base if new == base else new
    st.session_state[COLLECT_KEY] = (new, values, (new, None))
    return new, None
