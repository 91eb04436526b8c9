"""TransformerLens's hook points beyond the residual stream (issue 36 item 2)
and the weights and blocks of a Hugging Face checkpoint, against
transformers' own modules on the tiny random checkpoints of
tests/fixtures/tiny_models: the norms' hook_scale and hook_normalized,
mlp.hook_pre / hook_pre_linear / hook_post, attn.hook_result per head (and
their sum, the output projection's), hook_q_input / _k_input / _v_input,
and a write to hook_result against transformers with the same change made
at o_proj's input.  Every expected value is taken from transformers'
modules (forward hooks) or its weights, not from attn.  Skips without
transformers."""

from pathlib import Path

import numpy as np
import pytest

import attn
from conftest import close_to_largest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_models"
ARCHS = ["qwen2", "gemma3", "llama", "qwen3"]


def close(ours, theirs, what, rel=1e-5):
    close_to_largest(ours, theirs, what, rel)


def hf_run(tr, torch, path, ids, o_proj_pre=None):
    """transformers' float32 forward over ids, with what each module saw:
    {name: array} for the stream into each layer, the norms' outputs, the
    MLP's projections and o_proj's input and output; o_proj_pre(layer, z)
    may change o_proj's input."""
    model = tr.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    seen, handles = {}, []

    def keep(name, take):
        def hook(module, args, output):
            seen[name] = take(args, output).detach().numpy()[0].copy()
        return hook

    for l, layer in enumerate(model.model.layers):
        ln2 = getattr(layer, "pre_feedforward_layernorm", None) or layer.post_attention_layernorm
        pairs = [(layer.input_layernorm, "resid_pre", lambda a, o: a[0]),
                 (layer.input_layernorm, "ln1", lambda a, o: o),
                 (ln2, "resid_mid", lambda a, o: a[0]), (ln2, "ln2", lambda a, o: o),
                 (layer.mlp.gate_proj, "pre", lambda a, o: o), (layer.mlp.up_proj, "pre_linear", lambda a, o: o),
                 (layer.mlp.down_proj, "post", lambda a, o: a[0]),
                 (layer.self_attn.o_proj, "z", lambda a, o: a[0]), (layer.self_attn.o_proj, "o", lambda a, o: o)]
        for module, what, take in pairs:
            handles.append(module.register_forward_hook(keep(f"{l}.{what}", take)))
        if o_proj_pre is not None:
            handles.append(layer.self_attn.o_proj.register_forward_pre_hook(
                lambda module, args, l=l: (o_proj_pre(l, args[0]),)))
    handles.append(model.model.norm.register_forward_hook(keep("final", lambda a, o: o)))
    handles.append(model.model.norm.register_forward_hook(keep("final_in", lambda a, o: a[0])))
    with torch.no_grad():
        logits = model(torch.tensor(ids[None])).logits[0].numpy()
    for h in handles:
        h.remove()
    return model, seen, logits


@pytest.mark.parametrize("name", ARCHS)
def test_hooks_against_transformers(transformers, torch, name):
    path = FIXTURES / name
    ids = np.load(path / "ref" / "a_ids.npy")
    ours = attn.Model(path)
    cfg = ours.cfg
    _, cache = ours.run_with_cache(ids, remove_batch_dim=True)
    hf, seen, _ = hf_run(transformers, torch, path, ids)
    eps = hf.config.rms_norm_eps
    L, H, Hkv, Dh, d = ids.size, cfg.n_heads, cfg.n_key_value_heads, cfg.d_head, cfg.d_model
    assert len(ours.hook_names()) == 3 + 24 * cfg.n_layers
    for l in range(cfg.n_layers):
        b = f"blocks.{l}."
        for norm, stream in (("ln1", "resid_pre"), ("ln2", "resid_mid")):
            x = seen[f"{l}.{stream}"].astype(np.float64)
            close(cache[b + norm + ".hook_scale"], np.sqrt((x * x).mean(-1, keepdims=True) + eps), b + norm + " scale")
            close(cache[b + norm + ".hook_normalized"], seen[f"{l}.{norm}"], b + norm + " normalized")
        for hook in ("pre", "pre_linear", "post"):
            close(cache[b + "mlp.hook_" + hook], seen[f"{l}.{hook}"], b + "mlp.hook_" + hook)
        # Each head's result from transformers' z and o_proj's columns.
        z, W = seen[f"{l}.z"].reshape(L, H, Dh), hf.model.layers[l].self_attn.o_proj.weight.detach().numpy()
        want = np.einsum("lhe,dhe->lhd", z.astype(np.float64), W.reshape(d, H, Dh).astype(np.float64))
        result = cache[b + "attn.hook_result"]
        assert result.shape == (L, H, d)
        close(result, want, b + "attn.hook_result")
        close(result.astype(np.float64).sum(1), seen[f"{l}.o"], b + "attn.hook_result summed over heads")
        for which, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
            inputs = cache[f"{b}hook_{which}_input"]
            assert inputs.shape == (L, heads, d)
            np.testing.assert_array_equal(inputs, np.repeat(cache[b + "hook_resid_pre"][:, None], heads, 1))
    close(cache["ln_final.hook_normalized"], seen["final"], "ln_final.hook_normalized")
    x = seen["final_in"].astype(np.float64)
    close(cache["ln_final.hook_scale"], np.sqrt((x * x).mean(-1, keepdims=True) + eps), "ln_final.hook_scale")


