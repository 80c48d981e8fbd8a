"""Prefill mode: which kind of tick runs next. One small controller per mode of the config.

Kinds: DECODE_FIRST (decodes, then prefill chunks in the remaining token budget: Sarathi-Serve,
vLLM V1), PREFILL (prefill-only tick: vLLM V0), PREFILL_MIXED (a prefill tick that running decodes
join, each taking its tokens from the budget first: SGLang mixed chunk, Orca, TensorRT-LLM in-flight batching), DECODE.

Contract for a controller (what coalesced runs rely on, `Scheduler.repeat_decodes`): `choose` is
called before each tick and `observe` once after it, in tick order. When `choose` returns a kind
different from the one it returned for the previous tick, with the same `has_prefill_work` and at
least one decode running (as in every coalesced run), a second call with the same arguments must
return the same kind and leave the state unchanged (a run stops there and the next plan asks
again). `is_stateless = True` only if `choose` depends on its arguments alone; `fixed_kind` (None: no such
kind) is the kind `choose` returns whatever its arguments, which a per-tick caller may read instead of the call. `decode_run(start,
durations, decode_tokens)` leaves the state that `choose(start_i, n > 0, False)` then `observe(end_i,
duration_i, 0, tokens_i)` leave for each tick of a run of all-decode ticks with nothing to prefill
(the scalar core's unrolled stretches: one call instead of two per tick); with nothing to prefill and
decodes running, `choose` answers a decode kind (tests/sim_core/test_schedulers.py).
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


# The members as module constants (the same objects): reading `TickKind.X` goes through the enum's
# metaclass (~0.1 us on Python 3.11), and `choose` runs every tick.
_DECODE, _PREFILL, _DECODE_FIRST = TickKind.DECODE, TickKind.PREFILL, TickKind.DECODE_FIRST


class PrefillFirst:
    """vLLM V0 `_schedule`: run prefills whenever any can be scheduled (article §3.1)."""

    is_stateless = True
    fixed_kind: TickKind | None = None  # (its choice depends on has_prefill_work)

    def __init__(self, cfg: SchedulerConfig):
        self._prefill_kind = TickKind.PREFILL_MIXED if cfg.mix_decodes else _PREFILL

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        return self._prefill_kind if has_prefill_work else _DECODE

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        pass

    def decode_run(self, start_s: float, durations_s: list[float], decode_tokens: list[int]) -> None:
        pass  # (see TimeSlice.decode_run: nothing to advance)


class DecodeFirst(PrefillFirst):
    """Sarathi-Serve stall-free batching: every running decode, then prefill chunks under the budget."""

    fixed_kind = _DECODE_FIRST  # every tick's (`choose`)

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        return _DECODE_FIRST  # (fixed_kind, without the attribute's lookup per plan)


def _starting_credit(credit_s: float, slice_s: float) -> float:
    """A time-slice phase's credit as it starts: an overrun (negative credit) carries into its slice, unused time
    from an idle phase is never banked. (`min(credit_s, 0.0)` spelled out: the same float, fewer calls.)"""
    return (0.0 if 0.0 < credit_s else credit_s) + slice_s


class TimeSlice:
    """Article §2.1 scheduler_loop: a prefill phase of `prefill_slice_ms`, then a decode phase of
    `decode_slice_ms`. A phase with no work ends early (the loop moves on when a queue is empty).

    A tick cannot be cut, so a phase may overrun its slice; the overrun is charged to that phase's
    next slice (deficit round robin), which keeps the long-run shares at the configured ratio.
    """

    is_stateless = False
    fixed_kind = None

    def __init__(self, cfg: SchedulerConfig):
        self._slice_s = {True: cfg.time_slice.prefill_slice_ms / 1e3, False: cfg.time_slice.decode_slice_ms / 1e3}
        self._credit_s = {True: self._slice_s[True], False: 0.0}
        self.in_prefill = True

    def choose(self, now_s: float, num_decodes: int, has_prefill_work: bool) -> TickKind:
        credit, in_prefill = self._credit_s, self.in_prefill
        if credit[in_prefill] <= 0:  # a phase out of credit: switch until one has some (each switch adds a slice)
            slice_s = self._slice_s
            while True:  # (a tick longer than both slices switches several times)
                in_prefill = not in_prefill
                phase_credit = credit[in_prefill]
                phase_credit = credit[in_prefill] = _starting_credit(phase_credit, slice_s[in_prefill])
                if not phase_credit <= 0:  # (the while condition, exactly)
                    break
        if in_prefill and not has_prefill_work and num_decodes:
            in_prefill = self._switch(in_prefill)
        elif not in_prefill and not num_decodes and has_prefill_work:
            in_prefill = self._switch(in_prefill)
        self.in_prefill = in_prefill
        return _PREFILL if in_prefill else _DECODE

    # `choose` is not idempotent: a switch for lack of work may start a phase still out of credit (an overrun longer
    # than its slice), and a second call at the same tick switches again. A caller that asks and then leaves the tick
    # to another planner (the fast path's hand-back, fastpath.run_ticks) puts the state back, so that the tick's
    # choice is made once.
    def state(self) -> tuple[float, float, bool]:
        return self._credit_s[True], self._credit_s[False], self.in_prefill

    def restore(self, state: tuple[float, float, bool]) -> None:
        self._credit_s[True], self._credit_s[False], self.in_prefill = state

    def _switch(self, in_prefill: bool) -> bool:
        """The other phase starts: returns it. Its credit carries an overrun (negative credit) but never
        banks unused time from an idle phase."""
        phase = not in_prefill
        credit = self._credit_s[phase]
        self._credit_s[phase] = _starting_credit(credit, self._slice_s[phase])
        return phase

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        if prefill_tokens or decode_tokens:
            self._credit_s[prefill_tokens != 0] -= duration_s  # (the phase: a bool key, as in_prefill)

    def decode_run(self, start_s: float, durations_s: list[float], decode_tokens: list[int]) -> None:
        """`choose(start, n > 0, False)` then `observe(end, duration, 0, tokens > 0)` for each tick of a
        run of all-decode ticks with nothing to prefill (each starts where the last ended), on locals:
        the same switches and the same float operations in the same order as those calls."""
        in_prefill = self.in_prefill
        credit, slice_s = self._credit_s, self._slice_s
        pre_s, dec_s, pre_slice_s, dec_slice_s = credit[True], credit[False], slice_s[True], slice_s[False]
        for dur in durations_s:
            # choose: out of credit, switch until a phase has some; then no prefill work with decodes
            # running ends a prefill phase (the decode phase runs)
            while (pre_s if in_prefill else dec_s) <= 0:
                in_prefill = not in_prefill
                if in_prefill:
                    pre_s = _starting_credit(pre_s, pre_slice_s)
                else:
                    dec_s = _starting_credit(dec_s, dec_slice_s)
            if in_prefill:
                in_prefill = False
                dec_s = _starting_credit(dec_s, dec_slice_s)
            dec_s -= dur  # observe: a decode tick's time is the decode phase's
        credit[True], credit[False], self.in_prefill = pre_s, dec_s, in_prefill


class Quota:
    """Article §5.3 resource quotas: prefill gets at most `prefill_share` of GPU time over a sliding
    window and at most `max_prefill_ms` at a stretch; decode runs first while its throughput,
    measured over the time decodes were waiting in the window, is below `decode_min_tokens_per_s`
    and it has had less than its own share (1 − prefill_share).
    Work-conserving: when one side has no work the other runs.
    """

    is_stateless = False
    fixed_kind = None

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
            return _DECODE
        if not num_decodes:
            return _PREFILL
        # DECODE when prefill is over its share, or decode is starved, or prefill ran too long (tested
        # in that order, each a pure comparison: the first that holds decides)
        busy_s, prefill_s = self._busy_s, self._prefill_s
        if busy_s > 0 and prefill_s / busy_s >= self._share:  # over its share
            return _DECODE
        # Below its floor, decode takes priority, but only up to its own share of the GPU: a floor
        # the running decodes cannot reach even with the whole GPU must not starve prefill.
        decode_share = 1.0 - prefill_s / busy_s if busy_s > 0 else 0.0
        if self._decode_tokens < self._min_decode_rate * self._decode_wait_s and decode_share < 1.0 - self._share:
            return _DECODE  # decode starved
        return _DECODE if self._prefill_run_s >= self._max_run_s else _PREFILL  # too long at a stretch

    def observe(self, end_s: float, duration_s: float, prefill_tokens: int, decode_tokens: int) -> None:
        prefill_s = duration_s if prefill_tokens else 0.0
        wait_s = duration_s if self._had_decodes else 0.0
        self._prefill_run_s = self._prefill_run_s + duration_s if prefill_tokens else 0.0
        self._ticks.append((end_s, duration_s, prefill_s, wait_s, decode_tokens))
        self._busy_s += duration_s
        self._prefill_s += prefill_s
        self._decode_wait_s += wait_s
        self._decode_tokens += decode_tokens

    def decode_run(self, start_s: float, durations_s: list[float], decode_tokens: list[int]) -> None:
        """`choose(start, n > 0, False)` then `observe(end, duration, 0, tokens)` for each tick of a run
        of all-decode ticks with nothing to prefill (each starts where the last ended), on locals: the
        same window updates and float operations in the same order as those calls."""
        ticks, window_s, append, popleft = self._ticks, self._window_s, self._ticks.append, self._ticks.popleft
        busy_s, prefill_s, wait_s, tokens = self._busy_s, self._prefill_s, self._decode_wait_s, self._decode_tokens
        now_s = start_s
        for dur, dec in zip(durations_s, decode_tokens):
            start = now_s - window_s  # choose: ticks leave the window; decodes run (waiting time counts)
            while ticks and ticks[0][0] < start:
                _, busy, pre, wait, num = popleft()
                busy_s -= busy
                prefill_s -= pre
                wait_s -= wait
                tokens -= num
            now_s += dur  # observe: a decode tick that decodes waiting decodes
            append((now_s, dur, 0.0, dur, dec))
            busy_s += dur
            prefill_s += 0.0
            wait_s += dur
            tokens += dec
        self._busy_s, self._prefill_s, self._decode_wait_s, self._decode_tokens = busy_s, prefill_s, wait_s, tokens
        if durations_s:
            self._had_decodes, self._prefill_run_s = True, 0.0


PHASE_CONTROLLERS = {
    "prefill_first": PrefillFirst,
    "decode_first": DecodeFirst,
    "time_slice": TimeSlice,
    "quota": Quota,
}
