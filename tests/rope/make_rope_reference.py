#!/usr/bin/env python3
"""make_rope_reference.py -- writes tests/rope/reference/: RoPE fixtures made
by Hugging Face transformers' own code, for tests/rope/test_rope.c.

What comes from transformers itself (imported, not copied):
  - the frequency tables and attention factors: ROPE_INIT_FUNCTIONS
    ("linear", "dynamic", "yarn", "llama3") from transformers.modeling_rope_utils,
    and LlamaRotaryEmbedding.compute_default_rope_parameters for "default";
  - the rotations: apply_rotary_pos_emb / rotate_half of
    transformers.models.llama.modeling_llama (NEOX, whole width),
    apply_rotary_pos_emb of transformers.models.gpt_neox.modeling_gpt_neox
    (NEOX, partial width), and apply_rotary_pos_emb / rotate_every_two of
    transformers.models.gptj.modeling_gptj (interleaved), run on float64
    tensors;
  - GPT-J's own sin/cos table (create_sinusoidal_positions), checked against
    the table used here.

What this script does itself, and why:
  - cos and sin in float64.  HF's rotary modules force float32
    (LlamaRotaryEmbedding.forward: position_ids.float() * inv_freq.float()),
    and a float32 angle at position 10^5 is off by up to 4e-3 rad, so their
    output cannot be the float64 reference the test needs.  The three lines
    of that forward are repeated here in float64: freqs = p * inv_freq,
    emb = cat(freqs, freqs), cos = emb.cos() * attention_scaling (sin alike).
  - the float64 twin of each HF frequency function (twin_* below: HF's
    formula line by line in numpy float64), because HF's functions compute
    in float32 too.  Each twin is checked here against HF's own float32
    table to float32 accuracy ((ln(theta) + 2 factor + 8) units of 2^-24,
    relative; the measured worst case is printed), which any mistake in
    the formula would exceed by orders of magnitude.

Files, per case directory (all little-endian .npy):
  params.npy        float64 [17], the attn_rope_options of the case, in the
                    order PARAM_NAMES (also in config.json)
  x.npy             float32 [B, L, H, D] inputs, every value exact in
                    bfloat16 and float16 (8 significant bits, |x| in
                    [2^-6, 8]), so one input serves the three storage types
  positions.npy     int64 [B, L]
  hf_inv_freq.npy   float32 [F]  HF's own table
  inv_freq_f64.npy  float64 [F]  the float64 twin
  y_hf.npy          float64 [B, L, H, D]  HF's rotation with HF's table
  y_f64.npy         float64 [B, L, H, D]  HF's rotation with the twin table
  config.json       the HF config, the versions, the case's model

Rerun from the repository root (only PyPI is needed; torch is large):
    python3 -m venv /tmp/rope-venv
    /tmp/rope-venv/bin/pip install torch transformers numpy
    /tmp/rope-venv/bin/python tests/rope/make_rope_reference.py
The committed fixtures were made with the versions recorded in each
config.json.  The inputs come from a fixed seed, so a rerun with the same
versions rewrites the same bytes.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.gptj import modeling_gptj
from transformers.models.llama import modeling_llama

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")

# attn_rope.h's enums
NEOX, GPTJ = 0, 1
SCALING = {"default": 0, "linear": 1, "dynamic": 2, "yarn": 3, "llama3": 4}

PARAM_NAMES = [
    "head_dim", "pairing", "rotary_dim", "theta", "scaling", "factor",
    "original_max_position_embeddings", "seq_len", "beta_fast", "beta_slow",
    "mscale", "mscale_all_dim", "yarn_no_truncate", "low_freq_factor",
    "high_freq_factor", "attention_factor", "hf_attention_factor",
]

B, L, H = 2, 5, 3


# ---------------------------------------------------------------- the twins
def twin_default(theta, dim):
    return 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def twin(case, dim):
    p = case["rope"]
    kind = p["rope_type"]
    theta = p["rope_theta"]
    if kind == "default":
        return twin_default(theta, dim), 1.0
    if kind == "linear":
        return twin_default(theta, dim) / p["factor"], 1.0
    if kind == "dynamic":
        max_pos = case["max_position_embeddings"]
        seq_len = max(case["seq_len"], max_pos)
        factor = p["factor"]
        base = theta * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        return twin_default(base, dim), 1.0
    if kind == "yarn":
        factor = p["factor"]
        original = p["original_max_position_embeddings"]

        def get_mscale(scale, mscale=1):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
        attention_factor = p.get("attention_factor")
        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
            else:
                attention_factor = get_mscale(factor)
        beta_fast = p.get("beta_fast") or 32
        beta_slow = p.get("beta_slow") or 1

        def correction_dim(rotations):
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if p.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extrapolation = twin_default(theta, dim)
        interpolation = extrapolation / factor
        extrapolation_factor = 1 - ramp
        return (interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor,
                attention_factor)
    if kind == "llama3":
        w = twin_default(theta, dim)
        factor, low_ff, high_ff = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
        original = p["original_max_position_embeddings"]
        low_wavelen, high_wavelen = original / low_ff, original / high_ff
        wavelen = 2 * math.pi / w
        w_llama = np.where(wavelen > low_wavelen, w / factor, w)
        smooth = (original / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * w_llama / factor + smooth * w_llama
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, w_llama), 1.0
    raise ValueError(kind)


# ------------------------------------------------------------------ the cases
# Each: the model it stands for, HF's rope parameters, the head width and
# rotary width, the pairing, and the positions of the two batch rows.
LONG = [[0, 1, 2, 3, 4], [1000, 4095, 8191, 32767, 131071]]
CASES = [
    dict(name="qwen25_neox", model="Qwen2.5: NEOX, theta 1e6, whole width",
         rope={"rope_type": "default", "rope_theta": 1e6}, head_dim=128, rotary_dim=128,
         pairing=NEOX, positions=LONG),
    dict(name="llama31_llama3", model="Llama 3.1: llama3 scaling, factor 8, bands 1 and 4, original 8192",
         rope={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
         head_dim=128, rotary_dim=128, pairing=NEOX, positions=LONG),
    dict(name="qwen25_yarn", model="Qwen2.5 long context: YaRN factor 4, original 32768, theta 1e6",
         rope={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
               "original_max_position_embeddings": 32768},
         head_dim=128, rotary_dim=128, pairing=NEOX, max_position_embeddings=131072, positions=LONG),
    dict(name="gptoss_yarn", model="gpt-oss: YaRN factor 32, original 4096, theta 150000, truncate false",
         rope={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
               "original_max_position_embeddings": 4096, "truncate": False},
         head_dim=64, rotary_dim=64, pairing=NEOX, max_position_embeddings=131072, positions=LONG),
    dict(name="deepseek_yarn", model="DeepSeek-V3's YaRN: factor 40, original 4096, mscale = mscale_all_dim = 1",
         rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
               "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
         head_dim=64, rotary_dim=64, pairing=NEOX, max_position_embeddings=163840, positions=LONG),
    dict(name="gptj_partial", model="GPT-J 6B: interleaved, rotary_dim 64 of 256, theta 1e4",
         rope={"rope_type": "default", "rope_theta": 10000.0}, head_dim=256, rotary_dim=64,
         pairing=GPTJ, max_position_embeddings=2048, positions=[[0, 1, 2, 3, 4], [7, 100, 511, 1024, 2047]]),
    dict(name="linear2", model="linear scaling (position interpolation), factor 2, theta 1e4",
         rope={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, head_dim=64, rotary_dim=64,
         pairing=NEOX, positions=[[0, 1, 2, 3, 4], [5, 17, 113, 1000, 8191]]),
    dict(name="dynamic_partial", model="dynamic NTK, factor 2, max 2048, at seq_len 8192; NEOX on half the width",
         rope={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0, "partial_rotary_factor": 0.5},
         head_dim=64, rotary_dim=32, pairing=NEOX, max_position_embeddings=2048, seq_len=8192,
         positions=[[0, 1, 2, 3, 4], [100, 2047, 2048, 4000, 8191]]),
]


def hf_table(case):
    """HF's own float32 inv_freq and attention factor for the case."""
    config = LlamaConfig(hidden_size=case["head_dim"] * 2, num_attention_heads=2, head_dim=case["head_dim"],
                         max_position_embeddings=case.get("max_position_embeddings", 131072),
                         rope_parameters=dict(case["rope"]))
    kind = case["rope"]["rope_type"]
    if kind == "default":
        if case["rotary_dim"] != case["head_dim"]:
            # GPT-J rotates rotary_dim widths with its own table over them.
            config.head_dim = case["rotary_dim"]
        inv_freq, attention_factor = modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        kwargs = {"seq_len": case["seq_len"]} if kind == "dynamic" else {}
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu", **kwargs)
    assert inv_freq.dtype == torch.float32 and inv_freq.numel() == case["rotary_dim"] // 2
    return inv_freq.numpy(), float(attention_factor), config


