"""TransformerLens's habits on attn.Model (issue 36): cfg, to_tokens and
friends, readable pieces, batches equal to single runs, names_filter globs,
ActivationCache's helpers checked against the identities TransformerLens
documents (decompose_resid sums to the residual stream, apply_ln_to_stack
is the final norm up to its weight).  On the real GGUF models; skipped,
saying so, where they are absent (test_model.py's rule)."""

import numpy as np
import pytest

import attn
from attn._lens import byte_level_spelling, get_act_name, readable_piece
from test_model import GEMMA_FRANCE, GEMMA_ITALY, model


def test_get_act_name_is_transformer_lens():
    assert get_act_name("pattern", 3) == "blocks.3.attn.hook_pattern"
    assert get_act_name("attn", 0) == "blocks.0.attn.hook_pattern"
    assert get_act_name("resid_pre", 0) == "blocks.0.hook_resid_pre"
    assert get_act_name("z", 2) == "blocks.2.attn.hook_z"
    assert get_act_name("post", 1) == "blocks.1.mlp.hook_post"
    assert get_act_name("scale", 4, "ln2") == "blocks.4.ln2.hook_scale"
    assert get_act_name("normalized") == "ln_final.hook_normalized"
    assert get_act_name("embed") == "hook_embed"
    with pytest.raises(ValueError):
        get_act_name("pattern")


def test_pieces_are_readable():
    assert byte_level_spelling("公司") == "åħ¬åı¸"
    assert readable_piece("èĭ¹æŀľ", "bpe") == "苹果"
    assert readable_piece("Ġthe", "bpe") == " the"
    assert readable_piece("<|im_start|>", "bpe") == "<|im_start|>"
    assert readable_piece("▁the", "spm") == " the"
    assert readable_piece("<0x41>", "spm") == "A"
    assert readable_piece("è", "bpe") == "\\xe8"  # a byte inside a character, not mojibake


