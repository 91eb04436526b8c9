#!/usr/bin/env python3
"""make_trace_fixtures.py — the reference numbers for zero-ablating attention
heads in a real model (tests/interp/test_model_interp.c): Hugging Face
transformers running Gemma 3 270M's GGUF in float32 (eager attention), with
one head's slice of o_proj's input (that head's z, TransformerLens's
blocks.L.attn.hook_z[:, :, h]) set to zero by a forward pre-hook.

    HF_HUB_OFFLINE=1 /tmp/model-venv/bin/python scripts/models/make_trace_fixtures.py \
        [--models DIR] [--out tests/fixtures/trace]

Writes OUT/gemma3_<case>_{top_ids,top_logits}.npy: the TOP largest logits
at the last position (int64 / float32 [TOP]) for the clean run ("clean")
and for each ablation in ABLATIONS ("L<layer>H<head>"), and OUT/README.txt.
"""
import argparse
import os

import numpy as np

GEMMA = "gemma-3-270m-q4_k_m.gguf"
# "The capital of France is" with BOS, as tests/fixtures/decoder has it.
IDS = [2, 818, 5279, 529, 7001, 563]
# (layer, head): a local layer and the first global one (Gemma 3 270M: 4 heads).
ABLATIONS = [(3, 1), (5, 0), (5, 2)]
TOP = 10


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=os.environ.get("ATTN_MODEL_DIR", os.path.expanduser("~/.cache/attn/models")))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "trace"))
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.models, gguf_file=GEMMA, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    dh = model.config.head_dim
    os.makedirs(args.out, exist_ok=True)
    lines = [f"made by scripts/models/make_trace_fixtures.py with torch {torch.__version__}, "
             f"transformers {transformers.__version__}; {GEMMA}, ids {IDS}, float32 eager", ""]

    def run(case, hook_layer=None, head=None):
        handle = None
        if hook_layer is not None:
            def zero_head(module, inputs):
                x = inputs[0].clone()
                x[..., head * dh:(head + 1) * dh] = 0
                return (x,)
            handle = model.model.layers[hook_layer].self_attn.o_proj.register_forward_pre_hook(zero_head)
        with torch.no_grad():
            logits = model(torch.tensor([IDS]), use_cache=False).logits[0, -1].numpy()
        if handle:
            handle.remove()
        top = np.argsort(-logits, kind="stable")[:TOP].astype(np.int64)
        np.save(os.path.join(args.out, f"gemma3_{case}_top_ids.npy"), top)
        np.save(os.path.join(args.out, f"gemma3_{case}_top_logits.npy"), logits[top].astype(np.float32))
        lines.append(f"{case}: top {top[:3].tolist()} logits {logits[top[:3]].tolist()}")
        print(lines[-1], flush=True)

    run("clean")
    for layer, head in ABLATIONS:
        run(f"L{layer}H{head}", layer, head)
    with open(os.path.join(args.out, "README.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
