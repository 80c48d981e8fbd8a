"""Speculative decoding as a rule and a cost term: no second engine.

Rule: each decode step of a speculating request verifies k+1 positions (its last token and k
draft tokens) and emits 1 + the number of leading draft tokens accepted, each accepted with the
probability of its position (independent; Leviathan et al., ICML 2023). When the tick's decodes
would pass the token budget the drafts are cut to fit (Scheduler.verify_width). Acceptance draws come from
their own generator seeded by the run's seed, so a run is reproducible.

Cost: the verify pass is priced by the target's roofline as k+1 query tokens per sequence, each
attending over the sequence's context up to its position, with k+1 LM-head rows; plus the draft's
time: k decode steps of a draft model, or, for an MTP/EAGLE head, k times a fraction of a plain
target decode step. A draft step costs its busy time (the roofline time minus the fixed per-tick
overheads, which the target's step already pays once). In a tick with prefill chunks the draft runs over
their tokens too, as vLLM V1's drafter does (its first step over every scheduled token, its later steps
over one token per request: `Speculator.tick_draft_s`), so prefill ticks cost the draft's forward as well.

Memory: the draft's weights and its layers' KV are counted in the memory plan (costmodel.draft_memory_per_gpu: a
draft model's own, or one target layer for a head), so a block holds its tokens' KV in the draft's layers too and the
pool has fewer blocks, as in vLLM V1; its k lookahead slots in each running request's blocks are counted too
(Scheduler.decode_slots).
"""

from __future__ import annotations

from array import array

import numpy as np

from sim_core.config import SimConfig
from sim_core.costmodel import CostModel, draft_model_config
from sim_core.types import IntArray

SEED_SALT = 0x5BEC  # separates the acceptance stream from the workload's
# A run's draft steps up to this many are priced one by one in Python floats: one array call for all of them costs
# about as much as ~40 scalar steps (measured: ~40 us against ~0.9 us a step)
SCALAR_DRAFT_STEPS = 40
# Sequence-steps drawn at least per draw (`Speculator.upcoming`): the stream is the same however it is cut, and a
# single tick's few decoders would otherwise pay the generator's and NumPy's call overheads every tick
DRAW_AHEAD_STEPS = 1024


def verify_aggregates(width: int, num_seqs: int, context_tokens: int) -> tuple[int, int, int, int]:
    """(tokens, LM-head rows, attention pairs, KV tokens read) of verifying `width` positions for
    `num_seqs` sequences holding `context_tokens` in total: position j (1..width) attends over
    its context plus j keys."""
    tokens = width * num_seqs
    pairs = width * context_tokens + num_seqs * width * (width + 1) // 2
    return tokens, tokens, pairs, context_tokens


def tokens_emitted(accepted, num_drafts, left, minimum=min):
    """The acceptance rule, its one statement: a speculating decoder's verify pass emits 1 + its leading accepted
    drafts (`Speculator.upcoming`), of at most `num_drafts` (the drafts left by the verify width,
    `Scheduler.verify_width` - 1), and never more than the `left` tokens of its output. Python ints with `min` (the
    scalar walk of a speculative run, `Engine._spec_walk_scalar`) or arrays with `np.minimum` (a planned tick's decoders,
    the vectorised walk): every executor derives a decoder's tokens from here."""
    return minimum(1 + minimum(accepted, num_drafts), left)


def _busy_decode_s(cost: CostModel, num_seqs, context_tokens, empty_s: float) -> np.ndarray:
    """Roofline time of plain decode steps minus the fixed per-tick cost (`empty_s`: the CPU overhead of a tick; the
    per-sequence overhead is left out by pricing the step with no sequences), elementwise over arrays of batch sizes
    and contexts (a coalesced run's ticks): the array path of `CostModel.tick`, bit for bit its scalar path."""
    return cost.tick(num_seqs, num_seqs, context_tokens + num_seqs, context_tokens, 0)[0] - empty_s


