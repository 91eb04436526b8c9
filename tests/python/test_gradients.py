"""Gradients through the model (issue 37 item 1): run_with_cache(incl_bwd=True)
against torch.autograd through transformers' eager forward of the same
checkpoints (tests/fixtures/tiny_models, four architectures), bwd_hooks,
attn.torch.model_logits' gradient, and attribution patching against real
patching on the real Qwen2.5 model.  Every expected gradient comes from
torch's autograd over transformers' modules, not from attn."""

from pathlib import Path

import numpy as np
import pytest

import attn
from conftest import close_to_largest
from test_model import model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_models"
ARCHS = ["qwen2", "gemma3", "llama", "qwen3"]


def close(ours, theirs, what, rel=1e-4):
    close_to_largest(ours, theirs, what, rel)


def torch_gradients(tr, torch, path, ids):
    """transformers' loss over ids and the gradients torch's autograd gives
    at the stream into each layer, ln1's output, the attention weights and
    down_proj's input."""
    hf = tr.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    kept, handles = {}, []

    def keep(name, take):
        def hook(module, args, output):
            t = take(args, output)
            t.retain_grad()
            kept[name] = t
        return hook

    for l, layer in enumerate(hf.model.layers):
        handles.append(layer.input_layernorm.register_forward_hook(keep(f"{l}.ln1", lambda a, o: o)))
        handles.append(layer.mlp.down_proj.register_forward_hook(keep(f"{l}.post", lambda a, o: a[0])))
    x = torch.tensor(ids[None], dtype=torch.long)
    out = hf(input_ids=x, labels=x, output_hidden_states=True, output_attentions=True)
    for t in out.hidden_states[:-1] + out.attentions:
        t.retain_grad()
    out.loss.backward()
    for h in handles:
        h.remove()
    return hf, out, kept


@pytest.mark.parametrize("name", ARCHS)
def test_loss_gradients_are_torch_autograd(transformers, torch, name):
    path = FIXTURES / name
    ids = np.load(path / "ref" / "a_ids.npy")
    ours = attn.Model(path)
    loss, cache = ours.run_with_cache(ids, return_type="loss", incl_bwd=True, remove_batch_dim=True)
    hf, out, kept = torch_gradients(transformers, torch, path, ids)
    hf_loss = float(out.loss.detach())
    assert abs(loss - hf_loss) <= 1e-5 * abs(hf_loss)
    g = lambda t: t.grad[0].numpy()
    close(cache["hook_embed_grad"], g(out.hidden_states[0]), "hook_embed_grad")
    for l in range(ours.cfg.n_layers):
        b = f"blocks.{l}."
        close(cache[b + "hook_resid_pre_grad"], g(out.hidden_states[l]), b + "hook_resid_pre_grad")
        close(cache[b + "ln1.hook_normalized_grad"], g(kept[f"{l}.ln1"]), b + "ln1.hook_normalized_grad")
        close(cache[b + "attn.hook_pattern_grad"], g(out.attentions[l]), b + "attn.hook_pattern_grad")
        close(cache[b + "mlp.hook_post_grad"], g(kept[f"{l}.post"]), b + "mlp.hook_post_grad")
    assert not any(k.endswith("_input_grad") for k in cache)  # the per-head inputs have none


