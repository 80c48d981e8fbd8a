"""Deployment knobs that set several fields at once (Sweep's P:D ratio)."""

from __future__ import annotations

from sim_core.config import SimConfig
from sim_core.presets import PresetError


def with_prefill_instances(cfg: SimConfig, num_prefill: int) -> SimConfig:
    """Move instances between the pools: `num_prefill` prefill instances, the rest of the same total decode."""
    from sim_core.sweep import with_value

    dis = cfg.deployment.disaggregation if cfg.deployment else None
    if dis is None:
        raise PresetError("prefill_instances needs a disaggregated deployment: set deployment.disaggregation first")
    total = dis.prefill.replicas + dis.decode.replicas
    if not 1 <= num_prefill <= total - 1:
        raise PresetError(f"prefill_instances = {num_prefill}: with {total} instances in all it must be in [1, {total - 1}]")
    cfg = with_value(cfg, "deployment.disaggregation.prefill.replicas", num_prefill)
    return with_value(cfg, "deployment.disaggregation.decode.replicas", total - num_prefill)