def hf_rotate(case, x, positions, inv_freq, attention_factor):
    """HF's rotation of x [B, L, H, D] (float64) at positions [B, L]."""
    xt = torch.from_numpy(x)
    freqs = torch.from_numpy(positions).double()[..., None] * torch.from_numpy(inv_freq)[None, None, :]
    if case["pairing"] == GPTJ:
        sin, cos = freqs.sin(), freqs.cos()  # GPT-J's layout: [B, L, R/2], repeated inside
        r = case["rotary_dim"]
        x_rot = modeling_gptj.apply_rotary_pos_emb(xt[..., :r], sin, cos)
        return torch.cat([x_rot, xt[..., r:]], dim=-1).numpy()
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor
    if case["rotary_dim"] == case["head_dim"]:
        y, _ = modeling_llama.apply_rotary_pos_emb(xt, xt, cos, sin, unsqueeze_dim=2)
    else:
        y, _ = modeling_gpt_neox.apply_rotary_pos_emb(xt, xt, cos, sin, unsqueeze_dim=2)
    return y.numpy()


def storable_inputs(rng, shape):
    """Normal values with 8 significant bits and |x| in [2^-6, 8]: exact in bfloat16 and float16."""
    x = rng.standard_normal(shape)
    x = np.sign(x) * np.clip(np.abs(x), 2.0 ** -6, 8.0)
    mantissa, exponent = np.frexp(x)
    x = np.ldexp(np.round(mantissa * 256) / 256, exponent)
    return x.astype(np.float32)


