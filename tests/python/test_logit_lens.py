"""Model.logit_lens and Model.logit_attribution (attn_model_logit_lens and
attn_model_logit_attribution, issue 37) against transformers' own modules on
the tiny random checkpoints of tests/fixtures/tiny_models: the lens row
after layer l is lm_head(model.norm(hidden_states[l + 1])) at the position
(the last row: transformers' logits, its last hidden state being already
normed); each attribution term is computed here from transformers' hooked
per-layer outputs, o_proj's input and weight, the final norm and lm_head;
the terms add up to transformers' logit difference; and the calls agree
with the numpy path (ActivationCache.decompose_resid / stack_head_results
with logit_attrs).  Skips without transformers."""

from pathlib import Path

import numpy as np
import pytest

import attn
from conftest import close_to_largest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_models"
ARCHS = ["qwen2", "gemma3", "llama", "qwen3"]
#: float32 activations (ours and transformers') read in double: the pair's rounding
REL = 1e-4


def hf_run(tr, torch, path, ids):
    """transformers' float32 forward over ids: its output (hidden states
    and logits) and what each module saw: the final norm's input, each
    layer's attention and MLP contribution to the stream (Gemma 3: after
    its post norms), o_proj's input and output."""
    hf = tr.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    seen, handles = {}, []

    def keep(name, take):
        def hook(module, args, output):
            seen[name] = take(args, output).detach().numpy()[0].astype(np.float64)
        return hook

    for l, layer in enumerate(hf.model.layers):
        o_proj = layer.self_attn.o_proj
        post_attn = getattr(layer, "post_feedforward_layernorm", None) and layer.post_attention_layernorm
        pairs = [(o_proj, "z", lambda a, o: a[0]), (o_proj, "o", lambda a, o: o),
                 (post_attn or o_proj, "attn_out", lambda a, o: o),
                 (getattr(layer, "post_feedforward_layernorm", None) or layer.mlp, "mlp_out", lambda a, o: o)]
        for module, what, take in pairs:
            handles.append(module.register_forward_hook(keep(f"{l}.{what}", take)))
    handles.append(hf.model.norm.register_forward_hook(keep("final_in", lambda a, o: a[0])))
    with torch.no_grad():
        out = hf(torch.tensor(ids[None]), output_hidden_states=True)
    for h in handles:
        h.remove()
    return hf, out, seen


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("position", [-1, 2])
def test_logit_lens_is_transformers_norm_and_lm_head(transformers, torch, name, position):
    path = FIXTURES / name
    ids = np.load(path / "ref" / "a_ids.npy")
    ours = attn.Model(path)
    N = ours.cfg.n_layers
    lens = ours.logit_lens(ids, position)
    assert lens.shape == (N + 1, ours.cfg.d_vocab) and lens.dtype == np.float32
    hf, out, _ = hf_run(transformers, torch, path, ids)
    with torch.no_grad():
        for r in range(N):  # hidden_states[N] is already normed: the last row is the logits
            want = hf.lm_head(hf.model.norm(out.hidden_states[r][:, position])).numpy()[0]
            close_to_largest(lens[r], want, f"{name} lens row {r}", REL)
    close_to_largest(lens[N], out.logits[0, position].numpy(), f"{name} lens row {N} (the logits)", REL)
    np.testing.assert_allclose(lens[N], ours.forward(ids).logits[position], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("position", [-1, 3])
def test_logit_attribution_is_transformers_terms(transformers, torch, name, position):
    """Every term from transformers' tensors, the final norm's scale frozen
    at the final stream's (and Gemma 3's post-attention norm's at the
    heads' sum); their total is transformers' logit difference."""
    path = FIXTURES / name
    ids = np.load(path / "ref" / "a_ids.npy")
    ours = attn.Model(path)
    cfg = ours.cfg
    N, H, Dh, d = cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_model
    gemma = name == "gemma3"
    hf, out, seen = hf_run(transformers, torch, path, ids)
    logits = out.logits[0, position].numpy().astype(np.float64)
    token, wrong = (int(t) for t in np.argsort(-logits)[:2])
    p = lambda t: t.detach().numpy().astype(np.float64)
    eps = hf.config.rms_norm_eps
    rms = lambda x: np.sqrt((x * x).mean() + eps)
    x_final = seen["final_in"][position]
    w_final = p(hf.model.norm.weight) + gemma
    W_U = p(hf.lm_head.weight)
    for other in (wrong, None):
        got = ours.logit_attribution(ids, token, other, position)
        assert set(got) == {"embed", "attn", "mlp", "heads"}
        assert got["attn"].shape == got["mlp"].shape == (N,) and got["heads"].shape == (N, H)
        u = w_final * (W_U[token] - (W_U[other] if other is not None else 0)) / rms(x_final)
        embed = p(out.hidden_states[0][0, position]) @ u
        attn_terms = np.array([seen[f"{l}.attn_out"][position] @ u for l in range(N)])
        mlp_terms = np.array([seen[f"{l}.mlp_out"][position] @ u for l in range(N)])
        heads = np.empty((N, H))
        for l, layer in enumerate(hf.model.layers):
            o_proj = layer.self_attn.o_proj
            assert o_proj.bias is None  # the heads' outputs are the whole projection
            z = seen[f"{l}.z"][position].reshape(H, Dh)
            per_head = np.einsum("he,dhe->hd", z, p(o_proj.weight).reshape(d, H, Dh))  # [H, d]
            if gemma:  # post_attention_layernorm of the heads' sum, its scale frozen
                post = layer.post_attention_layernorm
                per_head = per_head * (p(post.weight) + 1) / rms(seen[f"{l}.o"][position])
            heads[l] = per_head @ u
        scale = max(abs(embed), np.abs(attn_terms).max(), np.abs(mlp_terms).max())
        assert abs(got["embed"] - embed) <= REL * scale, (got["embed"], embed)
        close_to_largest(got["attn"], attn_terms, f"{name} attn terms", REL)
        close_to_largest(got["mlp"], mlp_terms, f"{name} mlp terms", REL)
        close_to_largest(got["heads"], heads, f"{name} head terms", REL)
        close_to_largest(got["heads"].sum(1), got["attn"], f"{name} heads summed per layer", REL)
        total = got["embed"] + got["attn"].sum() + got["mlp"].sum()
        want = logits[token] - (logits[other] if other is not None else 0)
        assert abs(total - want) <= REL * max(1.0, abs(logits[token])), (total, want)


@pytest.mark.parametrize("name", ARCHS)
def test_logit_attribution_is_the_numpy_path(name):
    """The C call and ActivationCache's logit_attrs over decompose_resid
    (and over stack_head_results, where attn_out is the heads' plain sum:
    Gemma 3's post-attention norm is left to incl_remainder there)."""
    path = FIXTURES / name
    ids = np.load(path / "ref" / "a_ids.npy")
    m = attn.Model(path)
    N, H = m.cfg.n_layers, m.cfg.n_heads
    position, token, wrong = -2, 7, 11
    got = m.logit_attribution(ids, token, wrong, position)
    _, cache = m.run_with_cache(ids)
    parts = cache.decompose_resid(apply_ln=True, pos_slice=position)[:, 0, 0]  # [1 + 2N, d]
    attrs = cache.logit_attrs(parts, token, wrong)
    mine = np.concatenate([[got["embed"]], np.stack([got["attn"], got["mlp"]], 1).reshape(-1)])
    close_to_largest(mine, attrs, f"{name} embed, attn, mlp against logit_attrs", REL)
    if name != "gemma3":
        heads = cache.stack_head_results(apply_ln=True, pos_slice=position)[:, 0, 0]  # [N * H, d]
        close_to_largest(got["heads"], cache.logit_attrs(heads, token, wrong).reshape(N, H),
                         f"{name} heads against logit_attrs", REL)


def test_tokens_and_positions_are_checked():
    """Tokens as ids or as texts of one token; errors name the problem."""
    m = attn.Model(FIXTURES / "qwen2")  # a byte-level tokenizer: "a" is one token, "hello" five
    ids = np.load(FIXTURES / "qwen2" / "ref" / "a_ids.npy")
    a = m.to_single_token("a")
    by_text = m.logit_attribution(ids, "a", "b")
    by_id = m.logit_attribution(ids, a, m.to_single_token("b"))
    for key in ("attn", "mlp", "heads"):
        np.testing.assert_array_equal(by_text[key], by_id[key])
    assert by_text["embed"] == by_id["embed"]
    np.testing.assert_array_equal(m.logit_lens(ids[None]), m.logit_lens(ids))  # a batch of one
    np.testing.assert_array_equal(m.logit_lens("ab", 0), m.logit_lens(m.tokenize("ab"), -2))
    with pytest.raises(ValueError, match=r"token 'hello' is 5 tokens, not one"):
        m.logit_attribution(ids, "hello")
    with pytest.raises(ValueError, match=r"wrong 256 is outside the vocabulary \[0, 256\)"):
        m.logit_attribution(ids, a, 256)
    with pytest.raises(TypeError, match="token: a token id or a text that is one token"):
        m.logit_attribution(ids, 1.5)
    with pytest.raises(ValueError, match="position 7 is outside the run's 7 tokens"):
        m.logit_lens(ids, 7)
    with pytest.raises(ValueError, match="position -8 is outside the run's 7 tokens"):
        m.logit_attribution(ids, a, position=-8)
    with pytest.raises(ValueError, match="input: no tokens"):
        m.logit_lens(np.array([], dtype=np.int32))
