#!/usr/bin/env python3
"""make_decoder_fixtures.py — the reference numbers tests/model/test_decoder.c
compares attn's decoder with: Hugging Face transformers running the two real
GGUF models in float32 with eager attention.

    python3 -m venv /tmp/model-venv
    /tmp/model-venv/bin/pip install torch transformers gguf accelerate numpy
    HF_HUB_OFFLINE=1 /tmp/model-venv/bin/python scripts/models/make_decoder_fixtures.py \
        [--models DIR] [--out tests/fixtures/decoder] [--check-ids]

transformers dequantizes the GGUF blocks with the gguf package, whose float32
results attn's reader reproduces bit for bit (docs/models.md), so both sides
run the same weights; what differs is only the order of float32 operations.

For each model and each fixed sequence of token ids below, it writes
OUT/<arch>/<seq>_<what>.npy:
  ids            int64 [L]
  hidden_norms   float32 [N + 1, L]       L2 norm of the residual stream: row 0
                                          the embeddings (Gemma's scaled), row
                                          l + 1 the output of layer l
  hidden_dims    int64 [K]                the K dimensions sliced below: evenly
                                          spaced ones and the 4 of largest |h|
  hidden_slice   float32 [N + 1, L, K]    the residual stream at those dims
  hidden_last    float32 [N + 1, d]       the last position, every dim (only for
                                          the sequences in FULL_LAST)
  attn_layers    int64 [A]
  attn           float32 [A, Hq, L, L]    those layers' attention weights
  top_ids        int64 [L, 10]            the 10 largest logits at each position
  top_logits     float32 [L, 10]
and OUT/README.txt with the versions and the texts the ids came from.  Sizes
are kept to a few hundred KB in all.  --check-ids re-tokenizes the texts with
the GGUF's tokenizer (slow: ~20 s a model) and fails if an id changed.
"""
import argparse
import os
import sys

import numpy as np

QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"

# The ids, fixed here (the texts they tokenize to are for the reader and for
# --check-ids).  Gemma's start with BOS 2, as its tokenizer adds it.
SEQUENCES = {
    "qwen2": (QWEN, {
        "zh": ("我吃了一个苹果", [35946, 99405, 104059, 104167]),
        "en": ("The capital of France is", [785, 6722, 315, 9625, 374]),
        "code": ("def fibonacci(n):\n    if n < 2:\n        return n\n    return",
                 [750, 75698, 1445, 982, 262, 421, 308, 366, 220, 17, 510, 286, 470, 308, 198, 262, 470]),
    }),
    "gemma3": (GEMMA, {
        "zh": ("我吃了一个苹果", [2, 237169, 238606, 42607, 68004]),
        "en": ("The capital of France is", [2, 818, 5279, 529, 7001, 563]),
        "code": ("def fibonacci(n):\n    if n < 2:\n        return n\n    return",
                 [2, 2063, 10779, 78113, 236769, 236749, 1473, 107, 140, 584, 538, 655, 236743, 236778, 236787, 107,
                  144, 2060, 538, 107, 140, 2060]),
    }),
}
FULL_LAST = {"code"}
EVEN_DIMS = 12
TOP = 10


def attn_layers(n_layers, arch):
    # Gemma 3: the first local layer, the first global one (5) and the last
    # (global); Qwen: first, middle, last.
    if arch == "gemma3":
        return [0, 5, n_layers - 1]
    return [0, n_layers // 2, n_layers - 1]


def run_model(path, arch, seqs, out_dir, check_ids):
    import torch
    from transformers import AutoModelForCausalLM

    directory, name = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    if check_ids:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        for key, (text, ids) in seqs.items():
            got = tok(text)["input_ids"]
            if got != ids:
                sys.exit(f"{arch} {key}: the tokenizer gives {got}, the script has {ids}")
    inner = model.model
    layers = inner.layers
    n_layers = len(layers)
    os.makedirs(out_dir, exist_ok=True)
    for key, (text, ids) in seqs.items():
        captured = {}

        def keep(index):
            def hook(module, args, output):
                captured[index] = (output[0] if isinstance(output, tuple) else output).detach()[0].clone()
            return hook

        handles = [inner.embed_tokens.register_forward_hook(keep(0))]
        handles += [layer.register_forward_hook(keep(i + 1)) for i, layer in enumerate(layers)]
        with torch.no_grad():
            result = model(torch.tensor([ids]), output_attentions=True, use_cache=False)
        for h in handles:
            h.remove()
        hidden = torch.stack([captured[i] for i in range(n_layers + 1)]).numpy().astype(np.float32)  # [N+1, L, d]
        d = hidden.shape[2]
        even = [(j * d) // EVEN_DIMS for j in range(EVEN_DIMS)]
        largest = [int(i) for i in np.argsort(-np.abs(hidden).max(axis=(0, 1))) if int(i) not in even][:4]
        dims = np.array(sorted(even + largest), dtype=np.int64)
        which = attn_layers(n_layers, arch)
        attn = np.stack([result.attentions[l][0].numpy() for l in which]).astype(np.float32)
        logits = result.logits[0].numpy()
        top_ids = np.argsort(-logits, axis=1, kind="stable")[:, :TOP].astype(np.int64)
        top_logits = np.take_along_axis(logits, top_ids, axis=1).astype(np.float32)
        arrays = {
            "ids": np.array(ids, dtype=np.int64),
            "hidden_norms": np.linalg.norm(hidden.astype(np.float64), axis=2).astype(np.float32),
            "hidden_dims": dims,
            "hidden_slice": np.ascontiguousarray(hidden[:, :, dims]),
            "attn_layers": np.array(which, dtype=np.int64),
            "attn": attn,
            "top_ids": top_ids,
            "top_logits": top_logits,
        }
        if key in FULL_LAST:
            arrays["hidden_last"] = np.ascontiguousarray(hidden[:, -1, :])
        for what, a in arrays.items():
            np.save(os.path.join(out_dir, f"{key}_{what}.npy"), a)
        print(f"{arch} {key}: {len(ids)} tokens, next token {top_ids[-1, 0]} (logit {top_logits[-1, 0]:.4f})",
              flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=os.environ.get("ATTN_MODEL_DIR", os.path.expanduser("~/.cache/attn/models")))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "decoder"))
    p.add_argument("--check-ids", action="store_true")
    p.add_argument("--only", choices=sorted(SEQUENCES), help="one model only")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gguf  # noqa: F401  (transformers needs it for GGUF files)

    for arch, (name, seqs) in SEQUENCES.items():
        if args.only and arch != args.only:
            continue
        run_model(os.path.join(args.models, name), arch, seqs, os.path.join(args.out, arch), args.check_ids)
    write_readme(args.out)


def write_readme(out):
    import torch
    import transformers
    from importlib.metadata import version

    lines = [f"made by scripts/models/make_decoder_fixtures.py with torch {torch.__version__}, "
             f"transformers {transformers.__version__}, gguf {version('gguf')}, numpy {np.__version__}",
             "float32, attn_implementation=eager; every file is described in the script's docstring", ""]
    for arch, (name, seqs) in SEQUENCES.items():
        for key, (text, ids) in seqs.items():
            lines.append(f"{arch}/{key} ({name}): {text!r} -> {ids}")
    with open(os.path.join(out, "README.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
