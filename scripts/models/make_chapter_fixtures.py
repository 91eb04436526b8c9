#!/usr/bin/env python3
"""make_chapter_fixtures.py — the reference numbers of `attn demo --model`
(tests/model/test_chapter_model.c): Hugging Face transformers running the two
real GGUF models in float32 with eager attention on the chapter's two
sentences, "我吃了一个苹果" and "这台电脑来自苹果".

    HF_HUB_OFFLINE=1 /tmp/model-venv/bin/python scripts/models/make_chapter_fixtures.py \
        [--models DIR] [--out tests/fixtures/chapter_model] [--only qwen2|gemma3]

(the venv of make_decoder_fixtures.py).  The sentences are tokenized here by
the GGUF's own tokenizer in transformers; the test checks that attn's
tokenizer gives the same ids.  Both sentences end with 苹果, one token.

For each model it writes OUT/<arch>/<what>.npy:
  eat_ids, computer_ids    int64 [L1], [L2]       the two sentences' ids
  cosine                   float64 [N + 2]        cos(h_eat, h_computer) of the
                                                  苹果 positions: row 0 the
                                                  embeddings, row l + 1 after
                                                  layer l, row N + 1 after the
                                                  final norm
  eat_apple_attn           float32 [N, Hq, L1]    every layer's and head's
  computer_apple_attn      float32 [N, Hq, L2]    attention row of 苹果
  eat_top_ids, ..._probs   int64 / float64 [5]    the 5 most likely next
  computer_top_ids, ...                           tokens after each sentence
  control_cosine, en_senses_cosine, en_control_cosine
                           float64 [N + 2]        the same cosine for PAIRS: the
                                                  same-sense control and the
                                                  English pair's two
and OUT/README.txt with the versions and the ids.  About 25 KB in all.
"""
import argparse
import os
import sys

import numpy as np

MODELS = {"qwen2": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}
SENTENCES = {"eat": "我吃了一个苹果", "computer": "这台电脑来自苹果"}
# The controls of the demo's §2 (tools/demo/model_chapter.c's pairs, in
# this order): the same sense of 苹果 with another verb, and a matched
# English pair ending in " bank", in two senses and in one.
PAIRS = {"control": ("我吃了一个苹果", "我买了一个苹果"),
         "en_senses": ("We sat on the grass by the river bank", "She paid the cash into the bank"),
         "en_control": ("She paid the cash into the bank", "She took the cash to the bank")}
TOP = 5


def run_model(path, arch, out_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    inner = model.model
    n_layers = len(inner.layers)
    os.makedirs(out_dir, exist_ok=True)
    apple = {}
    lines = []
    for key, text in SENTENCES.items():
        ids = tok(text)["input_ids"]
        captured = {}

        def keep(index):
            def hook(module, args, output):
                captured[index] = (output[0] if isinstance(output, tuple) else output).detach()[0].clone()
            return hook

        handles = [inner.embed_tokens.register_forward_hook(keep(0)), inner.norm.register_forward_hook(keep(n_layers + 1))]
        handles += [layer.register_forward_hook(keep(i + 1)) for i, layer in enumerate(inner.layers)]
        with torch.no_grad():
            result = model(torch.tensor([ids]), output_attentions=True, use_cache=False)
        for h in handles:
            h.remove()
        last = len(ids) - 1
        apple[key] = (ids[last], np.stack([captured[i][last].numpy().astype(np.float64) for i in range(n_layers + 2)]))
        rows = np.stack([result.attentions[l][0][:, last, :].numpy() for l in range(n_layers)]).astype(np.float32)
        logits = result.logits[0, last].numpy().astype(np.float64)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        top = np.argsort(-logits, kind="stable")[:TOP]
        np.save(os.path.join(out_dir, f"{key}_ids.npy"), np.array(ids, dtype=np.int64))
        np.save(os.path.join(out_dir, f"{key}_apple_attn.npy"), rows)
        np.save(os.path.join(out_dir, f"{key}_top_ids.npy"), top.astype(np.int64))
        np.save(os.path.join(out_dir, f"{key}_top_probs.npy"), probs[top])
        lines.append(f"{arch}/{key} ({name}): {text!r} -> {ids}; next {[int(i) for i in top]} "
                     f"{[tok.decode([int(i)]) for i in top]} {[round(float(p), 4) for p in probs[top]]}")
        print(lines[-1], flush=True)
    if apple["eat"][0] != apple["computer"][0]:
        sys.exit(f"{arch}: the sentences end in different tokens {apple['eat'][0]}, {apple['computer'][0]}")
    a, b = apple["eat"][1], apple["computer"][1]
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.save(os.path.join(out_dir, "cosine.npy"), cosine)
    lines.append(f"{arch} cosine: {' '.join(f'{c:.4f}' for c in cosine)}")
    print(lines[-1], flush=True)
    for key, (text_a, text_b) in PAIRS.items():
        streams = []
        for text in (text_a, text_b):
            ids = tok(text)["input_ids"]
            captured = {}
            handles = [inner.embed_tokens.register_forward_hook(keep(0)),
                       inner.norm.register_forward_hook(keep(n_layers + 1))]
            handles += [layer.register_forward_hook(keep(i + 1)) for i, layer in enumerate(inner.layers)]
            with torch.no_grad():
                model(torch.tensor([ids]), use_cache=False)
            for h in handles:
                h.remove()
            streams.append((ids[-1], np.stack([captured[i][-1].numpy().astype(np.float64)
                                               for i in range(n_layers + 2)])))
        if streams[0][0] != streams[1][0]:
            sys.exit(f"{arch} {key}: the sentences end in different tokens {streams[0][0]}, {streams[1][0]}")
        a, b = streams[0][1], streams[1][1]
        cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        np.save(os.path.join(out_dir, f"{key}_cosine.npy"), cosine)
        lines.append(f"{arch} {key} cosine ({text_a!r} / {text_b!r}): {' '.join(f'{c:.4f}' for c in cosine)}")
        print(lines[-1], flush=True)
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=os.environ.get("ATTN_MODEL_DIR", os.path.expanduser("~/.cache/attn/models")))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures",
                                                 "chapter_model"))
    p.add_argument("--only", choices=sorted(MODELS), help="one model only")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gguf  # noqa: F401  (transformers needs it for GGUF files)
    import torch
    import transformers
    from importlib.metadata import version

    lines = [f"made by scripts/models/make_chapter_fixtures.py with torch {torch.__version__}, "
             f"transformers {transformers.__version__}, gguf {version('gguf')}, numpy {np.__version__}",
             "float32, attn_implementation=eager; every file is described in the script's docstring", ""]
    for arch, name in MODELS.items():
        if args.only and arch != args.only:
            continue
        lines += run_model(os.path.join(args.models, name), arch, os.path.join(args.out, arch))
    with open(os.path.join(args.out, "README.txt" if not args.only else f"README.{args.only}.txt"), "w",
              encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
