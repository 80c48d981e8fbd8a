"""Array aliases and the ordered enums shared by the engine, metrics and UI."""

from __future__ import annotations

from enum import IntEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class Status(IntEnum):
    """Request status. Order carries meaning: PENDING < WAITING < RUNNING < SWAPPED < FINISHED,
    so `status < FINISHED` means "not done yet" and `status >= RUNNING` means "was scheduled"."""

    PENDING = 0  # not arrived yet (or closed-loop request not released)
    WAITING = 1  # arrived, in the waiting queue (or pre-empted by recompute)
    RUNNING = 2  # holds KV blocks on the GPU (prefilling or decoding)
    SWAPPED = 3  # KV blocks in host memory
    FINISHED = 4


class Phase(IntEnum):
    """What a tick (a row of the GPU Gantt) did. One colour per phase everywhere in the UI."""

    IDLE = 0
    PREFILL = 1  # only prefill tokens
    DECODE = 2  # only decode tokens
    MIXED = 3  # prefill chunks and decodes in one batch
    SWAP = 4  # only KV transfers over PCIe


class Event(IntEnum):
    """Per-request events that bound the segments of the request timeline."""

    SCHEDULED = 0  # admitted (first time, or again after pre-emption)
    FIRST_TOKEN = 1  # prefill complete, first token emitted
    PREEMPTED = 2  # KV dropped (recompute)
    SWAPPED_OUT = 3
    SWAPPED_IN = 4
    FINISHED = 5
    PREFILL_DONE = 6  # a recompute prefill completed: decoding again
    # Disaggregated prefill/decode (sim_core/cluster): between the first token and the decode pool.
    KV_WAIT = 7  # prefill done: waiting for a decode instance to reserve blocks (back-pressure)
    KV_TRANSFER_START = 8  # blocks reserved on a decode instance: the KV cache is being sent
    KV_TRANSFER_DONE = 9  # KV arrived: decoding on the decode instance
