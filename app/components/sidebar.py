"""The Simulate page's sidebar: preset picker first, then one expander per config section."""

from __future__ import annotations

import streamlit as st

from app.components import config_form as form
from app.components import runner, uploads
from app.components.text import first_statement, lead_and_rest, plain
from app.state import BASE_KEY, CFG_KEY, PRESENTER_KEY, PRESET_KEY, derived, remember
from sim_core import PresetError, SimConfig, config_from_dict, list_presets, load_preset
from sim_core.presets import MAX_CONFIG_FILE_BYTES, apply_part, describe_preset, engine_label
from sim_core.traces import FORMAT_HELP, MAX_TRACE_CSV_BYTES, TRACE_FORMATS, TraceOptions
from sim_core.words import counted

PRESET_WIDGET = "w.preset"
VERSION_KEY = "ui.cfg_version"
PART_FAMILIES = {"Hardware": "hardware", "Model": "models", "Workload": "workloads", "Scheduler": "engines"}


def _set_config(cfg: SimConfig, preset: str | None) -> None:
    runner.hold_config(cfg)
    st.session_state[CFG_KEY] = cfg
    st.session_state[PRESET_KEY] = preset
    if preset:
        st.session_state[BASE_KEY] = preset
    form.seed_widgets(cfg)
    # editors keyed by this version start again from the new config
    st.session_state[VERSION_KEY] = st.session_state.get(VERSION_KEY, 0) + 1


def _on_preset() -> None:
    name = st.session_state[PRESET_WIDGET]
    if name:
        _set_config(load_preset(name), name)


def _on_part(family: str) -> None:
    key = f"w.part.{family}"
    name = st.session_state.get(key)
    if name:
        try:
            _set_config(apply_part(st.session_state[CFG_KEY], family, name), None)
        except PresetError as err:
            st.session_state["ui.part_error"] = str(err)
        st.session_state[key] = None


def _upload_bytes(up, limit: int) -> bytes:
    if up.size > limit:
        raise PresetError(f"{up.name} is {up.size:,} bytes; the limit is {limit:,}")
    return up.getvalue()


UPLOAD_NOTICE_KEY = "ui.upload_notice"  # (which upload, its message): said once at the top of the page too


def _refuse_upload(error_key: str, message: str) -> None:
    """An upload not used: its message under the uploader (until the next upload there) and, once, at the top of the
    page (`upload_notice`): only the sidebar said it, out of sight on a phone and beside the previous run's figures."""
    st.session_state[error_key] = message
    st.session_state[UPLOAD_NOTICE_KEY] = ("trace" if error_key == "ui.trace_error" else "config", message)


def upload_notice() -> tuple[str, str] | None:
    """The upload refused since the page last drew (kind, message), once; None otherwise."""
    return st.session_state.pop(UPLOAD_NOTICE_KEY, None)


def _apply_upload(checked: uploads.CheckedUpload | str, error_key: str) -> None:
    """The session's config from a checked upload (its derived values kept with it: computed where it was checked), or
    the check's message under the uploader; the config is left as it was then."""
    if isinstance(checked, str):
        _refuse_upload(error_key, checked)
        return
    refused = runner.admit_upload(checked.cfg)  # (the sessions' uploaded traces, server-wide, under [uploads] max_bytes)
    if refused is not None:
        _refuse_upload(error_key, refused)
        return
    _set_config(checked.cfg, None)
    for name, value in checked.derived.items():
        remember(checked.cfg, name, value)
    st.session_state[error_key] = None


def _on_config_upload() -> None:
    up = st.session_state.get("w.upload_config")
    if up is None:  # the file removed: its refusal goes with it (it stayed under the empty uploader, a review)
        st.session_state["ui.upload_error"] = None
        return
    try:
        raw = _upload_bytes(up, MAX_CONFIG_FILE_BYTES)
    except PresetError as err:
        _refuse_upload("ui.upload_error", str(err))
        return
    # parsed and validated in a worker (seconds for a large trace, which every other session's page waited for)
    _apply_upload(runner.check_upload(uploads.check_config, raw, up.name, st.session_state.get(BASE_KEY)), "ui.upload_error")


def _on_trace_upload() -> None:
    up = st.session_state.get("w.upload_trace")
    if up is None:  # (as a config's)
        st.session_state["ui.trace_error"] = None
        return
    try:
        max_req = st.session_state.get("w.trace_max_requests") or None
        cfg: SimConfig = st.session_state[CFG_KEY]
        # the sample is seeded by the config's seed, as `run --trace` seeds it (it was seed 0 whatever the config's)
        opts = TraceOptions(format=st.session_state.get("w.trace_format", "auto"), seed=cfg.seed,
                            time_scale=st.session_state.get("w.trace_time_scale", 1.0), max_requests=max_req)  # fmt: skip
        raw = _upload_bytes(up, MAX_TRACE_CSV_BYTES)
    except ValueError as err:  # PresetError is a ValueError
        _refuse_upload("ui.trace_error", str(err))
        return
    checked = runner.check_upload(uploads.check_trace, raw, up.name, opts, cfg, st.session_state.get(BASE_KEY))
    if not isinstance(checked, str):
        st.session_state["ui.trace_note"] = checked.note
    _apply_upload(checked, "ui.trace_error")


