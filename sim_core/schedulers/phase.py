"""Prefill mode: which kind of tick runs next. One small controller per mode of the config.

Kinds: DECODE_FIRST (decodes, then prefill chunks in the remaining token budget: Sarathi-Serve,
vLLM V1), PREFILL (prefill-only tick: vLLM V0), PREFILL_MIXED (a prefill tick that running decodes
join outside the budget: SGLang mixed chunk, Orca, TensorRT-LLM in-flight batching), DECODE.

Contract for a controller (what coalesced runs rely on, `Scheduler.repeat_decodes`): `choose` is
called before each tick and `observe` once after it, in tick order. When `choose` returns a kind
different from the one it returned for the previous tick, with the same `has_prefill_work` and at
least one decode running (as in every coalesced run), a second call with the same arguments must
return the same kind and leave the state unchanged (a run stops there and the next plan asks
again). `is_stateless = True` only if `choose` depends on its arguments alone.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

from sim_core.config import SchedulerConfig


class TickKind(IntEnum):
    DECODE = 0
    PREFILL = 1
    PREFILL_MIXED = 2
    DECODE_FIRST = 3


class PrefillFirst:
    """vLLM V0 `_schedule`: run prefills whenever any can be scheduled (article §3.1)."""

    is_stateless = True

    def __init__(self, cfg: SchedulerConfig):
        self._prefill_kind = TickKind.PREFILL_MIXED if cfg.mix_decodes else TickKind.PREFILL

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        return self._prefill_kind if has_prefill_work else TickKind.DECODE

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        pass


class DecodeFirst(PrefillFirst):
    """Sarathi-Serve stall-free batching: every running decode, then prefill chunks under the budget."""

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        return TickKind.DECODE_FIRST


class TimeSlice:
    """Article §2.1 scheduler_loop: a prefill phase of `prefill_slice_ms`, then a decode phase of
    `decode_slice_ms`. A phase with no work ends early (the loop moves on when a queue is empty).

    A tick cannot be cut, so a phase may overrun its slice; the overrun is charged to that phase's
    next slice (deficit round robin), which keeps the long-run shares at the configured ratio.
    """

    is_stateless = False

    def __init__(self, cfg: SchedulerConfig):
        self._slice_s = {True: cfg.time_slice.prefill_slice_ms / 1e3, False: cfg.time_slice.decode_slice_ms / 1e3}
        self._credit_s = {True: self._slice_s[True], False: 0.0}
        self.in_prefill = True

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        credit = self._credit_s
        while credit[self.in_prefill] <= 0:  # each switch adds a slice, so this ends
            self._switch()
        if self.in_prefill and not has_prefill_work and num_decodes:
            self._switch()
        elif not self.in_prefill and not num_decodes and has_prefill_work:
            self._switch()
        return TickKind.PREFILL if self.in_prefill else TickKind.DECODE

    def _switch(self) -> None:
        phase = self.in_prefill = not self.in_prefill
        # carry an overrun (negative credit) but never bank unused time from an idle phase
        credit = self._credit_s[phase]
        self._credit_s[phase] = (0.0 if 0.0 < credit else credit) + self._slice_s[phase]  # min(credit, 0.0), inline

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        if prefill_tokens or decode_tokens:
            self._credit_s[bool(prefill_tokens)] -= duration_s


class Quota:
    """Article §5.3 resource quotas: prefill gets at most `prefill_share` of GPU time over a sliding
    window and at most `max_prefill_ms` at a stretch; decode runs first while its throughput,
    measured over the time decodes were waiting in the window, is below `decode_min_tokens_per_s`
    and it has had less than its own share (1 − prefill_share).
    Work-conserving: when one side has no work the other runs.
    """

    is_stateless = False

    def __init__(self, cfg: SchedulerConfig):
        q = cfg.quota
        self._share, self._window_s = q.prefill_share, q.window_ms / 1e3
        self._max_run_s, self._min_decode_rate = q.max_prefill_ms / 1e3, q.decode_min_tokens_per_s
        # (end_s, busy_s, prefill_s, decode_wait_s, decode_tokens) per tick in the window
        self._ticks: deque[tuple[float, float, float, float, int]] = deque()
        self._busy_s = self._prefill_s = self._decode_wait_s = 0.0
        self._decode_tokens = 0
        self._prefill_run_s = 0.0
        self._had_decodes = False

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        ticks, start_s = self._ticks, now_s - self._window_s
        if ticks and ticks[0][0] < start_s:  # ticks leave the window (sums in locals: called every tick)
            busy_s, prefill_s, wait_s, tokens = self._busy_s, self._prefill_s, self._decode_wait_s, self._decode_tokens
            while ticks and ticks[0][0] < start_s:
                _, busy, pre, wait, dec = ticks.popleft()
                busy_s -= busy
                prefill_s -= pre
                wait_s -= wait
                tokens -= dec
            self._busy_s, self._prefill_s, self._decode_wait_s, self._decode_tokens = busy_s, prefill_s, wait_s, tokens
        self._had_decodes = num_decodes > 0
        if not has_prefill_work:
            return TickKind.DECODE
        if not num_decodes:
            return TickKind.PREFILL
        over_share = self._busy_s > 0 and self._prefill_s / self._busy_s >= self._share
        # Below its floor, decode takes priority, but only up to its own share of the GPU: a floor
        # the running decodes cannot reach even with the whole GPU must not starve prefill.
        decode_share = 1.0 - self._prefill_s / self._busy_s if self._busy_s > 0 else 0.0
        decode_starved = (
            self._decode_tokens < self._min_decode_rate * self._decode_wait_s and decode_share < 1.0 - self._share
        )
        too_long = self._prefill_run_s >= self._max_run_s
        return TickKind.DECODE if (over_share or decode_starved or too_long) else TickKind.PREFILL

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        prefill_s = duration_s if prefill_tokens else 0.0
        wait_s = duration_s if self._had_decodes else 0.0
        self._prefill_run_s = self._prefill_run_s + duration_s if prefill_tokens else 0.0
        self._ticks.append((end_s, duration_s, prefill_s, wait_s, decode_tokens))
        self._busy_s += duration_s
        self._prefill_s += prefill_s
        self._decode_wait_s += wait_s
        self._decode_tokens += decode_tokens


PHASE_CONTROLLERS = {
    "prefill_first": PrefillFirst,
    "decode_first": DecodeFirst,
    "time_slice": TimeSlice,
    "quota": Quota,
}
