"""What a head-to-head comparison should say about its two setups besides their results."""

from __future__ import annotations

from app.components.config_form import SECTIONS
from app.components.units import fmt_number
from sim_core import SimConfig
from sim_core.config import optional_section_defaults
from sim_core.costmodel import uses_fp8_cores
from sim_core.unused import setting_is_read
from sim_core.words import counted

# the calibration knobs the sidebar shows, with their labels (one list: config_form's)
_CALIBRATION_SPECS = [s for s in SECTIONS["Calibration"] if s.path != "calibration.profile"]
MAX_NAMED = 3  # the knobs named in the note, those that differ most first
MAX_FIELDS = 6  # the settings `setup_differences` names
_NOT_SETTINGS = ("name", "description", "source")  # (labels: two setups with the same knobs run alike)


def _prices(field: str, cfg: SimConfig) -> bool:
    """Whether the cost model reads this calibration knob for this setup (CostModel: one GEMM efficiency, by whether
    the FP8 cores run the GEMMs; the link's terms only with tensor parallelism)."""
    if field in ("gemm_efficiency", "fp8_gemm_efficiency"):
        return (field == "fp8_gemm_efficiency") == uses_fp8_cores(cfg)
    if field in ("interconnect_efficiency", "allreduce_latency_us"):
        return cfg.hardware.num_gpus > 1
    return True


def calibration_difference(a: SimConfig, b: SimConfig, names: tuple[str, str] = ("A", "B")) -> str | None:
    """None when both setups are priced alike; else a note saying that they are not, by which knobs, and how to compare
    their scheduling alone.

    Why: an engine preset brings its family's calibration (its measured CPU overheads and kernel efficiencies), so
    two engines compared head to head differ in both. Sarathi-Serve's profile is its research artifact's, a Python
    engine with ~1 ms of CPU per running sequence per tick: on the default H100 scenario it saturates below 4 req/s
    (462 output tokens/s at 4 req/s, ticks of ~48 ms) where vLLM V1's profile serves 8 req/s with a TTFT p99 of
    0.18 s, and a room reads that as the scheduling policy's doing."""
    ca, cb = a.calibration, b.calibration
    if ca == cb:
        return None
    differ = []  # (how many times larger, label, a's, b's)
    for spec in _CALIBRATION_SPECS:
        field = spec.path.split(".", 1)[1]
        va, vb = getattr(ca, field), getattr(cb, field)
        if va != vb and (_prices(field, a) or _prices(field, b)):  # (a knob neither setup's price reads says nothing)
            ratio = max(va, vb) / min(va, vb) if min(va, vb) > 0 else float("inf")
            differ.append((ratio, spec.label, va, vb))
    if not differ:
        return None
    differ.sort(key=lambda d: -d[0])
    shown = "; ".join(f"{label}: {fmt_number(va)} against {fmt_number(vb)}" for _, label, va, vb in differ[:MAX_NAMED])
    more = f" and {len(differ) - MAX_NAMED} more" if len(differ) > MAX_NAMED else ""
    na, nb = names
    return (f"{na} and {nb} are priced with different calibrations ({na}: {ca.profile}, {nb}: {cb.profile}; {shown}{more}), "
            "measured on each engine family's own implementation: part of the difference is their CPU overheads and "
            "kernels, not their scheduling. To compare the scheduling alone, give both the same calibration profile "
            "(calibration.profile: on Simulate, sidebar → Calibration; or in the link).")  # (Compare and Sweep have no
    # such section of their own: "(sidebar, Calibration)" sent a reader to a sidebar that holds only the pages, a review)


MORE_NAMES = 12  # fields past MAX_FIELDS named without their values


def _topology(cfg: SimConfig) -> str:
    """How a config's engines are laid out, in words: 'one engine', '4 co-located replicas', '3P1D'."""
    dep = cfg.deployment
    if dep is None:
        return "one engine"
    if dep.disaggregation is not None:
        pools = dep.disaggregation
        # (a pool on other GPUs, Splitwise's A100 decode pool: ten of its fields were listed "→ –", its name nowhere)
        other = [f"{role} on {pool.hardware.name}" for role, pool in (("prefill", pools.prefill), ("decode", pools.decode))
                 if pool.hardware is not None and pool.hardware.name != cfg.hardware.name]  # fmt: skip
        return f"{pools.prefill.replicas}P{pools.decode.replicas}D" + (f" ({', '.join(other)})" if other else "")
    return counted(dep.replicas, "co-located replica")


_ABSENT = object()


def _left_out_value(dump: dict, path: str) -> object:
    """The value at dotted `path` of a config dump that leaves out a section on the way: what leaving it out stands for
    (config.optional_section_defaults: a section's defaults, a pool's the top-level hardware or scheduler)."""
    node: object = dump
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict):
            return _ABSENT
        if node.get(part) is None and i < len(parts) - 1:
            node = optional_section_defaults(tuple(parts[: i + 1]), dump)
        else:
            node = node.get(part, _ABSENT)
    return node