def test_cfg_and_tokens():
    m = model("qwen2")
    c, cfg = m.config, m.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_key_value_heads, cfg.d_head, cfg.d_vocab, cfg.d_mlp) == \
        (c["n_layers"], c["d_model"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["vocab"], c["d_ffn"])
    assert cfg["n_layers"] == cfg.n_layers and cfg.normalization_type == "RMS"
    company = m.find_token("公司")
    assert company >= 0 and company == m.find_token("åħ¬åı¸") and m.piece_text(company) == "公司"
    assert m.to_str_tokens("苹果公司") == m.to_str_tokens(m.tokenize("苹果公司"))
    assert "".join(m.to_str_tokens("苹果公司")) == "苹果公司"
    assert m.to_single_token("公司") == company
    with pytest.raises(ValueError, match="not one"):
        m.to_single_token("苹果公司的电脑")
    texts = ["我吃了一个苹果", "hi"]
    right = m.to_tokens(texts)
    left = m.to_tokens(texts, padding_side="left")
    assert right.shape == left.shape == (2, m.tokenize(texts[0]).size)
    n = m.tokenize("hi").size
    assert list(right[1, :n]) == list(m.tokenize("hi")) and list(left[1, -n:]) == list(m.tokenize("hi"))
    assert m.to_string(right[0]) == texts[0] and m.to_string(left)[1].endswith("hi")


@pytest.mark.parametrize("side", ["right", "left"])
def test_batch_equals_each_sequence_alone(side):
    m = model("gemma3")
    texts = ["The capital of France is", "我吃了一个苹果，因为", "Hi"]
    tokens = m.to_tokens(texts, padding_side=side)
    logits, cache = m.run_with_cache(tokens, padding_side=side,
                                     names_filter=["blocks.*.attn.hook_pattern", "blocks.3.hook_resid_post"])
    assert logits.shape == (3, tokens.shape[1], m.cfg.d_vocab)
    assert set(cache) == {f"blocks.{l}.attn.hook_pattern" for l in range(m.cfg.n_layers)} | \
        {"blocks.3.hook_resid_post"}
    for b, text in enumerate(texts):
        alone_logits, alone = m.run_with_cache(text)
        n = alone_logits.shape[1]
        at = slice(tokens.shape[1] - n, None) if side == "left" else slice(0, n)
        np.testing.assert_array_equal(logits[b, at], alone_logits[0])
        np.testing.assert_array_equal(cache["pattern", 2][b, :, at, at], alone["pattern", 2][0])
        np.testing.assert_array_equal(cache["blocks.3.hook_resid_post"][b, at], alone["resid_post", 3][0])
    # texts directly, and an explicit attention mask, give the same batch
    again = m.run_with_hooks(texts, padding_side=side)
    np.testing.assert_array_equal(again, logits)
    mask = np.zeros(tokens.shape, dtype=bool)
    for b, text in enumerate(texts):
        n = m.tokenize(text).size
        start = tokens.shape[1] - n if side == "left" else 0
        mask[b, start:start + n] = True
    np.testing.assert_array_equal(m.run_with_hooks(tokens, attention_mask=mask), logits)


def test_loss_is_mean_next_token_cross_entropy():
    m = model("gemma3")
    logits, loss = m.run_with_hooks(GEMMA_FRANCE, return_type="both")
    row = logits[0, :-1].astype(np.float64)
    lse = np.log(np.exp(row - row.max(-1, keepdims=True)).sum(-1)) + row.max(-1)
    want = float(np.mean(lse - row[np.arange(len(GEMMA_FRANCE) - 1), GEMMA_FRANCE[1:]]))
    assert abs(loss - want) < 1e-9 and m.run_with_hooks(GEMMA_FRANCE, return_type="loss") == loss
    assert m.run_with_hooks(GEMMA_FRANCE, return_type=None) is None
    # a batch's loss is the mean over every real token of every sequence
    batch = m.run_with_hooks([GEMMA_FRANCE, GEMMA_FRANCE[:3]], return_type="loss")
    short = m.run_with_hooks(GEMMA_FRANCE[:3], return_type="loss")
    assert abs(batch - (5 * loss + 2 * short) / 7) < 1e-9


def test_activation_cache_helpers():
    m = model("gemma3")
    N = m.cfg.n_layers
    logits, cache = m.run_with_cache(GEMMA_FRANCE)
    assert isinstance(cache, attn.ActivationCache)
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    # decompose_resid: embed + every attn_out and mlp_out = the final residual stream
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels[0] == "embed" and labels[1:3] == ["0_attn_out", "0_mlp_out"] and len(labels) == 1 + 2 * N
    final = cache[f"blocks.{N - 1}.hook_resid_post"]
    np.testing.assert_allclose(parts.astype(np.float64).sum(0), final, rtol=1e-4,
                               atol=1e-4 * np.abs(final).max())
    mid = cache.decompose_resid(layer=3, mlp_input=True)
    np.testing.assert_allclose(mid.astype(np.float64).sum(0), cache["resid_mid", 3], rtol=1e-4,
                               atol=1e-4 * np.abs(cache["resid_mid", 3]).max())
    # accumulated_resid: each layer's resid_pre, then the final resid_post
    acc, labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    assert labels[:3] == ["0_pre", "0_mid", "1_pre"] and labels[-1] == "final_post" and len(acc) == 2 * N + 1
    np.testing.assert_array_equal(acc[2], cache["resid_pre", 1])
    assert cache.accumulated_resid(layer=2, pos_slice=-1).shape == (2, 1, 1, m.cfg.d_model)
    # apply_ln_to_stack: the final norm of the stream up to its weight, which
    # is the same for every position: normalized / (resid / scale) is constant down the rows
    normed = cache.apply_ln_to_stack(final[None])[0, 0].astype(np.float64)
    ratio = cache["ln_final.hook_normalized"][0] / normed
    np.testing.assert_allclose(ratio, np.broadcast_to(ratio[:1], ratio.shape), rtol=2e-3, atol=1e-3)
    assert cache.stack_activation("pattern").shape == (N, 1, m.cfg.n_heads, 6, 6)
    single = cache.remove_batch_dim()
    assert single["pattern", 0].shape == (m.cfg.n_heads, 6, 6)


def test_cache_to_torch(torch):
    m = model("gemma3")
    _, cache = m.run_with_cache(GEMMA_ITALY, names_filter="blocks.0.*")
    t = cache.to(torch)
    assert isinstance(t["pattern", 0], torch.Tensor) and set(t) == set(cache)
    assert all(name.startswith("blocks.0.") for name in cache)


def test_weights_against_the_forward():
    """W_E, W_Q, b_Q, W_O, W_U and the norms' weights, read from the file,
    recompute what the forward recorded: hook_embed, hook_q, hook_attn_out
    as the heads' results (Qwen2: no norm after attention), the logits; and
    logit_attrs of the decomposed stream add up to the logit difference."""
    m = model("qwen2")
    cfg = m.cfg
    ids = m.tokenize("苹果公司的电脑")
    logits, cache = m.run_with_cache(ids)
    W_E = m.W_E
    assert W_E.shape == (cfg.d_vocab, cfg.d_model)
    np.testing.assert_allclose(cache["hook_embed"][0], W_E[ids], rtol=1e-6, atol=1e-7)
    del W_E
    l = 2
    W_Q, b_Q = m.W_Q, m.b_Q
    assert W_Q.shape == (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head)
    assert m.W_K.shape == (cfg.n_layers, cfg.n_key_value_heads, cfg.d_model, cfg.d_head)
    x = cache["resid_pre", l][0].astype(np.float64)
    normed = x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.eps) * m.ln1_w[l]
    q = np.einsum("pd,hde->phe", normed, W_Q[l]) + b_Q[l]
    want = cache["q", l][0]
    np.testing.assert_allclose(q, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    results, labels = cache.stack_head_results(return_labels=True)
    assert results.shape == (cfg.n_layers * cfg.n_heads, 1, ids.size, cfg.d_model) and labels[1] == "L0H1"
    heads = results[l * cfg.n_heads:(l + 1) * cfg.n_heads].astype(np.float64).sum(0)
    out = cache["attn_out", l]
    np.testing.assert_allclose(heads, out, rtol=1e-4, atol=1e-4 * np.abs(out).max())
    final = cache["ln_final.hook_normalized"][0, -1].astype(np.float64)
    want = logits[0, -1]
    top, second = np.argsort(-want)[:2]
    W_U = m.W_U
    np.testing.assert_allclose(final @ W_U[:, [top, second]], want[[top, second]], rtol=1e-4, atol=1e-3)
    del W_U
    parts = cache.decompose_resid(apply_ln=True, pos_slice=-1)[:, 0, 0]  # [n, d] at the last position
    attrs = cache.logit_attrs(parts, int(top), int(second))
    assert attrs.shape == (1 + 2 * cfg.n_layers,)
    assert abs(attrs.sum() - (want[top] - want[second])) < 1e-3 * max(1.0, abs(want[top]))
