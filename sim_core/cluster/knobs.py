"""Deployment knobs that set several fields at once (Sweep's P:D ratio)."""

from __future__ import annotations

from sim_core.config import SimConfig
from sim_core.presets import PresetError


def prefill_instances_bounds(cfg: SimConfig) -> tuple[int, int]:
    """The P:D knob's range for this deployment: 1 to P + D - 1 prefill instances (each pool keeps one).
    Raises PresetError when the config has no disaggregated deployment."""
    dis = cfg.deployment.disaggregation if cfg.deployment else None
    if dis is None:
        raise PresetError("prefill_instances needs a disaggregated deployment: set deployment.disaggregation first")
    return 1, dis.prefill.replicas + dis.decode.replicas - 1


def with_prefill_instances(cfg: SimConfig, num_prefill: int) -> SimConfig:
    """Move instances between the pools: `num_prefill` prefill instances, the rest of the same total decode."""
    from sim_core.sweep import with_value

    lo, hi = prefill_instances_bounds(cfg)
    total = hi + 1
    if not lo <= num_prefill <= hi:
        raise PresetError(f"prefill_instances = {num_prefill}: with {total} instances in all it must be in [{lo}, {hi}]")
    cfg = with_value(cfg, "deployment.disaggregation.prefill.replicas", num_prefill)
    return with_value(cfg, "deployment.disaggregation.decode.replicas", total - num_prefill)
