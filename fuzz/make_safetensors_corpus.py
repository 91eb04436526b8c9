#!/usr/bin/env python3
"""make_safetensors_corpus.py — the seeds of fuzz/safetensors_fuzz.c
(fuzz/corpus/safetensors/) and fuzz/model_config_fuzz.c (fuzz/corpus/config/).

    /tmp/model-venv/bin/python fuzz/make_safetensors_corpus.py

The seeds are kept in the repository; this script says how they were made.
safetensors seeds are one byte choosing the parser (0: an image, 1: an
index) and then the bytes: small files written by the safetensors package
itself (real), files built byte by byte here with one flaw each, and the
tiny qwen3 checkpoint's index.  config seeds are the tiny models'
config.json files as transformers wrote them and edited copies.
"""
import json
import os
import struct

import numpy as np
from safetensors.numpy import save

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ST = os.path.join(HERE, "corpus", "safetensors")
CFG = os.path.join(HERE, "corpus", "config")


def put(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def image(header, data=b"", length=None):
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def entry(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


# Real: written by the safetensors package (its padding, its key order).
rng = np.random.default_rng(0)
put(ST, "real-f32-f16.st", b"\0" + save({"w": rng.standard_normal((3, 4)).astype(np.float32),
                                          "h": np.array([1.0, -2.5], dtype=np.float16)},
                                         metadata={"format": "pt"}))
put(ST, "real-mixed.st", b"\0" + save({"i": np.arange(3, dtype=np.int64), "b": np.array([True, False]),
                                       "s": np.array(3.0, dtype=np.float32), "e": np.zeros((0, 2), np.float32),
                                       "u": np.arange(4, dtype=np.uint8)}))
# Byte-built, each next to one check.
good = json.dumps({"__metadata__": {"k": "v"}, "a": entry("F32", [2], 0, 8), "b": entry("BF16", [1, 2], 8, 12)})
put(ST, "built-good.st", b"\0" + image(good, bytes(range(12))))
put(ST, "built-length-lies.st", b"\0" + image("{}", b"", length=1 << 40))
put(ST, "built-overlap.st", b"\0" + image(json.dumps({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}),
                                          bytes(8)))
put(ST, "built-gap.st", b"\0" + image(json.dumps({"a": entry("U8", [2], 0, 2), "b": entry("U8", [1], 3, 4)}), bytes(4)))
put(ST, "built-overflow.st", b"\0" + image(json.dumps({"a": entry("F64", [4294967296, 4294967296], 0, 8)}), bytes(8)))
put(ST, "built-dtype.st", b"\0" + image(json.dumps({"a": entry("Q4", [2], 0, 2)}), bytes(2)))
put(ST, "built-deep.st", b"\0" + image(json.dumps({"a": entry("U8", [1] * 9, 0, 1)}), bytes(1)))
put(ST, "built-duplicate.st", b"\0" + image('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                            '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2)))
put(ST, "built-padded.st", b"\0" + image(json.dumps({"a": entry("F16", [], 0, 2)}) + "      ", bytes(2)))
put(ST, "built-bad-json.st", b"\0" + image('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,', bytes(4)))
# Indexes.
with open(os.path.join(ROOT, "tests/fixtures/tiny_models/qwen3/model.safetensors.index.json"), "rb") as f:
    put(ST, "index-qwen3.json", b"\1" + f.read())
put(ST, "index-climbs.json", b"\1" + json.dumps({"weight_map": {"a": "../x.safetensors", "b": "y"}}).encode())
put(ST, "index-types.json", b"\1" + json.dumps({"weight_map": {"a": 1, "": "y"}}).encode())

# config.json: as written, and edited.
for name in ("qwen3", "qwen2", "gemma3", "llama"):
    with open(os.path.join(ROOT, "tests/fixtures/tiny_models", name, "config.json"), "rb") as f:
        text = f.read()
    put(CFG, f"{name}.json", text)
    c = json.loads(text)
    if name == "gemma3":
        old = dict(c)
        for k in ("rope_parameters", "layer_types", "_sliding_window_pattern"):
            old.pop(k, None)
        old.update(rope_theta=1e6, rope_local_base_freq=1e4, sliding_window_pattern=6, model_type="gemma3_text")
        put(CFG, "gemma3-old-keys.json", json.dumps(old).encode())
    if name == "llama":
        c.update(rope_parameters={"rope_type": "llama3", "factor": 8.0}, attention_bias=True)
        put(CFG, "llama-refused.json", json.dumps(c).encode())
    if name == "qwen3":
        c.update(layer_types=["sliding_attention"] * c["num_hidden_layers"], sliding_window=2,
                 hidden_size=2**40, vocab_size=2**31)
        put(CFG, "qwen3-edited.json", json.dumps(c).encode())
