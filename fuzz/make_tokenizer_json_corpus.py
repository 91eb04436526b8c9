#!/usr/bin/env python3
"""make_tokenizer_json_corpus.py -- seeds of fuzz/tokenizer_json_fuzz.c.

    python3 fuzz/make_tokenizer_json_corpus.py

Writes fuzz/corpus/tokenizer_json/: the tiny tokenizer.json fixtures of
tests/fixtures/tokenizer/ (byte-level Qwen2 and GPT-2, Gemma's
SentencePiece-style shape; as they are, and minified with a text after a
NUL byte), and small byte-built files (the 256 byte letters
and a few merges, as pairs or strings; Qwen2's and GPT-2's pre-tokenizers;
a TemplateProcessing BOS) with edits the reader refuses.  Standard library
only.
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
out = os.path.join(here, "corpus", "tokenizer_json")
fixtures = os.path.join(root, "tests", "fixtures", "tokenizer")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def letters():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def small(pre="qwen2", pairs=True, post=None):
    let = letters()
    vocab = {let[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("hell", "o")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    added = [{"id": len(vocab), "content": "<|im_start|>", "special": True},
             {"id": len(vocab) + 1, "content": "<tool>", "special": False}]
    vocab["<|im_start|>"] = len(vocab)
    if pre == "qwen2":
        pt = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    else:
        pt = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": pt, "post_processor": post, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab,
                      "merges": [list(m) for m in merges] if pairs else [" ".join(m) for m in merges]}}


def main():
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for name in ("tiny-qwen2", "tiny-gpt2", "tiny-gemma"):
        with open(os.path.join(fixtures, name + ".tokenizer.json"), "rb") as f:
            data = f.read()
        seeds[name] = data
        seeds[name + "-min"] = (json.dumps(json.loads(data), ensure_ascii=False, separators=(",", ":")).encode()
                                + b"\0hello world <|im_start|>x <mask>  <sep> \xe4\xb8\xad")
    seeds["small-qwen2"] = json.dumps(small()).encode()
    seeds["small-gpt2-strings"] = json.dumps(small("gpt2", False), ensure_ascii=False).encode() + b"\0hello  world"
    bos = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                                    {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}}
    seeds["small-bos"] = json.dumps(small(post=bos)).encode()
    d = small()
    d["model"]["type"] = "Unigram"
    seeds["refused-unigram"] = json.dumps(d).encode()
    d = small()
    d["model"]["merges"].append(["q", "zz"])
    seeds["refused-merge"] = json.dumps(d).encode()
    d = small()
    d["model"]["vocab"]["he"] = 100000
    seeds["refused-id"] = json.dumps(d).encode()
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".json"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
