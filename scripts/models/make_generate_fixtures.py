#!/usr/bin/env python3
"""make_generate_fixtures.py — the reference tokens tests/model/test_generate.c
compares attn's greedy generation with: Hugging Face transformers running the
three real GGUF models (Qwen2.5, Gemma 3, SmolLM2: arch llama) in float32 with
eager attention.

    HF_HUB_OFFLINE=1 /tmp/model-venv/bin/python scripts/models/make_generate_fixtures.py \
        [--models DIR] [--out tests/fixtures/generate]

(the venv as in make_decoder_fixtures.py: torch, transformers, gguf, accelerate.)

For each model and prompt it tokenizes the text with transformers' tokenizer
built from the GGUF (Gemma's gets BOS 2 first, as that tokenizer adds it), then
generates NEW tokens greedily with model.generate(do_sample=False,
max_new_tokens=NEW, min_new_tokens=NEW): argmax of the logits at every step,
through transformers' own KV cache, EOS never ending the run early (min_new_tokens
masks it, so a prompt whose continuation wants EOS would be distorted: the
script fails instead if EOS is the unmasked argmax at any step, checked by the
full forward below).  It also runs one full forward over prompt + generated
tokens (no cache) and checks that every generated token is that forward's
argmax, and records the gap between the two largest logits at each step (how
close the run came to a tie that float rounding could flip).

It writes OUT/<arch>.txt, one line per prompt:
    <key> <prompt ids, comma-separated> | <generated ids, comma-separated> | <min gap>
and OUT/README.txt with the versions and the texts.  CI never runs this.
"""
import argparse
import os
import sys

QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
SMOLLM2 = "smollm2-135m-instruct-q4_1.gguf"
NEW = 20
PROMPTS = [
    ("computer", "这台电脑来自苹果"),
    ("apple", "我吃了一个苹果"),
    ("en", "The capital of France is"),
]
MODELS = {"qwen2": QWEN, "gemma3": GEMMA, "llama": SMOLLM2}


def run_model(path, arch, out_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    lines, texts = [], []
    for key, text in PROMPTS:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                                 pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0)
            new = out[0, len(ids):].tolist()
            logits = model(torch.tensor([ids + new]), use_cache=False).logits[0]
        gaps = []
        for i, t in enumerate(new):
            row = logits[len(ids) - 1 + i]
            top2 = torch.topk(row, 2)
            if int(top2.indices[0]) != t:
                sys.exit(f"{arch} {key}: step {i}: generate chose {t}, the full forward's argmax is "
                         f"{int(top2.indices[0])}")
            if int(top2.indices[0]) in eos:
                sys.exit(f"{arch} {key}: step {i}: EOS is the argmax; choose another prompt")
            gaps.append(float(top2.values[0] - top2.values[1]))
        lines.append(f"{key} {','.join(map(str, ids))} | {','.join(map(str, new))} | {min(gaps):.4f}")
        texts.append(f"{arch}/{key}: {text!r} -> {ids} -> {tok.decode(new)!r}")
        print(lines[-1], "#", texts[-1], flush=True)
    with open(os.path.join(out_dir, f"{arch}.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return texts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=os.environ.get("ATTN_MODEL_DIR", os.path.expanduser("~/.cache/attn/models")))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "generate"))
    p.add_argument("--only", choices=sorted(MODELS), help="one model only")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gguf  # noqa: F401  (transformers needs it for GGUF files)
    import torch
    import transformers

    os.makedirs(args.out, exist_ok=True)
    texts = []
    for arch, name in MODELS.items():
        if args.only and arch != args.only:
            continue
        texts += run_model(os.path.join(args.models, name), arch, args.out)
    with open(os.path.join(args.out, "README.txt" if not args.only else f"README.{args.only}.txt"), "w",
              encoding="utf-8") as f:
        f.write(f"made by scripts/models/make_generate_fixtures.py with torch {torch.__version__}, "
                f"transformers {transformers.__version__}: greedy, {NEW} new tokens, float32, eager attention\n"
                "each line of <arch>.txt: key, prompt ids | generated ids | smallest top-1 minus top-2 logit gap\n\n"
                + "\n".join(texts) + "\n")


if __name__ == "__main__":
    main()