def main():
    rng = np.random.default_rng(20240610)
    os.makedirs(OUT, exist_ok=True)
    for case in CASES:
        name = case["name"]
        d, r = case["head_dim"], case["rotary_dim"]
        positions = np.array(case["positions"], dtype=np.int64)
        x = storable_inputs(rng, (B, L, H, d))
        inv_hf, factor_hf, config = hf_table(case)
        inv_twin, factor_twin = twin(case, r)

        # The twin against HF: float32 accuracy.
        p = case["rope"]
        rel = np.max(np.abs(inv_twin - inv_hf.astype(np.float64)) / inv_twin)
        bound = (math.log(p["rope_theta"]) + 2 * p.get("factor", 1.0) + 8) * 2.0 ** -24
        assert rel <= bound, f"{name}: twin table off HF's by {rel:.3g} > {bound:.3g}"
        assert abs(factor_twin - factor_hf) <= 1e-15 * factor_hf, (name, factor_twin, factor_hf)

        if case["pairing"] == GPTJ:
            # GPT-J's own float32 sin/cos table at the fixture's positions.
            table = modeling_gptj.create_sinusoidal_positions(int(positions.max()) + 1, r).double()
            sin_gptj, cos_gptj = table[positions.ravel(), : r // 2], table[positions.ravel(), r // 2:]
            angles = torch.from_numpy(positions.ravel()).double()[:, None] * torch.from_numpy(inv_hf).double()
            # float32 angle: p * w rounded, then sin/cos rounded
            slack = angles.abs() * 2.0 ** -23 + 2.0 ** -23
            assert torch.all((sin_gptj - angles.sin()).abs() <= slack), name
            assert torch.all((cos_gptj - angles.cos()).abs() <= slack), name

        x64 = x.astype(np.float64)
        y_hf = hf_rotate(case, x64, positions, inv_hf.astype(np.float64), factor_hf)
        y_f64 = hf_rotate(case, x64, positions, inv_twin, factor_twin)
        # The tail passes through HF's code unchanged.
        assert np.array_equal(y_hf[..., r:], x64[..., r:]), name

        params = dict(head_dim=d, pairing=case["pairing"], rotary_dim=r, theta=p["rope_theta"],
                      scaling=SCALING[p["rope_type"]], factor=p.get("factor", 0.0),
                      original_max_position_embeddings=p.get("original_max_position_embeddings",
                                                             case.get("max_position_embeddings", 0)
                                                             if p["rope_type"] == "dynamic" else 0),
                      seq_len=case.get("seq_len", 0), beta_fast=p.get("beta_fast") or 0.0,
                      beta_slow=p.get("beta_slow") or 0.0, mscale=p.get("mscale") or 0.0,
                      mscale_all_dim=p.get("mscale_all_dim") or 0.0,
                      yarn_no_truncate=0 if p.get("truncate", True) else 1,
                      low_freq_factor=p.get("low_freq_factor", 0.0), high_freq_factor=p.get("high_freq_factor", 0.0),
                      attention_factor=0.0, hf_attention_factor=factor_hf)
        directory = os.path.join(OUT, name)
        os.makedirs(directory, exist_ok=True)
        np.save(os.path.join(directory, "params.npy"), np.array([params[k] for k in PARAM_NAMES], dtype=np.float64))
        np.save(os.path.join(directory, "x.npy"), x)
        np.save(os.path.join(directory, "positions.npy"), positions)
        np.save(os.path.join(directory, "hf_inv_freq.npy"), inv_hf)
        np.save(os.path.join(directory, "inv_freq_f64.npy"), inv_twin)
        np.save(os.path.join(directory, "y_hf.npy"), y_hf)
        np.save(os.path.join(directory, "y_f64.npy"), y_f64)
        record = dict(model=case["model"], hf_rope_parameters=config.rope_parameters,
                      hf_max_position_embeddings=config.max_position_embeddings,
                      head_dim=d, rotary_dim=r, pairing=["neox", "gptj"][case["pairing"]],
                      params_order=PARAM_NAMES, params=params,
                      twin_vs_hf_inv_freq_max_rel=float(rel),
                      versions=dict(python=sys.version.split()[0], torch=torch.__version__,
                                    transformers=transformers.__version__, numpy=np.__version__))
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(record, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"{name:16s} twin vs HF inv_freq: max rel {rel:.2e} (bound {bound:.2e}), "
              f"attention factor {factor_hf:.6f}, positions up to {positions.max()}")


if __name__ == "__main__":
    main()
