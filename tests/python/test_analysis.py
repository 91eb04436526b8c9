"""attn.value_weighted_norms, attn.attention_rollout, attn.attention_flow
and their ActivationCache methods, against numpy written from the papers'
definitions (docs/interpretability.md): einsum for the norms, a matrix
product for rollout, the minimum over every cut of a small layered graph
for flow (max-flow = min-cut); on Gemma 3 270M (skipped when absent) the
cache's methods against the same numpy on the cache's own tensors."""

import itertools

import numpy as np
import pytest

import attn
from test_model import GEMMA_FRANCE, model

NORM_RTOL = 1e-5


def softmax_rows(rng, *shape, causal=False):
    x = rng.standard_normal(shape) * 2
    if causal:
        L = shape[-1]
        x = np.where(np.tril(np.ones((L, L), dtype=bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def numpy_norms(pattern, v, W_O=None):
    H, Hkv = pattern.shape[0], v.shape[1]
    vv = np.repeat(v.astype(np.float64), H // Hkv, axis=1)  # [S, H, Dh]: head h reads kv head h // group
    f = vv if W_O is None else np.einsum("shd,hdm->shm", vv, W_O.astype(np.float64))
    return np.abs(pattern.astype(np.float64)) * np.linalg.norm(f, axis=-1).T[:, None, :]


@pytest.mark.parametrize("H,Hkv,L,S,Dh,d", [(1, 1, 1, 1, 1, 1), (4, 2, 3, 17, 5, 7), (6, 3, 5, 5, 8, 40)])
def test_value_weighted_norms_against_numpy(H, Hkv, L, S, Dh, d):
    rng = np.random.default_rng(H * 100 + S)
    pattern = softmax_rows(rng, H, L, S)
    v = rng.standard_normal((S, Hkv, Dh)).astype(np.float32)
    W_O = rng.standard_normal((H, Dh, d)).astype(np.float32)
    for wo in (W_O, None):
        want = numpy_norms(pattern, v, wo)
        for reference in (False, True):
            got = attn.value_weighted_norms(pattern, v, wo, reference=reference)
            assert got.shape == (H, L, S) and got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=NORM_RTOL, atol=NORM_RTOL)


def test_exercise_3():
    """v1 = v2 = [2, 1], weights [0.2, 0.8] then [0.7, 0.3]: the norms move
    as the weights do (each alpha * sqrt(5)); the output [2, 1] does not."""
    pattern = np.array([[[0.2, 0.8], [0.7, 0.3]]], dtype=np.float32)
    v = np.array([[[2, 1]], [[2, 1]]], dtype=np.float32)
    norms = attn.value_weighted_norms(pattern, v)
    np.testing.assert_allclose(norms[0], pattern[0] * np.sqrt(5), rtol=1e-6)
    out = np.einsum("ls,sd->ld", pattern[0], v[:, 0])
    np.testing.assert_allclose(out, [[2, 1], [2, 1]], rtol=1e-6)
    np.testing.assert_allclose(norms[0].sum(-1), np.linalg.norm(out, axis=-1), rtol=1e-6)


def test_value_weighted_norms_refuses_bad_shapes():
    with pytest.raises(attn.ShapeError, match="W_O"):
        attn.value_weighted_norms(np.ones((2, 1, 1)), np.ones((1, 1, 3)), np.ones((2, 4, 5)))
    with pytest.raises(attn.ShapeError, match="not a multiple"):
        attn.value_weighted_norms(np.ones((3, 1, 1)), np.ones((1, 2, 3)))


def ahat(patterns, head, residual):
    A = patterns.astype(np.float64).mean(1) if head is None else patterns[:, head].astype(np.float64)
    A = (1 - residual) * A + residual * np.eye(A.shape[-1])
    return A / A.sum(-1, keepdims=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head", [None, 1])
def test_rollout_against_numpy(causal, head):
    rng = np.random.default_rng(7)
    patterns = softmax_rows(rng, 4, 3, 6, 6, causal=causal)
    A = ahat(patterns, head, 0.5)
    want = [A[0]]
    for layer in range(1, 4):
        want.append(A[layer] @ want[-1])
    got = attn.attention_rollout(patterns, head=head)
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1, atol=1e-12)


def min_cut(A, source, sink_position):
    """The smallest cut between input node (0, source) and (N, sink_position)
    over every split of the other nodes: capacities A[l][i, j] on (l, j) -> (l+1, i)."""
    N, L = A.shape[0], A.shape[1]
    nodes = [(l, t) for l in range(N + 1) for t in range(L)]
    free = [n for n in nodes if n not in ((0, source), (N, sink_position))]
    best = np.inf
    for bits in itertools.product((0, 1), repeat=len(free)):
        side = {(0, source)} | {n for n, b in zip(free, bits) if b}
        cut = sum(A[l, i, j] for l in range(N) for i in range(L) for j in range(L)
                  if (l, j) in side and (l + 1, i) not in side)
        best = min(best, cut)
    return best


@pytest.mark.parametrize("causal,head,residual", [(False, None, 0.5), (True, None, 0.5), (True, 2, 0.25)])
def test_flow_is_min_cut(causal, head, residual):
    rng = np.random.default_rng(11)
    patterns = softmax_rows(rng, 3, 3, 3, 3, causal=causal)
    A = ahat(patterns, head, residual)
    for position in range(3):
        got = attn.attention_flow(patterns, position, head=head, residual=residual)
        want = [min_cut(A, j, position) for j in range(3)]
        np.testing.assert_allclose(got, want, atol=1e-9)


def test_flow_refuses_a_large_graph():
    with pytest.raises(attn.ArgumentError, match="ATTN_ATTENTION_FLOW_MAX_NODES"):
        attn.attention_flow(np.ones((4096, 1, 1, 1), dtype=np.float32))


def test_cache_methods_on_gemma():
    m = model("gemma3")
    _, cache = m.run_with_cache(GEMMA_FRANCE)
    single = cache.remove_batch_dim()
    want = numpy_norms(single["pattern", 5], single["v", 5], m.W_O[5])
    got = cache.value_weighted_norms(5)
    assert got.shape == (1, m.cfg.n_heads, 6, 6)
    np.testing.assert_allclose(got[0], want, rtol=NORM_RTOL, atol=NORM_RTOL * want.max())
    np.testing.assert_allclose(single.value_weighted_norms(5, use_W_O=False),
                               numpy_norms(single["pattern", 5], single["v", 5]), rtol=NORM_RTOL, atol=1e-6)
    patterns = single.stack_activation("pattern")
    np.testing.assert_array_equal(cache.attention_rollout()[0], attn.attention_rollout(patterns))
    flow = cache.attention_flow(position=-1)[0]
    np.testing.assert_array_equal(flow, attn.attention_flow(patterns, -1))
    assert flow[0] == pytest.approx(1.0)  # <bos>: every query reads it in every layer


def test_model_methods_on_gemma():
    """Model.value_weighted_norms / attention_rollout / attention_flow are
    the cache's over a run of that text alone."""
    m = model("gemma3")
    _, cache = m.run_with_cache(GEMMA_FRANCE, remove_batch_dim=True)
    np.testing.assert_array_equal(m.value_weighted_norms(GEMMA_FRANCE, 3), cache.value_weighted_norms(3))
    np.testing.assert_array_equal(m.attention_rollout(GEMMA_FRANCE, head=1), cache.attention_rollout(head=1))
    np.testing.assert_array_equal(m.attention_flow(GEMMA_FRANCE, 2), cache.attention_flow(2))