def _topology_says(path: str, leaves: tuple[dict, dict], dumps: tuple[dict, dict], said: str) -> bool:
    """Whether a deployment field only one side has (`leaves`, `dumps`: A's and B's flattened and whole) goes without
    saying beside the topology (`said`, both sides'): at what the other side's leaving its section out stands for
    ("first_token_from prefill → –"), an instance count, or a pool's hardware the topology names ("decode on A100 …").
    One set otherwise, a 1 GB/s link, is named; a section both sides have lists its fields."""
    va, vb = leaves
    if not path.startswith("deployment.") or (path in va) == (path in vb):
        return False
    value, other = (va[path], dumps[1]) if path in va else (vb[path], dumps[0])
    if value == _left_out_value(other, path) or path.endswith(".replicas"):
        return True
    return any(path.startswith(f"deployment.disaggregation.{role}.hardware.") and f"{role} on " in said
               for role in ("prefill", "decode"))


def _named_parts(a: SimConfig, b: SimConfig, paths: list[str]) -> list[str]:
    """The differences a name says at once: the topology, and the GPU and the model where a field of theirs differs
    (`paths`; a name alone is a label: two setups with the same knobs run alike). Their fields follow with values."""
    parts = [f"topology {_topology(a)} → {_topology(b)}"] if _topology(a) != _topology(b) else []
    for what, section, ta, tb in (("GPU", "hardware.", a.hardware.name, b.hardware.name),
                                  ("model", "model.", a.model.name, b.model.name)):  # fmt: skip
        if ta != tb and any(k.startswith(section) for k in paths):
            parts.append(f"{what} {ta} → {tb}")
    return parts


def setup_differences(a: SimConfig, b: SimConfig, lead: str = "B differs from A in") -> str | None:
    """The settings in which B differs from A, by dotted path with both values, at most MAX_FIELDS of them (None: none),
    after `lead`. Why: Compare named both sides by their preset ("kv-pressure-a100-llama8b · vLLM V0" twice) while B
    swapped, so the one knob the comparison was about was said nowhere on the page."""
    from app.state import _leaves  # (the flattening the readable links use)

    va, vb = _leaves(a.model_dump(mode="json")), _leaves(b.model_dump(mode="json"))
    paths = [k for k in dict.fromkeys([*va, *vb]) if va.get(k) != vb.get(k) and k.rsplit(".", 1)[-1] not in _NOT_SETTINGS]
    if any(c.deployment is not None and c.deployment.disaggregation is not None for c in (a, b)):
        # (a P:D side's deployment.replicas is 1 by rule, its pools count their instances: "deployment.replicas 4 → 1"
        # read as if B ran one replica where it ran 3P1D; the pools' own fields say what differs)
        paths = [k for k in paths if k != "deployment.replicas"]
    if _topology(a) != _topology(b):
        dumps, said = (a.model_dump(mode="json"), b.model_dump(mode="json")), f"{_topology(a)} {_topology(b)}"
        paths = [k for k in paths if not _topology_says(k, (va, vb), dumps, said)]
    # (4 co-located replicas against 3P1D listed the pools' fields "– → 3" and never the replicas A ran: the topology
    # first, in words, as one of the MAX_FIELDS, with the GPU and the model by name)
    parts = _named_parts(a, b, paths)
    # settings neither run reads (a swap space under recompute) last, by name: they pushed the real differences into
    # "also in", and a link that set only one read as if the runs differed
    unread = [k for k in paths if not setting_is_read(a, k) and not setting_is_read(b, k)]
    paths = [k for k in paths if k not in unread]
    unread_text = ", ".join(unread[:MORE_NAMES]) + (f" and {len(unread) - MORE_NAMES} more" if len(unread) > MORE_NAMES else "")
    if not paths and not parts:
        return f"{lead} only settings neither run reads: {unread_text}." if unread else None
    short = lambda v: (str(v) if len(str(v)) <= 30 else str(v)[:29] + "…")  # noqa: E731
    if not paths:  # (only the topology's own fields differed)
        return f"{lead} {'; '.join(parts)}" + (f"; not read by either run: {unread_text}." if unread else ".")
    num_valued = MAX_FIELDS - len(parts)
    parts += [f"{k} {short(va.get(k, '–'))} → {short(vb.get(k, '–'))}" for k in paths[:num_valued]]
    shown = "; ".join(parts)
    # the rest by name (", and 3 more" left the reader no way to see which): at most MORE_NAMES of them
    rest = paths[num_valued:]
    more = (f"; also in {', '.join(rest[:MORE_NAMES])}" + (f" and {len(rest) - MORE_NAMES} more" if len(rest) > MORE_NAMES else "")
            if rest else "")  # fmt: skip
    return f"{lead} {shown}{more}" + (f"; not read by either run: {unread_text}." if unread else ".")
