"""Glossary: the terms the charts and lessons use, in one place (they were only in tooltips)."""

from __future__ import annotations

import streamlit as st

from app.components import workshop
from app.state import show_link_notices
from sim_core.lessons import load_article

TERMS = (  # (term, definition); grouped as a workshop introduces them
    ("Tick", "One forward pass of the model over one batch. The simulator advances one tick at a time; the GPU "
             "Gantt draws one bar per tick (a view of many ticks merges them; the GPU row's title says how)."),
    ("Prefill", "Processing a request's prompt: many tokens through every weight matrix at once. Compute-bound once a "
                "chunk holds more than a few hundred tokens (a short prompt or chunk is memory-bound, like decode: every "
                "Gantt hover says which); orange. Produces the first token and the prompt's KV cache."),
    ("Decode", "Generating one more token for each running request. Reads all weights and every sequence's KV "
               "cache for one token each: memory-bound (blue)."),
    ("Mixed tick", "A tick that runs decodes and a prefill chunk together (purple): chunked prefill, SGLang, Orca."),
    ("Stalled", "A request that is decoding but gets no token in a tick, because the tick ran only a prefill (or "
                "only KV transfers). Pale blue in the request rows; it shows up as a long inter-token gap."),
    ("Chunked prefill / token budget", "Splitting a long prompt into chunks of at most the token budget per tick "
                                       "(max_num_batched_tokens), so decodes keep running between chunks."),
    ("Continuous batching", "Requests join and leave the batch at every tick (iteration-level scheduling, Orca, "
                            "vLLM). Static batching instead runs a batch until its longest request finishes."),
    ("TTFT", "Time to first token: from a request's arrival to its first output token (queueing + prefill). With "
             "separate prefill and decode pools, the first token the user sees is the prefill instance's or, when the "
             "decode instance streams it (deployment.disaggregation.first_token_from = decode), the one it samples in its "
             "first tick after the KV cache has arrived: TTFT then also counts the wait for a decode slot, the transfer "
             "and that tick."),
    ("TPOT", "Time per output token: (end-to-end latency − TTFT) / (output tokens − 1), averaged per request."),
    ("ITL", "Inter-token latency (also TBT, time between tokens): every gap between two consecutive tokens of a "
            "request. Its p99 shows the stalls that TPOT averages away."),
    ("E2E", "End-to-end latency: from arrival to the last token."),
    ("p50 / p99", "The median and the 99th percentile over finished requests (p99: 1 in 100 is slower)."),
    ("SLO", "Service-level objective: a TTFT and a TPOT limit a request must meet (Objectives & run)."),
    ("Goodput", "Finished requests per second that meet both SLOs (vLLM benchmark_serving's request goodput): throughput "
                "that users would call good. DistServe's goodput is another figure: the highest arrival rate at which "
                "90 % of requests meet both, which this tool calls Capacity (at 90 % attainment)."),
    ("Throughput", "Output tokens per second over the whole run (the headline); with prompts, total tokens/s."),
    ("Makespan", "The run's length: from the first arrival to the last token of the last request."),
    ("KV cache", "The keys and values of every past token, kept on the GPU so decode does not recompute them. "
                 "Its size per token follows from the model (layers × KV heads × head size × 2 × bytes)."),
    ("Block (paged KV)", "KV memory is handed out in blocks of a few tokens (PagedAttention), so requests grow "
                         "without reserving their maximum length."),
    ("Pre-emption", "Evicting a running request when the KV cache is full. Recompute drops its KV and prefills "
                    "it again later (dark red); swap copies it to host memory over PCIe and back (pink rows, red "
                    "PCIe time in the GPU row). Which request goes first is the engine's rule: vLLM the one admitted "
                    "last, SGLang the one with the fewest tokens written, TensorRT-LLM the latest arrival. vLLM puts it back "
                    "at the head of the waiting queue, SGLang at its end."),
    ("Admission", "The scheduler's rule for letting a waiting request into the running batch. Greedy (vLLM V1): while "
                  "the KV blocks of its first chunk fit (its later chunks take theirs as they run). Watermark (vLLM V0): "
                  "while a few blocks stay free after it. SGLang's new-token ratio: while its prompt and output fit beside a "
                  "share of what the running requests will still write. Reserve (TensorRT-LLM): only when the blocks of its "
                  "prompt plus its longest possible output fit."),
    ("FCFS / priority", "Queue orders: first come, first served takes requests in arrival order; priority serves the "
                        "lower priority number first (0 before 1), in arrival order within a class."),
    ("Roofline", "A chart of achieved FLOP/s against arithmetic intensity (FLOPs per byte read). Left of the "
                 "ridge point a tick is limited by memory bandwidth, right of it by compute."),
    ("Compute- / memory-bound", "Whether a tick's time is set by FLOP/s (prefill) or by bytes read from HBM "
                                "(decode). Shown in every Gantt hover."),
    ("MFU / MBU", "Model FLOPs / memory-bandwidth utilisation: achieved FLOP/s or bytes/s over the GPU's peak; a "
                  "run's: its FLOPs or bytes over its busy time (FLOP/s: the "
                  "peak of the cores the GEMMs run on; FP8 weights on a GPU with FP8 tensor cores: its FP8 peak)."),
    ("Tensor parallelism (TP)", "Splitting every layer over several GPUs that run each tick together; two "
                                "all-reduces per layer over the GPU link add time (in the Gantt hover)."),
    # (Sweep, Plan and the later lessons use these; a workshop met them first there, undefined)
    ("SLO attainment", "The share of requests that meet both SLOs; a request that did not finish counts as a miss."),
    ("Steady-state window", "The requests between the first and last 10 % of arrivals: warm-up and drain are left out, "
                            "and throughput and goodput over it divide by its span, not the makespan. A run too short "
                            "to fill up, or a server that falls behind its arrivals, has none that can be trusted: the "
                            "page says so."),
    ("Saturation", "The most requests per second a setup completes when every request is waiting from the start "
                   "(an offline batch keeps the batch full): more load than that only grows the queue."),
    ("Capacity", "The highest arrival rate at which a setup still meets the objective in its steady-state window "
                 "(serving benchmarks: TTFT and TPOT p99 within the SLOs; DistServe: 90 % of requests meet both) "
                 "and keeps up with its arrivals (Sweep, Plan)."),
    ("Headroom", "How much more load a planned deployment takes at its target: capacity / target − 1 (Plan)."),
    ("Pareto front", "The setups no other one beats on both cost and latency (Plan's chart: $/hour against TTFT p99)."),
    ("Replicas and router", "A deployment of several identical engines, each with its own GPUs, KV cache and scheduler; "
                            "the router sends each arriving request to one of them: round robin, least outstanding "
                            "requests, least KV usage, prefix affinity, cache aware, session (every turn of a conversation "
                            "to one replica) or weighted score (llm-d's endpoint picker)."),
    ("Disaggregated prefill/decode (xPyD, P:D)", "Separate prefill and decode pools (DistServe, Splitwise, Dynamo): x "
                                                 "prefill instances compute prompts and ship each request's KV cache "
                                                 "over a link (NVLink, InfiniBand) to one of y decode instances; P:D is "
                                                 "how the instances are split between the pools."),
    ("Prefix caching", "Keeping the KV blocks of prompts already computed (a shared system prompt, a conversation's "
                       "earlier turns), so a later request that starts the same way skips prefilling that part."),
    ("Speculative decoding", "A cheap draft (a small model, or extra heads on the model) proposes a few tokens and the "
                             "model checks them all in one tick: a request emits the accepted ones plus one, so a "
                             "tick can give it several tokens."),
    # (terms the lessons use that had no entry: a browser review of the Learn page)
    ("Acceptance rate", "In speculative decoding, the chance that the model keeps each drafted token. With k drafted "
                        "tokens and acceptance a, a step emits (1 − a^(k+1)) / (1 − a) tokens on average."),
    ("AIMD", "Additive increase, multiplicative decrease: grow a limit a step at a time while things go well, cut it "
             "by a fraction when they do not (the dynamic batch size of lesson 9 adapts this way)."),
    ("Activation workspace", "GPU memory a forward pass needs beside the weights and the KV cache: the intermediate "
                             "tensors of the tokens in one tick. It grows with the token budget, which is why a very "
                             "large chunk can run out of memory."),
    ("mem_fraction_static", "SGLang's share of GPU memory for the weights and the KV cache; the rest is left for "
                            "activations and the runtime. Set here by kv_cache.gpu_memory_utilization (GPU memory "
                            "utilisation in the sidebar)."),
    ("Closed loop / sticky session", "Closed loop: a client sends its next request only after the reply to the "
                                     "previous one (plus a think time). Sticky session: a router sends every turn of "
                                     "a conversation to the same replica, where its earlier turns' KV is cached."),
)


def main() -> None:
    workshop.page_title("Glossary")
    show_link_notices()  # (the only page that said nothing of a link it could not use: ?preset=nope, ?q=...)
    st.caption("The terms the charts and lessons use. Hover or tap the (?) next to any control for its own definition.")
    for term, text in TERMS:
        st.markdown(f"**{term}.** {text}")
    article = load_article()
    st.subheader("Source article")
    st.markdown(f"“{article.title_en}” (“{article.title}”), {article.publisher}. Its sections, as the lessons cite them:")
    # (the English first, as `Article.cite` writes a section: a browser without a CJK font drew each line's start as
    # boxes, a review)
    st.text("\n".join(article.cite(ref) for ref in article.sections))


main()