@pytest.mark.parametrize("name", ARCHS)
def test_checkpoint_weights_and_blocks(transformers, torch, name):
    """W_E, W_Q, W_K, W_O, W_in, W_gate, W_out, b_Q, the norms' weights and
    W_U of a safetensors checkpoint in TransformerLens's shapes, from
    transformers' parameters; blocks[l] reads the same and names its hooks."""
    path = FIXTURES / name
    ours = attn.Model(path)
    cfg = ours.cfg
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    gemma = name == "gemma3"
    H, Hkv, Dh, d = cfg.n_heads, cfg.n_key_value_heads, cfg.d_head, cfg.d_model
    p = lambda t: t.detach().numpy().astype(np.float64)
    np.testing.assert_allclose(ours.W_E, p(hf.model.embed_tokens.weight), rtol=0, atol=0)
    np.testing.assert_allclose(ours.W_U, p(hf.lm_head.weight).T, rtol=0, atol=0)
    np.testing.assert_allclose(ours.ln_final_w, p(hf.model.norm.weight) + gemma, rtol=1e-7)
    W_Q, W_O, W_in = ours.W_Q, ours.W_O, ours.W_in
    assert W_Q.shape == (cfg.n_layers, H, d, Dh) and W_O.shape == (cfg.n_layers, H, Dh, d)
    for l, layer in enumerate(hf.model.layers):
        a = layer.self_attn
        np.testing.assert_array_equal(W_Q[l], p(a.q_proj.weight).reshape(H, Dh, d).transpose(0, 2, 1))
        np.testing.assert_array_equal(ours.W_K[l], p(a.k_proj.weight).reshape(Hkv, Dh, d).transpose(0, 2, 1))
        np.testing.assert_array_equal(W_O[l], p(a.o_proj.weight).reshape(d, H, Dh).transpose(1, 2, 0))
        np.testing.assert_array_equal(W_in[l], p(layer.mlp.up_proj.weight).T)
        bias = a.q_proj.bias
        want_b = p(bias).reshape(H, Dh) if bias is not None else np.zeros((H, Dh))
        np.testing.assert_array_equal(ours.b_Q[l], want_b)
        np.testing.assert_allclose(ours.ln1_w[l], p(layer.input_layernorm.weight) + gemma, rtol=1e-7)
    block = ours.blocks[1]
    np.testing.assert_array_equal(block.attn.W_Q, W_Q[1])
    np.testing.assert_array_equal(block.mlp.W_gate, ours.W_gate[1])
    np.testing.assert_array_equal(block.mlp.W_out, ours.W_out[1])
    np.testing.assert_array_equal(block.ln2.w, ours.ln2_w[1])
    assert block.attn.hook_pattern.name == "blocks.1.attn.hook_pattern"
    assert block.ln1.hook_scale.name == "blocks.1.ln1.hook_scale"
    assert block.hook_q_input.name == "blocks.1.hook_q_input"
    assert set(ours.hook_names()) >= {ours.blocks[l].mlp.hook_post.name for l in range(cfg.n_layers)}
    with pytest.raises(AttributeError, match="hook_patern"):
        block.attn.hook_patern


def test_writing_a_heads_result_is_transformers_with_that_head_removed(transformers, torch):
    """hook_result of head 1 at layer 0 zeroed: the logits of transformers
    with head 1's slice of o_proj's input zeroed (the same change, made
    upstream of the projection)."""
    path = FIXTURES / "qwen2"
    ids = np.load(path / "ref" / "a_ids.npy")
    ours = attn.Model(path)
    Dh = ours.cfg.d_head

    def drop(result, hook):
        result[:, :, 1] = 0
        return result

    got = ours.run_with_hooks(ids, fwd_hooks=[(ours.blocks[0].attn.hook_result.name, drop)])[0]

    def zero_head(layer, z):
        if layer == 0:
            z = z.clone()
            z[..., Dh:2 * Dh] = 0
        return z

    _, _, want = hf_run(transformers, torch, path, ids, o_proj_pre=zero_head)
    close(got, want, "logits with head 1's result removed", rel=1e-4)
    clean = ours.forward(ids).logits
    assert np.abs(clean - want).max() > 1e-3  # the change is visible


def test_norm_scale_write(transformers, torch):
    """ln1.hook_scale doubled at layer 0: ln1.hook_normalized halves there
    (a property: normalized = x / scale * w)."""
    ours = attn.Model(FIXTURES / "qwen2")
    ids = np.load(FIXTURES / "qwen2" / "ref" / "a_ids.npy")
    _, clean = ours.run_with_cache(ids, names_filter="blocks.0.ln1.*")

    def double(scale, hook):
        return scale * 2

    _, cache = ours.run_with_cache(ids, names_filter="blocks.0.ln1.*",
                                   fwd_hooks=[("blocks.0.ln1.hook_scale", double)])
    np.testing.assert_allclose(cache["blocks.0.ln1.hook_normalized"], clean["blocks.0.ln1.hook_normalized"] / 2,
                               rtol=1e-6, atol=1e-7)