def _clear_trace() -> None:
    cfg: SimConfig = st.session_state[CFG_KEY]
    data = cfg.model_dump(mode="python")
    data["workload"]["trace"] = None
    data["workload"]["num_requests"] = min(data["workload"]["num_requests"], 1000)
    _set_config(config_from_dict(data), None)


def scheduler_label(cfg: SimConfig) -> str:
    """The engine's name while the scheduler is that engine preset's, else 'custom (from <name>)' (`presets.engine_label`,
    the CLI's rule too); once per config object (`derived`: it validates the whole config with the preset's scheduler,
    an uploaded trace's for a second)."""
    return derived(cfg, "scheduler_label", engine_label)


def describe_where(cfg: SimConfig) -> str:
    """The GPUs a config runs on: "1× H100 SXM", or a deployment's replicas / disaggregated pools (issue 13)."""
    if cfg.deployment is not None:
        from sim_core.cluster.report import describe_deployment

        return describe_deployment(cfg)
    return f"{cfg.hardware.num_gpus}× {cfg.hardware.name}"


def describe_config(cfg: SimConfig) -> str:
    """One line naming what runs, with names that stay true after edits."""
    s = cfg.scheduler
    where = describe_where(cfg)
    return (f"{cfg.model.name} on {where} · scheduler {scheduler_label(cfg)} ({s.prefill_mode}, "
            f"{s.batching}) · workload {cfg.workload.name}, {counted(cfg.workload.num_requests, 'request')}, seed {cfg.seed}")


def draw_sidebar() -> tuple[SimConfig | None, str | None]:
    """Draw every control; return (config the controls describe, or None with the error in the
    widgets' words). The error is also shown under the knob(s) it is about."""
    cfg: SimConfig = st.session_state[CFG_KEY]
    sb = st.sidebar
    presets = list_presets()
    current = st.session_state.get(PRESET_KEY)
    if PRESET_WIDGET not in st.session_state or st.session_state[PRESET_WIDGET] != current:
        st.session_state[PRESET_WIDGET] = current
    base = st.session_state.get(BASE_KEY)
    sb.selectbox("Scenario preset", presets, key=PRESET_WIDGET, on_change=_on_preset, index=None,
                 placeholder=f"{base} (modified)" if base else "custom — pick a preset",
                 help="Load a complete scenario: hardware, model, workload and scheduler. Changing any knob below "
                      "makes it a modified copy.")  # fmt: skip
    if current:
        # (its whole name first: the box cuts a long one, "cluster-dynamo-llama70b-fp…", where the end, -3p1d or
        # -colocated, is what tells a pair apart; a review)
        lead, rest = lead_and_rest(describe_preset("scenarios", current))
        sb.caption(plain(f"{current}: {lead}"))
        if rest:  # (sources and details: the DistServe pair's 1,700 characters filled the sidebar)
            with sb.expander("More about this preset"):
                st.caption(plain(rest))
    with sb.expander("Upload a config (JSON)"):
        st.file_uploader("Config JSON", type=["json"], key="w.upload_config", on_change=_on_config_upload,
                         help=f"A config downloaded from this app or written by `python -m sim_core run --out`. Max {MAX_CONFIG_FILE_BYTES // 2**20} MB.")  # fmt: skip
        if st.session_state.get("ui.upload_error"):
            st.error(plain(st.session_state["ui.upload_error"]))
    if st.session_state.get("ui.part_error"):
        sb.error(plain(st.session_state.pop("ui.part_error")))
    from app.components import deployment_form  # replicas / disaggregation (issue 13)

    # First, above the engine's sections: how many replicas and which router is the deployment's first choice (at the
    # foot, lesson 14's Router sat below ~4,000 px of open Hardware and Scheduler knobs); one closed line otherwise.
    # Keyed by the config's version (a preset, part, link or upload): it opens on a config with a deployment, and stays as
    # the user left it while they edit (unkeyed, its identity changed with `expanded` when the first edit gave the config
    # a deployment, and it folded shut under the Replicas box just chosen, a review)
    with sb.expander(f"{deployment_form.SECTION} (replicas, disaggregation)", expanded=cfg.deployment is not None,
                     key=f"ui.section.{deployment_form.SECTION}.{st.session_state.get(VERSION_KEY, 0)}"):
        deployment = deployment_form.draw(cfg)
    classes = [c.model_dump() for c in cfg.workload.classes]
    slots: dict = {}
    for section in form.SECTIONS:
        # Lazy sections: a closed one draws nothing (its knobs keep the config's values), so a first
        # page load sends and renders only the open ones.
        exp = sb.expander(section, expanded=section in ("Hardware", "Scheduler"), key=f"ui.section.{section}", on_change="rerun")
        if not exp.open:
            continue
        with exp:
            family = PART_FAMILIES.get(section)
            if family:
                noun = family.rstrip("s")
                st.selectbox(f"Load {'an' if noun[0] in 'aeiou' else 'a'} {noun} preset", list_presets(family), index=None,
                             key=f"w.part.{family}", on_change=_on_part, args=(family,), placeholder="choose…")  # fmt: skip
            if section == "Hardware" and cfg.hardware.source:
                # (the datasheet's figures; where they were copied and what was fitted, file paths, are the About page's)
                figures, rest = first_statement(cfg.hardware.source)
                st.caption(plain(f"{cfg.hardware.name} numbers: {figures}") + (" Sources and fitted factors: the About "
                                                                                 "page." if rest else ""))  # fmt: skip
            if section == "Workload":
                _trace_controls(cfg)
            form.draw_section(section, cfg, slots)
            if section == "Workload":
                classes = _classes_editor(cfg)
                slots["workload.classes"] = st.empty()
    sb.toggle("Presenter mode (large type, one chart)", key=PRESENTER_KEY)
    new_cfg, raw = form.collect(cfg, {"workload.classes": classes, "deployment": deployment})
    if raw is None:
        return new_cfg, None
    error = form.friendly_error(raw)
    for path in form.error_fields(raw):
        if path in slots:  # next to the knob; the page repeats it at the top
            slots[path].error(plain(error), icon=":material/error:")  # (it may quote a link's or file's text)
    return None, error


