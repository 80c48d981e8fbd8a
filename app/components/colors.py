"""One colour per phase, everywhere (Gantt, request rows, roofline, step-through, legends)."""

from sim_core.types import Phase

PHASE_COLORS = {
    "prefill": "#E8710A",  # orange: compute-bound prompt processing
    "decode": "#1A73E8",  # blue: memory-bound token generation
    "mixed": "#9334E6",  # purple: prefill chunks and decodes in one batch
    "idle": "#DADCE0",  # light grey: nothing to run
    "swap": "#D93025",  # red: KV over PCIe
    "waiting": "#9AA0A6",  # grey: queued
    "preempted": "#A50E0E",  # dark red: KV dropped, will recompute
    "swapped": "#F28B82",  # pink: KV in host memory
    "kv transfer": "#12B5CB",  # cyan: KV cache crossing from a prefill to a decode instance (sim_core/cluster)
}
PHASE_NAMES = {Phase.IDLE: "idle", Phase.PREFILL: "prefill", Phase.DECODE: "decode", Phase.MIXED: "mixed", Phase.SWAP: "swap"}
