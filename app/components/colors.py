"""One colour per phase and request state, everywhere (Gantt, request rows, roofline, step-through,
legends), and a separate pair for runs A and B (Compare, lessons) that no phase uses, drawn with
different dashes as well, so a reader never confuses "B" with "decode"."""

from sim_core.types import Phase

PHASE_COLORS = {
    "prefill": "#E8710A",  # orange: compute-bound prompt processing
    "decode": "#1A73E8",  # blue: memory-bound token generation
    "stalled": "#A8C7FA",  # pale blue: decoding, but this tick gave it no token
    # deep purple: prefill chunks and decodes in one batch (dark: the brighter #9334E6 was ΔE 1.8 from decode blue
    # under deuteranopia, CIEDE2000, Machado 2009; this one is 20.9 and at least that from every other state)
    "mixed": "#4A148C",
    "idle": "#DADCE0",  # light grey: nothing to run
    "swap": "#D93025",  # red: KV over PCIe
    "waiting": "#9AA0A6",  # grey: queued
    "preempted": "#A50E0E",  # dark red: KV dropped, will recompute
    "swapped": "#F28B82",  # pink: KV in host memory
    "kv wait": "#F9AB00",  # amber: prefill done, its KV held until a decode instance has room (back-pressure)
    "kv transfer": "#12B5CB",  # cyan: KV cache crossing from a prefill to a decode instance (sim_core/cluster)
    # pale amber, a wait as amber is: decode slot reserved, its KV queued while earlier transfers hold the link (it was
    # pale cyan, #A6E3EC, which read as "stalled" pale blue beside it)
    "kv link wait": "#FDE293",
    "kv": "#188038",  # green: KV cache in use
    "running": "#202124",  # near-black: running requests
    # the waiting queue's line: the waiting grey, darker (the bars' #9AA0A6 along the Queues panel's zero line was lost
    # in its axis)
    "waiting line": "#70757A",
}
PHASE_NAMES = {Phase.IDLE: "idle", Phase.PREFILL: "prefill", Phase.DECODE: "decode", Phase.MIXED: "mixed", Phase.SWAP: "swap"}
RUN_COLORS = {"A": "#00796B", "B": "#C2185B"}  # teal and magenta: no phase or state uses them
RUN_DASHES = {"A": "solid", "B": "dash"}
NEUTRAL = "#5F6368"  # distributions of one run: not a phase colour