class Speculator:
    def __init__(self, cfg: SimConfig, target_cost: CostModel):
        spec = cfg.scheduler.speculative
        self.k = spec.num_draft_tokens
        self.alpha = np.asarray(spec.acceptance, dtype=np.float64)  # (k,)
        self.rng = np.random.default_rng([cfg.seed, SEED_SALT])
        if spec.draft == "model":  # (the copy the memory plan sizes the draft by: one reading of the preset)
            self._draft_cost, self._fraction = CostModel(draft_model_config(cfg)), 1.0
        else:
            self._draft_cost, self._fraction = target_cost, spec.draft_cost_fraction
        # Only the CPU overhead: the time of an empty tick also streams the weights (its GEMM term), which every
        # draft step does, and subtracting it halved a draft model's steps (1B draft: 2.2 instead of 4.4 ms for 3).
        self._empty_s = self._draft_cost.tick_overhead_s
        self.num_steps = 0  # sequence-steps verified
        self.num_emitted = 0  # tokens they emitted
        self.draft_time_s = 0.0
        # Tokens each verify tick emitted, flat (tick, tokens, tick, tokens, ...): the timeline's decode tokens are
        # the positions verified (what the roofline prices), so the emitted ones are kept here for the metrics that
        # count output tokens per tick (the steady window's throughput). 16 bytes per decode tick.
        self.emitted_marks = array("q")
        # Leading accepted drafts (of k) of sequence-steps drawn from `rng` but not yet used, in stream order: a
        # coalesced run looks ahead at the draws of ticks it may not run (`upcoming`) and uses only those it ran
        # (`use`), so the stream is consumed B x k uniforms per tick, in order, as tick-by-tick stepping consumes it.
        self._ahead = np.zeros(0, dtype=np.int64)
        self._by_lead: dict[int, tuple[int, ...]] = {}  # (`emitted_by_lead`: drafts -> the rule's values)

    def log_emitted(self, first_tick: int, tokens_by_tick) -> None:
        """Tokens emitted by the decodes of ticks first_tick, first_tick + 1, ... (one int or an array of ticks)."""
        if isinstance(tokens_by_tick, np.ndarray):
            marks = np.empty(2 * tokens_by_tick.size, dtype=np.int64)
            marks[0::2] = np.arange(first_tick, first_tick + tokens_by_tick.size)
            marks[1::2] = tokens_by_tick
            self.emitted_marks.frombytes(marks.tobytes())
        else:
            self.log_tick_emitted(first_tick, int(tokens_by_tick))

    def log_tick_emitted(self, tick: int, tokens: int) -> None:
        """`log_emitted` of one tick in Python ints: the scalar core's, once per speculative tick (no type test)."""
        self.emitted_marks.extend((tick, tokens))

    def emitted_column(self, num_ticks: int) -> IntArray:
        """(num_ticks,) output tokens the decodes of each tick emitted (0 for ticks without a verify pass)."""
        out = np.zeros(num_ticks, dtype=np.int64)
        if self.emitted_marks:
            flat = np.array(self.emitted_marks, dtype=np.int64)
            ticks, tokens = flat[0::2], flat[1::2]
            shown = ticks < num_ticks
            out[ticks[shown]] = tokens[shown]
        return out

    def upcoming(self, num_steps: int) -> IntArray:
        """Leading accepted draft tokens (of k) of the next `num_steps` sequence-steps, in stream order, without using
        them (read only). Cut to d drafts, a step accepts min(this, d) (`tokens_emitted`): its first d comparisons are the
        same."""
        more = num_steps - self._ahead.size
        if more > 0:  # draw k uniforms per sequence-step, as `accepted` always has; a batch of steps at a time
            ok = self.rng.random((max(more, DRAW_AHEAD_STEPS), self.k)) < self.alpha[None, :]
            self._ahead = np.concatenate((self._ahead, np.cumprod(ok, axis=1).sum(axis=1)))
        return self._ahead[:num_steps]

    def upcoming_list(self, num_steps: int) -> list[int]:
        """`upcoming` as a Python list of at least `num_steps` steps (the steps already drawn, at least
        DRAW_AHEAD_STEPS), read only: a per-tick caller (the scalar core, `fastpath._spec_decode`) takes each tick's
        steps from it in stream order and then `use`s those it took, so the stream is consumed as tick-by-tick stepping
        consumes it (a NumPy slice per tick costs ~10k instructions, a list slice ~0.3k)."""
        return self.upcoming(max(num_steps, self._ahead.size, DRAW_AHEAD_STEPS)).tolist()

    def emitted_by_lead(self, num_drafts: int) -> tuple[int, ...]:
        """`tokens_emitted` of a decoder with `num_drafts` drafts and more than `num_drafts` tokens left, indexed by its
        leading accepted drafts (0..k): the rule's own values, taken once per draft count (a scalar-core tick's
        decoders read it instead of calling the rule each, issue 11 session 51). With more than `num_drafts` tokens
        left the rule's cut to the tokens left never binds (it emits at most 1 + num_drafts), so its value is the one
        at `num_drafts + 1` left; a decoder nearer its end calls the rule."""
        table = self._by_lead.get(num_drafts)
        if table is None:
            table = self._by_lead[num_drafts] = tuple(tokens_emitted(a, num_drafts, num_drafts + 1) for a in range(self.k + 1))
        return table

    def use(self, num_steps: int) -> None:
        """The next `num_steps` sequence-steps' draws are used (by a coalesced run, after `upcoming`)."""
        self._ahead = self._ahead[num_steps:]

    def accepted(self, num_seqs: int) -> IntArray:
        """Leading accepted draft tokens (of k) for each of the next `num_seqs` sequence-steps, (num_seqs,), used (a
        single tick's). A draft cut to fewer tokens accepts fewer (`tokens_emitted`): k uniforms are drawn per
        sequence whatever the cut, so the stream's position depends only on the sequence-steps drawn (a coalesced run
        looks at many ticks' steps at once, `upcoming`, and uses those of the ticks it ran, `use`)."""
        lead = self.upcoming(num_seqs)
        self.use(num_seqs)
        return lead

    def draft_s(self, num_seqs, context_tokens):
        """Time of the k draft steps of a batch (draft step j sees j more tokens per sequence).
        `num_seqs` and `context_tokens` may be arrays of ticks (a coalesced run's, each with decoders): the same
        operations elementwise. A tick whose drafts are cut to the token budget (`Scheduler.verify_width`) still pays
        all k: vLLM V1's proposer drafts k tokens after the previous step's sampling
        (GPUModelRunner.propose_draft_token_ids), before Scheduler.schedule trims them to the budget."""
        if not isinstance(context_tokens, np.ndarray):
            return self.tick_draft_s(int(num_seqs), int(context_tokens))
        if context_tokens.size * self.k <= SCALAR_DRAFT_STEPS:
            return np.array([self.tick_draft_s(int(b), int(c)) for b, c in zip(num_seqs.tolist(), context_tokens.tolist())])
        # all steps of all ticks in one array call, summed per tick in step order from 0 as `tick_draft_s` sums them
        b = np.asarray(num_seqs)[:, None]
        ctx = context_tokens[:, None] + np.arange(self.k) * b  # (ticks, k) step j's context
        busy = _busy_decode_s(self._draft_cost, np.repeat(b, self.k), ctx.ravel(), self._empty_s).reshape(ctx.shape)
        total = 0
        for j in range(self.k):
            total = total + busy[:, j]
        return self._fraction * total

    def tick_draft_s(self, num_seqs: int, context_tokens: int, prompt_tokens: int = 0, prompt_pairs: int = 0,
                     prompt_read: int = 0, num_prompts: int = 0) -> float:
        """`draft_s` of one tick in Python ints, one step at a time through the scalar cost function (bit for bit its
        array path). The scalar core (`fastpath._spec_decode`) calls it directly: its arguments are ints already.

        A tick with prefill chunks (`num_prompts` of them: `prompt_tokens` tokens, `prompt_pairs` causal pairs over
        `prompt_read` cached tokens): vLLM V1's drafter runs over every token the step scheduled, not only the decodes
        (GPUModelRunner.propose_draft_token_ids passes input_ids[:num_scheduled_tokens] as target_token_ids;
        SpecDecodeBaseProposer.propose runs its first forward over all of them, "to keep the drafter KV cache in
        sync"), and its later steps over one token of every request of the batch (the padded drafter batch: a chunk
        that ends mid-prompt drafts too, and its drafts are discarded). So the first step prices the decodes' tokens and
        the chunks' in one pass, with one sampled row per request, and step j >= 1 one more token per chunk over its
        context after the chunk (`prompt_read + prompt_tokens`) plus j - 1. Without chunks: the decodes' k steps, the
        same integers as before (bit for bit)."""
        if (num_seqs == 0 and num_prompts == 0) or self._fraction == 0:
            return 0.0
        tick_scalar, b, a, empty_s = self._draft_cost._tick_scalar, num_seqs, num_prompts, self._empty_s
        c = context_tokens
        total = tick_scalar(b + prompt_tokens, b + a, c + b + prompt_pairs, c + prompt_read, 0)[0] - empty_s
        after = prompt_read + prompt_tokens  # (the chunks' contexts after this tick, summed)
        for j in range(1, self.k):  # step j's contexts: c + j x b, and each chunk's own plus j - 1
            cj, pj = c + j * b, after + (j - 1) * a
            total += tick_scalar(b + a, b + a, cj + b + pj + a, cj + pj, 0)[0] - empty_s
        return self._fraction * total

    @property
    def mean_tokens_per_step(self) -> float:
        return self.num_emitted / self.num_steps if self.num_steps else float("nan")