def test_bwd_hooks_and_torch_function(transformers, torch):
    """bwd_hooks see the cached gradient; a custom metric (a logit
    difference) differentiated by torch; attn.torch.model_logits' embed.grad
    is the backward's hook_embed gradient."""
    import attn.torch

    path = FIXTURES / "qwen2"
    ours = attn.Model(path)
    ids = np.load(path / "ref" / "a_ids.npy")
    metric = lambda logits: logits[0, -1, 3] - logits[0, -1, 5]
    _, cache = ours.run_with_cache(ids, incl_bwd=True, metric=metric, names_filter=["hook_embed", "blocks.1.*"])
    seen = {}

    def look(grad, hook):
        seen[hook.name] = grad.copy()

    ours.run_with_hooks(ids, bwd_hooks=[("blocks.1.hook_resid_mid", look)], metric=metric)
    np.testing.assert_array_equal(seen["blocks.1.hook_resid_mid"], cache["blocks.1.hook_resid_mid_grad"])
    assert "blocks.0.hook_resid_mid_grad" not in cache  # names_filter applies to gradients too
    embed = torch.from_numpy(np.array(cache["hook_embed"][0])).requires_grad_(True)
    logits = attn.torch.model_logits(ours, ids, embed)
    np.testing.assert_allclose(logits.detach().numpy(), ours.forward(ids).logits, rtol=1e-5, atol=1e-5)
    (logits[-1, 3] - logits[-1, 5]).backward()
    np.testing.assert_allclose(embed.grad.numpy(), cache["hook_embed_grad"][0], rtol=1e-6, atol=1e-7)


def test_attribution_patching_against_real_patching(plain_build_only):
    """On the real Qwen2.5, the stream at the one differing position of
    "France" / "Italy", layer by layer.  The estimate is the first-order
    term of real patching: patching +-alpha of the difference moves the
    metric by +-alpha times the estimate up to O(alpha^2) (the central
    difference at alpha = 1e-2, within 2%); the whole patch (alpha = 1) is where the
    linear approximation's error shows: same sign where the effect is
    large, correlated across layers (the figures are printed;
    docs/interpretability.md quotes them)."""
    m = model("qwen2")
    clean, corrupt = "The capital of France is", "The capital of Italy is"
    a, b = m.tokenize(clean), m.tokenize(corrupt)
    assert a.size == b.size
    where = int(np.flatnonzero(a != b)[0])
    paris, rome = m.to_single_token(" Paris"), m.to_single_token(" Rome")
    metric = lambda logits: logits[0, -1, paris] - logits[0, -1, rome]
    estimate = m.attribution_patching(clean, corrupt, metric, names_filter="blocks.*.hook_resid_pre")
    _, clean_cache = m.run_with_cache(clean, names_filter="blocks.*.hook_resid_pre")
    _, corrupt_cache = m.run_with_cache(corrupt, names_filter="blocks.*.hook_resid_pre")
    base = m.forward(clean).logits
    base_metric = float(base[-1, paris] - base[-1, rome])

    def patched_metric(name, alpha):
        def patch(x, hook):
            x[0, where] = (1 - alpha) * clean_cache[name][0, where] + alpha * corrupt_cache[name][0, where]
            return x

        out = m.run_with_hooks(clean, fwd_hooks=[(name, patch)])[0]
        return float(out[-1, paris] - out[-1, rome]) - base_metric

    N = m.cfg.n_layers
    layers = sorted(set(range(0, N, 4)) | {N - 4, N - 3, N - 2, N - 1})  # every fourth, and the last four
    real, linear = [], []
    for l in layers:
        name = f"blocks.{l}.hook_resid_pre"
        real.append(patched_metric(name, 1.0))
        linear.append(float(estimate[name][0, where]))
    real, linear = np.array(real), np.array(linear)
    print("real patching:", np.round(real, 3), "\nattribution: ", np.round(linear, 3),
          "\ncorrelation:", np.corrcoef(real, linear)[0, 1])
    for i in (0, len(layers) - 2):
        name = f"blocks.{layers[i]}.hook_resid_pre"
        small = (patched_metric(name, 1e-2) - patched_metric(name, -1e-2)) / 2e-2  # central: O(alpha^2) error
        assert abs(small - linear[i]) <= 0.02 * abs(linear[i]) + 1e-2, (layers[i], small, linear[i])
    big = np.abs(real) > 0.25 * np.abs(real).max()
    assert np.all(np.sign(real[big]) == np.sign(linear[big]))
    assert np.corrcoef(real, linear)[0, 1] > 0.5