def _classes_editor(cfg: SimConfig) -> list[dict]:
    """Request classes (article §5.2): name, share of requests, priority (0 = served first)."""
    rows = [c.model_dump() for c in cfg.workload.classes]
    edited = st.data_editor(
        rows, num_rows="dynamic", key=f"w.classes.{st.session_state.get(VERSION_KEY, 0)}", hide_index=True,
        column_config={
            "name": st.column_config.TextColumn("class", required=True, max_chars=40),
            "share": st.column_config.NumberColumn("share", min_value=0.0, max_value=1.0, step=0.05, required=True,
                                                   help="Fraction of requests; shares must sum to 1."),
            "priority": st.column_config.NumberColumn("priority", min_value=0, max_value=9, step=1, required=True,
                                                      help="0 is served first when the queue order is 'priority'."),
        },
    )  # fmt: skip
    st.caption("Request classes: used by the priority queue order (article §5.2).")
    # a row added in the editor turns its number columns into floats; the config wants integer priorities
    return [{k: int(v) if k == "priority" and isinstance(v, float) and v.is_integer() else v for k, v in dict(r).items()}
            for r in edited]  # fmt: skip


def _trace_controls(cfg: SimConfig) -> None:
    if cfg.workload.trace is not None:
        # a preset may carry the trace (the DistServe pair): not "uploaded"; and the time scale / sample widgets
        # below are upload options, not this trace's (a preset's own scale is already in its arrivals)
        st.info(f"Replaying a trace of {len(cfg.workload.trace.arrival_s):,} requests ({plain(cfg.workload.name)}); "
                "the generators below are ignored, and the time scale and sample size apply to the next file uploaded.")  # fmt: skip
        st.button("Remove the trace", on_click=_clear_trace)
        if st.session_state.get("ui.trace_note"):
            st.caption(st.session_state["ui.trace_note"])
    st.selectbox("Trace format", ("auto",) + TRACE_FORMATS, key="w.trace_format",
                 help="auto reads the header. " + "; ".join(f"{k}: {v}" for k, v in FORMAT_HELP.items()))  # fmt: skip
    c1, c2 = st.columns(2)
    c1.number_input("Time scale", min_value=0.01, max_value=1000.0, value=1.0, key="w.trace_time_scale",
                    help="Multiply arrival gaps: 0.5 replays the trace twice as fast.")  # fmt: skip
    c2.number_input("Sample N requests", min_value=0, max_value=100_000, value=0, step=100, key="w.trace_max_requests",
                    help="0 keeps every request; otherwise a seeded sample in arrival order.")  # fmt: skip
    st.file_uploader("Trace file (Azure 2023/2024, BurstGPT, Mooncake JSONL, or arrival_s,prompt_tokens,output_tokens[,priority])",
                     type=["csv", "jsonl", "json"], key="w.upload_trace", on_change=_on_trace_upload,
                     help=f"Up to 100,000 requests and {MAX_TRACE_CSV_BYTES // 2**20} MB; set the options before uploading.")  # fmt: skip
    if st.session_state.get("ui.trace_error"):
        st.error(plain(st.session_state["ui.trace_error"]))