def test_attribution_patching_at_aligned_positions():
    """positions= against the same estimate written out from the two
    caches: runs of 7 and 11 tokens compared at [-1, 0, 2] (the last of
    each, then indices in both); between runs of one length the pattern is
    taken at positions on both axes; the errors name what is wrong."""
    path = FIXTURES / "qwen2"
    m = attn.Model(path)
    a, b = np.load(path / "ref" / "a_ids.npy"), np.load(path / "ref" / "b_ids.npy")
    assert (a.size, b.size) == (7, 11)
    names = ["blocks.*.hook_resid_pre", "blocks.1.attn.hook_z"]
    got = m.attribution_patching(a, b, names_filter=names, positions=[-1, 0, 2])
    _, clean = m.run_with_cache(a, names_filter=names, incl_bwd=True)
    _, corrupt = m.run_with_cache(b, names_filter=names)
    at_a, at_b = [6, 0, 2], [10, 0, 2]
    assert set(got) == {n for n in clean if not n.endswith("_grad")}
    for name, value in got.items():
        c = clean[name][:, at_a].astype(np.float64)
        want = ((corrupt[name][:, at_b] - c) * clean[name + "_grad"][:, at_a]).sum(-1)
        assert value.shape == ((1, 3) if name.endswith("resid_pre") else (1, 3, m.cfg.n_heads))
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(), err_msg=name)
    changed = a.copy()
    changed[3] = 42
    pattern = "blocks.1.attn.hook_pattern"
    whole = m.attribution_patching(a, changed, names_filter=pattern)[pattern]
    picked = m.attribution_patching(a, changed, names_filter=pattern, positions=[-1, 4])[pattern]
    np.testing.assert_array_equal(picked, whole[:, :, [6, 4]][:, :, :, [6, 4]])
    with pytest.raises(ValueError, match="hook_pattern: .* need runs of one length"):
        m.attribution_patching(a, b, names_filter=pattern, positions=[-1])
    with pytest.raises(ValueError, match="the runs need the same tokens count, or positions="):
        m.attribution_patching(a, b, names_filter=names)
    with pytest.raises(ValueError, match="positions: 8 is outside the clean run's 7 tokens"):
        m.attribution_patching(a, b, names_filter=names, positions=[8])
    with pytest.raises(ValueError, match="positions: -8 is outside the corrupted run's 7 tokens"):
        m.attribution_patching(b, a, names_filter=names, positions=[-8])
    with pytest.raises(TypeError, match="positions: a non-empty list of ints"):
        m.attribution_patching(a, b, names_filter=names, positions=-1)


def test_attribution_patching_between_the_chapters_sentences(plain_build_only):
    """The chapter's two sentences on the real Qwen2.5, of different lengths
    and both ending in 苹果: metric logit(公司) - logit(，) at the last
    position (，: the clean run's top-1; 公司: the corrupted run's top token
    other than it), the stream into each layer at -1 (positions=[-1])
    against really patching that one row (what `attn model trace --patch
    'blocks.*.hook_resid_pre@-1' --sweep-layers --answer 公司` prints,
    docs/model-trace.md).  What the linear approximation guarantees: the
    central difference of a +-1% patch is the estimate within 1%, and an
    unchanged row (layer 0: 苹果's embedding, the same token) gives 0 both
    ways.  At full strength (figures printed, docs/interpretability.md
    quotes them): the same sign at every layer, correlated across layers."""
    m = model("qwen2")
    clean, corrupt = "我吃了一个苹果", "这台电脑来自苹果"
    a, b = m.tokenize(clean), m.tokenize(corrupt)
    assert a.size != b.size and a[-1] == b[-1] == m.to_single_token("苹果")
    clean_last, corrupt_last = m.forward(clean).logits[-1], m.forward(corrupt).logits[-1]
    wrong = int(np.argmax(clean_last))
    answer = int(next(t for t in np.argsort(-corrupt_last) if t != wrong))
    assert (m.detokenize([wrong]), m.detokenize([answer])) == ("，", "公司")
    metric = lambda logits: logits[0, -1, answer] - logits[0, -1, wrong]
    estimate = m.attribution_patching(clean, corrupt, metric, names_filter="blocks.*.hook_resid_pre",
                                      positions=[-1])
    _, clean_cache = m.run_with_cache(clean, names_filter="blocks.*.hook_resid_pre")
    _, corrupt_cache = m.run_with_cache(corrupt, names_filter="blocks.*.hook_resid_pre")
    base = float(clean_last[answer] - clean_last[wrong])

    def patched_metric(name, alpha):
        def patch(x, hook):
            x[0, -1] = clean_cache[name][0, -1] + alpha * (corrupt_cache[name][0, -1] - clean_cache[name][0, -1])
            return x

        out = m.run_with_hooks(clean, fwd_hooks=[(name, patch)], last_only=True)[0]
        return float(out[-1, answer] - out[-1, wrong]) - base

    N = m.cfg.n_layers
    real, linear = np.zeros(N), np.zeros(N)
    for l in range(N):
        name = f"blocks.{l}.hook_resid_pre"
        assert estimate[name].shape == (1, 1)
        real[l], linear[l] = patched_metric(name, 1.0), estimate[name][0, 0]
    correlation = np.corrcoef(real, linear)[0, 1]
    agree = int(np.sum(np.sign(real) == np.sign(linear)))
    print(f"metric logit(公司) - logit(，) = {base:.4f}; change per layer 0 .. {N - 1}:",
          "\nreal patching:", np.round(real, 3), "\nattribution:  ", np.round(linear, 3),
          f"\ncorrelation {correlation:.3f}, same sign at {agree} of {N} layers")
    assert real[0] == 0 and linear[0] == 0
    for l in (1, N // 2, N - 1):
        name = f"blocks.{l}.hook_resid_pre"
        small = (patched_metric(name, 1e-2) - patched_metric(name, -1e-2)) / 2e-2  # central: O(alpha^2) error
        assert abs(small - linear[l]) <= 0.01 * abs(linear[l]), (l, small, linear[l])
    assert agree == N
    assert correlation > 0.4


def test_weights_not_an_explanation_on_every_head():
    """Every head of a Gemma 3 layer, the last query of the chapter's
    sentence: each row found is a distribution over the visible keys (non-
    negative, the row's sum) whose z differs from the head's own by at most
    the tolerance (checked here with the cache's v rows in float64).  On 5
    keys against Dh = 256 the v rows are independent, so no row can move
    beyond the tolerance's slack: the search says so (l1 small) rather
    than inventing a move."""
    m = model("gemma3")
    text, layer, tol = "我吃了一个苹果", 3, 1e-3
    heads = m.weights_not_explanation(text, layer, tolerance=tol)
    _, cache = m.run_with_cache(text, names_filter=[f"blocks.{layer}.attn.hook_v", f"blocks.{layer}.attn.hook_attn_scores"],
                                remove_batch_dim=True)
    v, scores = cache[f"blocks.{layer}.attn.hook_v"], cache[f"blocks.{layer}.attn.hook_attn_scores"]
    group = m.cfg.n_heads // m.cfg.n_key_value_heads
    assert len(heads) == m.cfg.n_heads
    for r in heads:
        h, w, moved = r["head"], r["weights"].astype(np.float64), r["moved"]
        hidden = ~np.isfinite(scores[h, -1])
        assert np.all(moved >= -1e-9) and np.all(moved[hidden] == 0)
        assert abs(moved.sum() - w.sum()) < 1e-5
        vals = v[:, h // group].astype(np.float64)
        assert np.abs((moved - w) @ vals).max() <= tol * (1 + 1e-6)
        assert abs(np.abs(moved - w).sum() - r["l1"]) < 1e-6
    print("L1 moves per head:", [round(r["l1"], 6) for r in heads])
    assert all(0 <= r["l1"] < 0.05 for r in heads)
